"""Checking a store's log: every chain gap-free, in order, and hash-linked; nothing cut off its end.

This reads `events.jsonl` itself, line by line, rather than the store's parsed view, so that it judges the
bytes on disk and can name lines. Per chain (a run, or a session's own events) it expects seq 1, 2, 3... in
file order, each `prev_hash` equal to the previous event's `hash`, and each `hash` equal to the recomputed
one. That catches an edited event (hash mismatch), a deleted or truncated middle (seq gap, broken link), and
reordered lines (seq going backwards). Cutting events off the *end* of a chain leaves a valid shorter chain,
so the runs table's checkpoint (the last seq it saw at a wait, decision or end) is compared too.

A torn last line (bytes after the last newline that are not a JSON object) is a crash, not tampering: a
warning, not a failure. A last line that is a whole JSON object but lacks its newline is an event like any
other and is checked like one (a warning says the newline is missing; the next writer adds it).

Event types this version does not know (a newer nbagent wrote them) are checked like any other: the hash covers
the raw line, whatever its type. `tables.json` is a cache: when it is damaged the log is still checked, the
damage is a warning, and only the end-of-run checkpoint comparison (which needs the cache) is skipped.
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
    tail = lines.pop()  # after the last newline: empty, a whole event lacking its newline, or a torn line
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
    if tail.strip():
        _check_tail(report, store, tail, len(lines) + 1, chains)
    heads = {key: _check_chain(report, key, entries) for key, entries in chains.items()}
    _check_grants(store, report, chains)
    damage = store.tables_problem()
    if damage is None:
        _check_checkpoints(store, report, heads)
    else:
        report.warnings.append(
            f"{store.tables_path}: the runs and sessions cache is damaged ({damage}); the event log was checked "
            "without it, so events cut off the end of a run cannot be detected. A write to this notebook's log "
            "rebuilds it from the events"
        )
    report.runs = sum(1 for k in chains if not k.startswith("session:"))
    report.sessions = sum(1 for k in chains if k.startswith("session:"))
    report.problems.sort(key=lambda p: (p.line is None, p.line or 0))
    return report


def _check_grants(store: Store, report: Report, chains: dict[str, list[tuple[int, dict[str, Any]]]]) -> None:
    """Every grant is backed by the decision that gave it (nbagent/grants.py `vouched`): a `grant_given` with no
    decision listing it with the same terms was written by hand, and the runtime ignores it; an auditor should know."""
    from .grants import from_events, vouched

    where = {r.get("id"): (n, key) for key, entries in chains.items() for n, r in entries
             if r.get("type") == "grant_given"}
    if not where:
        return
    try:
        given = from_events(store.query_events(types=["grant_given", "grant_revoked"]))
    except Exception as exc:  # a log this damaged already has its problems listed
        report.warnings.append(f"grants not checked: {exc}")
        return
    ids = {g.grant_id: g for g in given.values()}
    for event in store.query_events(types="grant_given"):
        g = ids.get(event.payload.grant_id)  # type: ignore[attr-defined]
        if g is not None and not vouched(store, g):
            line, key = where.get(event.id, (None, None))
            report.problems.append(Problem(line, event.id, key, f"grant {g.grant_id} is not backed by a decision "
                                           "that gave it with these terms (written by hand?); nbagent ignores it"))


def _check_tail(report: Report, store: Store, tail: bytes, number: int,
                chains: dict[str, list[tuple[int, dict[str, Any]]]]) -> None:
    """The same rule as the readers: a tail that parses and chains on is an event, anything else is torn."""
    try:
        record: dict[str, Any] | None = load_record(tail)
    except ValueError:
        record = None
    if record is not None and all(k in record for k in REQUIRED):
        key = chain_key(record.get("run_id"), record["session_id"])
        last = chains[key][-1][1] if key in chains else {"seq": 0, "hash": None}
        if _chains_on(record, last):
            report.events += 1
            chains.setdefault(key, []).append((number, record))
            report.warnings.append(
                f"{store.events_path}: line {number} (the last) has no final newline; a whole event that chains "
                "on, kept (the next writer adds the newline)"
            )
            return
    if record is not None:
        report.warnings.append(
            f"{store.events_path}: line {number} (the last, no final newline) is a JSON object that does not chain "
            "on, so not an event (a torn or foreign line); ignored, and the next writer removes it"
        )
        return
    report.warnings.append(
        f"{store.events_path}: the last line is incomplete ({len(tail)} bytes, a crash mid-write); ignored, and "
        "the next writer removes it"
    )


def _chains_on(record: dict[str, Any], last: dict[str, Any]) -> bool:
    try:
        return (record["seq"] == last["seq"] + 1 and record.get("prev_hash") == last["hash"]
                and compute_hash(record) == record["hash"])
    except (TypeError, ValueError):
        return False


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
        expected = row.get("last_seq") or 0
        if not isinstance(expected, int):
            continue  # a damaged cached row checks nothing
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
