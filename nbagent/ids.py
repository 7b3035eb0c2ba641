"""Identifiers.

Every id nbagent writes is a ULID: globally unique without coordination (two kernels on one notebook never
collide, unlike TinyDB's per-process counters) and sortable by creation time, so a listing sorted by id is a
listing sorted by age.
"""

from __future__ import annotations

from datetime import UTC, datetime

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
