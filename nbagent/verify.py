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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .events import PAYLOADS, chain_key, compute_hash, load_record
from .store import Store

REQUIRED = ("id", "session_id", "seq", "type", "ts", "payload", "hash")


@dataclass
class Problem:
    line: int | None
    event_id: str | None
    chain: str | None
    message: str

    def __str__(self) -> str:
        where = [f"line {self.line}" if self.line is not None else "log"]
        if self.event_id:
            where.append(f"event {self.event_id}")
        if self.chain:
            where.append(f"({self.chain})" if self.chain.startswith("session:") else f"(run {self.chain})")
        return f"{' '.join(where)}: {self.message}"


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


def verify_store(store: Store) -> Report:
    report = Report(path=store.events_path)
    chains: dict[str, list[tuple[int, dict[str, Any]]]] = {}
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
            record = load_record(raw)
        except ValueError as exc:
            report.problems.append(Problem(number, None, None, f"not a valid JSON event ({exc}): edited or cut"))
            continue
        report.events += 1
        missing = [k for k in REQUIRED if k not in record]
        if missing:
            event_id = record.get("id") if isinstance(record.get("id"), str) else None
            report.problems.append(Problem(number, event_id, None, f"missing fields {', '.join(missing)}"))
            continue
        if record["type"] not in PAYLOADS:
            report.warnings.append(f"line {number}: unknown event type {record['type']!r} (a newer nbagent?)")
        chains.setdefault(chain_key(record.get("run_id"), record["session_id"]), []).append((number, record))
    heads = {key: _check_chain(report, key, entries) for key, entries in chains.items()}
    _check_checkpoints(store, report, heads)
    report.runs = sum(1 for k in chains if not k.startswith("session:"))
    report.sessions = sum(1 for k in chains if k.startswith("session:"))
    report.problems.sort(key=lambda p: (p.line is None, p.line or 0))
    return report


def _check_chain(report: Report, key: str, entries: list[tuple[int, dict[str, Any]]]) -> tuple[int, str | None]:
    """Report the first problem of one chain; returns its (last seq, last hash)."""
    expected_prev: str | None = None
    seqs = [r.get("seq") for _, r in entries]
    for position, (number, record) in enumerate(entries):
        want = position + 1
        seq = record["seq"]

        def bad(message: str, number: int = number, record: dict[str, Any] = record) -> tuple[int, str | None]:
            report.problems.append(Problem(number, record["id"], key, message))
            return entries[-1][1]["seq"], entries[-1][1]["hash"]

        if compute_hash(record) != record["hash"]:
            return bad("hash does not match the content: the event was edited after it was written")
        if seq != want:
            if want in seqs[position + 1:]:
                later = entries[seqs.index(want, position + 1)][0]
                return bad(f"seq {seq} comes before seq {want} (line {later}): events were reordered")
            if isinstance(seq, int) and seq > want:
                return bad(f"seq jumps from {want - 1} to {seq}: {seq - want} event(s) before it were removed")
            return bad(f"seq {seq!r} where {want} was expected: events were duplicated or renumbered")
        if record.get("prev_hash") != expected_prev:
            return bad("prev_hash does not match the previous event's hash: the chain was broken")
        expected_prev = record["hash"]
    last = entries[-1][1]
    return last["seq"], last["hash"]


def _check_checkpoints(store: Store, report: Report, heads: dict[str, tuple[int, str | None]]) -> None:
    for row in store.runs.all():
        run_id = str(row.doc_id)
        expected = int(row.get("last_seq") or 0)
        have, last_hash = heads.get(run_id, (0, None))
        if have < expected:
            report.problems.append(Problem(
                None, None, run_id,
                f"the log ends at seq {have} but the runs table saw seq {expected} at its last checkpoint: "
                f"{expected - have} event(s) were removed from the end",
            ))
        elif have == expected and row.get("last_hash") not in (None, last_hash):
            report.problems.append(Problem(
                None, None, run_id, f"the last event (seq {have}) differs from the one the runs table recorded",
            ))
