"""Identifiers.

Every id nbagent writes is a ULID: globally unique without coordination (two kernels on one notebook never
collide, unlike TinyDB's per-process counters) and sortable by creation time, so a listing sorted by id is a
listing sorted by age.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ulid import ULID


def new_id() -> str:
    return str(ULID())


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso(ts: datetime) -> str:
    """Fixed-width UTC timestamp, so timestamps compare correctly as strings (time-range queries)."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_iso() -> str:
    return iso(utcnow())


# ------------------------------------------------------------------------------------------------ call ids
# (the rule, and why, is approval.py's: "Identity belongs to nbagent"; they live here, below the gate, because
# the run state that folds the log needs them as much as the gate does)


def assign_call_ids(model_call: int, count: int) -> list[str]:
    """nbagent's ids for the `count` tool calls of a run's `model_call`-th reply (1-based)."""
    return [f"nb{model_call}_{i}" for i in range(count)]


def identify(model_ids: list[Any], assigned: list[str] | None, seen: set[str], fallback: str) -> list[str]:
    """The ids a reply's calls are known by in this run, each unique; `seen` is updated.

    `assigned` are the ids in the `llm_called` event; None for a log from before nbagent owned the ids, where
    the model's id is kept if unique and `fallback` (the event's id) makes a fresh one otherwise.
    """
    out: list[str] = []
    for i, model_id in enumerate(model_ids):
        if assigned is not None and i < len(assigned):
            candidate = str(assigned[i])
        else:
            candidate = model_id if isinstance(model_id, str) and model_id else ""
        if not candidate or candidate in seen:
            candidate = f"{fallback}_{i}"
        seen.add(candidate)
        out.append(candidate)
    return out
