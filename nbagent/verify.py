"""Checking a store's log: every chain gap-free, in order, and hash-linked; nothing cut off its end.

This reads `events.jsonl` itself, line by line, rather than the store's parsed view, so that it judges the
bytes on disk and can name lines. Per chain (a run, or a session's own events) it expects seq 1, 2, 3... in
file order, each `prev_hash` equal to the previous event's `hash`, and each `hash` equal to the recomputed
one. That catches an edited event (hash mismatch), a deleted or truncated middle (seq gap, broken link), and
reordered lines (seq going backwards). Cutting events off the *end* of a chain leaves a valid shorter chain,
so the runs table's checkpoint (the last seq it saw at a wait, decision or end) is compared too.

A torn last line is a crash, not tampering: reported as a warning, not a failure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .events import PAYLOADS, chain_key, compute_hash
from .store import Store

REQUIRED = ("id", "session_id", "seq", "type", "ts", "payload", "hash")


@dataclass
class Problem:
    line: int | None
    event_id: str | None
    chain: str | None
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line is not None else "log"
        who = f" event {self.event_id}" if self.event_id else ""
        run = f" ({'run ' + self.chain if not self.chain.startswith('session:') else self.chain})" if self.chain else ""
        return f"{where}:{who}{run}: {self.message}"


@dataclass
class Report:
    path: Path
    events: int = 0
    runs: int = 0
    sessions: int = 0
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class _Head:
    seq: int = 0
    hash: str | None = None
    broken: bool = False  # after the first problem in a chain, later links are not reported again


def verify_store(store: Store) -> Report:
    report = Report(path=store.events_path)
    heads: dict[str, _Head] = {}
    try:
        data = store.events_path.read_bytes()
    except FileNotFoundError:
        data = b""
    lines = data.split(b"\n")
    torn = lines.pop()  # after the last newline: empty, or a torn last line
    if torn.strip():
        report.warnings.append(
            f"{store.events_path}: the last line is incomplete ({len(torn)} bytes, a crash mid-write); ignored"
        )
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            report.problems.append(Problem(number, None, None, f"not a valid JSON event ({exc}): edited or cut"))
            continue
        report.events += 1
        _check_record(report, heads, number, record)
    _check_checkpoints(store, report, heads)
    report.runs = sum(1 for k in heads if not k.startswith("session:"))
    report.sessions = sum(1 for k in heads if k.startswith("session:"))
    return report


def _check_record(report: Report, heads: dict[str, _Head], number: int, record: dict[str, Any]) -> None:
    missing = [k for k in REQUIRED if k not in record]
    event_id = record.get("id") if isinstance(record.get("id"), str) else None
    if missing:
        report.problems.append(Problem(number, event_id, None, f"missing fields {', '.join(missing)}"))
        return
    key = chain_key(record.get("run_id"), record["session_id"])
    head = heads.setdefault(key, _Head())
    seq = record["seq"]

    def bad(message: str) -> None:
        if not head.broken:
            report.problems.append(Problem(number, event_id, key, message))
        head.broken = True

    if record["type"] not in PAYLOADS:
        report.warnings.append(f"line {number}: unknown event type {record['type']!r} (a newer nbagent?)")
    if compute_hash(record) != record["hash"]:
        bad("hash does not match the content: the event was edited after it was written")
    elif not isinstance(seq, int) or seq < 1:
        bad(f"invalid seq {seq!r}")
    elif seq <= head.seq:
        bad(f"seq {seq} comes after seq {head.seq}: events were reordered or duplicated")
    elif seq > head.seq + 1:
        missing_n = seq - head.seq - 1
        bad(f"seq jumps from {head.seq} to {seq}: {missing_n} event(s) before it were removed")
    elif record.get("prev_hash") != head.hash:
        bad("prev_hash does not match the previous event's hash: the chain was broken")
    head.seq, head.hash = seq if isinstance(seq, int) else head.seq, record["hash"]


def _check_checkpoints(store: Store, report: Report, heads: dict[str, _Head]) -> None:
    for row in store.runs.all():
        run_id = str(row.doc_id)
        expected = int(row.get("last_seq") or 0)
        head = heads.get(run_id)
        have = head.seq if head else 0
        if have < expected:
            report.problems.append(Problem(
                None, None, run_id,
                f"the log ends at seq {have} but the runs table saw seq {expected} at its last checkpoint: "
                f"{expected - have} event(s) were removed from the end",
            ))
        elif head and have == expected and row.get("last_hash") not in (None, head.hash) and not head.broken:
            report.problems.append(Problem(
                None, None, run_id, f"the last event (seq {have}) differs from the one the runs table recorded",
            ))
