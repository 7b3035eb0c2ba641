"""Checking a store's log: every chain gap-free, in order, and hash-linked; nothing cut off its end.

This reads `events.jsonl` itself, line by line, rather than the store's parsed view, so that it judges the
bytes on disk and can name lines. Per chain (a run, or a session's own events) it expects seq 1, 2, 3... in
file order, each `prev_hash` equal to the previous event's `hash`, and each `hash` equal to the recomputed
one. That catches an edited event (hash mismatch), a deleted or truncated middle (seq gap, broken link), and
reordered lines (seq going backwards). Cutting events off the *end* of a chain leaves a valid shorter chain,
so the tables' checkpoints are compared too: a run's row keeps the last seq and hash it saw at a wait, decision or
end, and a session's row those of the session's own chain (grants and revokes: a deleted `grant_revoked` would bring
a grant back). The tables are read before the log, so an event appended meanwhile never looks removed.

The tables live beside the log, so whoever cuts a chain can damage or edit them too. Each chain's head is also kept
outside the project, in this user's anchor of the store (store/anchor.py), read before the log as well: a chain
shorter than its anchor, or different at the anchor's seq, is named whatever the tables say. A store this user's
anchor folder never saw (a fresh clone) has no anchor and is checked as before.

Grants are checked against what backs them (`grants.unbacked`): a `grant_given` no decision (or, for a replay's
standing grant, no `context_assembled`) gave with these terms, and a second `grant_given` of an id already given
(grant events are immutable: the first is the grant), are problems; nbagent ignores both.

`events.jsonl` is opened without blocking and must be a regular file: a FIFO or a device in its place is a
problem named in one line, never a wait.

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

from nbagent.events.model import PAYLOADS, EventBase, chain_key, compute_hash, load_record
from nbagent.store import Store
from nbagent.store.errors import NotAFile
from nbagent.store.regular import read_regular

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
    damage = store.tables_problem()  # the checkpoints first: what they saw was in the log before it is read
    checkpoints = (store.runs.all(), store.sessions.all()) if damage is None else None
    anchors = dict(store.anchors.heads())  # (also read before the log)
    if store.anchors.problem:
        report.warnings.append(store.anchors.problem)
    try:
        data = read_regular(store.events_path)
    except FileNotFoundError:
        data = b""
    except NotAFile as exc:
        report.problems.append(Problem(None, None, None, f"{exc}; nothing was checked"))
        return report
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
    if checkpoints is not None:
        _check_checkpoints(report, heads, chains, *checkpoints)
    else:
        report.warnings.append(
            f"{store.tables_path}: the runs and sessions cache is damaged ({damage}); the event log was checked "
            "without it, so events cut off the end of a run cannot be detected. A write to this notebook's log "
            "rebuilds it from the events"
        )
    _check_anchors(report, store, anchors, heads, chains)
    report.runs = sum(1 for k in chains if not k.startswith("session:"))
    report.sessions = sum(1 for k in chains if k.startswith("session:"))
    report.problems.sort(key=lambda p: (p.line is None, p.line or 0))
    return report


def _check_grants(store: Store, report: Report, chains: dict[str, list[tuple[int, dict[str, Any]]]]) -> None:
    """Every grant is backed by what gave it (nbagent/gate/grant_backing.py `unbacked`), and given once: a
    `grant_given` no decision lists with the same terms was written by hand, a second one of an id is a copy
    (extending or widening a grant); the runtime ignores both, and an auditor should know."""
    from nbagent.events.model import parse_event
    from nbagent.gate.grant_backing import UNSOUND_RUN, UNSOUND_SESSION, duplicated, unbacked
    from nbagent.gate.grants import from_events

    records = sorted(((n, key, r) for key, entries in chains.items() for n, r in entries
                      if r.get("type") in ("grant_given", "grant_revoked")), key=lambda t: t[0])
    events, where = [], {}
    for n, key, record in records:
        try:
            event = parse_event(record)
        except Exception as exc:  # a grant event with a valid hash that nbagent cannot read was not written by it
            report.problems.append(Problem(n, record.get("id"), key, f"a {record['type']} nbagent cannot read "
                                           f"({type(exc).__name__}): not written by nbagent; it is ignored"))
            continue
        events.append(event)
        where[id(event)] = (n, key)
    for copy in duplicated(events):
        n, key = where[id(copy)]
        gid = copy.payload.grant_id  # type: ignore[attr-defined]
        report.problems.append(Problem(n, copy.id, key, f"grant {gid} is given a second time (a copy of an earlier "
                                       "grant_given: grant events are immutable, the first is the grant); nbagent "
                                       "ignores this one"))
    given = from_events(events)
    firsts: dict[str, EventBase] = {}
    for e in events:
        if e.type == "grant_given":
            firsts.setdefault(e.payload.grant_id, e)  # type: ignore[attr-defined]
    for gid, grant in given.items():
        try:
            why = unbacked(store, grant)
        except Exception as exc:  # a log this damaged already has its problems listed
            report.warnings.append(f"grant {gid} not checked: {exc}")
            continue
        if why in (None, UNSOUND_RUN, UNSOUND_SESSION):  # (a chain that does not verify is named once, itself)
            continue
        first = firsts[gid]
        n, key = where[id(first)]
        report.problems.append(Problem(n, first.id, key, f"grant {gid} is not backed by a decision that gave it "
                                       f"with these terms: {why} (written by hand?); nbagent ignores it"))


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
        return bool(record["seq"] == last["seq"] + 1 and record.get("prev_hash") == last["hash"]
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


def _check_checkpoints(report: Report, heads: dict[str, tuple[int, str | None]],
                       chains: dict[str, list[tuple[int, dict[str, Any]]]], runs: list[Any], sessions: list[Any]
                       ) -> None:
    """Each run's and each session's chain reaches the checkpoint its table row recorded: an event at that seq, with
    that hash (so an end removed, or the checkpointed event replaced, is named)."""
    for table, rows, prefix in (("runs", runs, ""), ("sessions", sessions, "session:")):
        for row in rows:
            key = prefix + str(row.doc_id)
            expected = row.get("last_seq") or 0
            if not isinstance(expected, int):
                continue  # a damaged cached row checks nothing
            have, _ = heads.get(key, (0, None))
            if have < expected:
                report.problems.append(Problem(
                    None, None, key,
                    f"the log ends at seq {have} but the {table} table saw seq {expected} at its last checkpoint: "
                    f"{expected - have} event(s) were removed from the end",
                ))
                continue
            at = next((r.get("hash") for _, r in chains.get(key, []) if r.get("seq") == expected), None)
            if expected and row.get("last_hash") not in (None, at):
                report.problems.append(Problem(
                    None, None, key, f"the event at seq {expected} differs from the one the {table} table recorded "
                    "at its last checkpoint: it was replaced",
                ))


def _check_anchors(report: Report, store: Store, anchors: dict[str, tuple[int, str, str]],
                   heads: dict[str, tuple[int, str | None]], chains: dict[str, list[tuple[int, dict[str, Any]]]]
                   ) -> None:
    """Each chain reaches the head this user's anchor saw (outside the project, so a damaged or edited tables.json
    cannot hide a cut). A chain the checkpoints already named is not named twice; a chain absent from the log is
    named only if the anchor was written by this very store (not by an earlier one made at the same place)."""
    named = {p.chain for p in report.problems if p.line is None}
    where = f"this user's anchor ({store.anchors.path}) saw"
    undo = "if you restored an older copy of this log on purpose, delete that file"
    for key, (expected, digest, identity) in anchors.items():
        if key in named:
            continue
        if key not in chains:
            if identity and identity == store.identity:
                report.problems.append(Problem(None, None, key, f"the log has no event of this chain but {where} seq "
                                               f"{expected}: the chain was removed; {undo}"))
            continue
        have, _ = heads.get(key, (0, None))
        if have < expected:
            report.problems.append(Problem(None, None, key, f"the log ends at seq {have} but {where} seq {expected}: "
                                           f"{expected - have} event(s) were removed from the end; {undo}"))
            continue
        at = next((r.get("hash") for _, r in chains[key] if r.get("seq") == expected), None)
        if at != digest:
            report.problems.append(Problem(None, None, key, f"the event at seq {expected} is not the one {where}: it "
                                           f"was replaced; {undo}"))
