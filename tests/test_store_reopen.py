"""The event log's lazy index and the store's held write lock (nbagent/store/), through the store's public face.

A reopened store reads exactly what was written, chain by chain, without parsing every line up front (a query on
type and time never reads a line that cannot match: a damaged one there goes unnoticed); lines that are not
canonical JSON are still read; a line damaged inside is skipped with a warning when read (and `verify` reports
it, as it reads the file itself); the memory that parsed events hold is bounded (measured with tracemalloc). The
write lock still excludes other store objects and processes, also after the lock file was deleted, and a forked
child does not inherit its parent's hold. The durability setting fsyncs the log where it says (the fsyncs seen
on the log file's descriptor, and the event last written when each came).
"""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest

import nbagent.store.store as store_module
from nbagent.events.model import Completed, LlmCalled, Thinking, ToolCallCompleted, ToolCallStarted
from nbagent.store import Store, StoreError
from nbagent.store.eventlog import EventLog
from nbagent.store.verify import verify_store


def filled(tmp_path: Path, runs: int = 3, per_run: int = 20) -> tuple[Store, list[str]]:
    store = Store(tmp_path / "nb.ipynb")
    session = store.session()
    other = store.session("other")
    ids = []
    for r in range(runs):
        run = store.create_run(session.id if r % 2 == 0 else other.id, f"prompt {r}")
        ids.append(run.id)
        for i in range(per_run):
            store.append(ToolCallStarted(call_id=f"c{i}", tool="noop", arguments={"i": i, "text": "é \" \\n"}),
                         run_id=run.id)
        store.append(Completed(summary="done"), run_id=run.id)
    return store, ids


def lines(store: Store) -> list[dict]:
    return [json.loads(line) for line in store.events_path.read_text().splitlines()]


def test_a_reopened_store_reads_every_chain_as_written(tmp_path: Path) -> None:
    store, ids = filled(tmp_path)
    written = lines(store)
    again = Store(store.path, readonly=True)
    assert again.run_ids() == sorted(ids)
    for run_id in ids:
        assert again.raw_events(run_id) == [r for r in written if r["run_id"] == run_id]
        assert again.run_state(run_id).last_seq == 22
    assert [e.id for e in again.query_events()] == [r["id"] for r in written]
    assert [e.id for e in again.query_events(run_id=ids[1], types="completed")] == \
        [r["id"] for r in written if r["run_id"] == ids[1] and r["type"] == "completed"]
    assert len(again.events) == len(written) and again.events.get(doc_id=3)["id"] == written[2]["id"]
    assert again.warnings == []


def test_queries_on_type_and_time_read_only_what_can_match_and_answer_as_a_scan(tmp_path: Path) -> None:
    from tinydb import Query

    store, _ = filled(tmp_path, runs=3, per_run=5)
    written = lines(store)
    middle = written[len(written) // 2]["ts"]
    q = Query()
    again = Store(store.path, readonly=True)
    for cond, expect in [
        (q.type == "completed", [r for r in written if r["type"] == "completed"]),
        ((q.type == "tool_call_started") & (q.ts >= middle), [r for r in written if r["type"] == "tool_call_started"
                                                               and r["ts"] >= middle]),
        (q.type.one_of(["run_started", "completed"]) & (q.ts <= middle),
         [r for r in written if r["type"] in ("run_started", "completed") and r["ts"] <= middle]),
        (q.ts >= middle, [r for r in written if r["ts"] >= middle]),
        (q.seq == 2, [r for r in written if r["seq"] == 2]),  # nothing indexable: a scan
    ]:
        assert [d["id"] for d in again.events.search(cond)] == [r["id"] for r in expect]
        assert again.events.count(cond) == len(expect)
    assert [e.id for e in again.query_events(types=["completed"], since=middle)] == \
        [r["id"] for r in written if r["type"] == "completed" and r["ts"] >= middle]
    assert again.warnings == []
    # Only what can match is read: a tool call's line damaged inside goes unnoticed by a query for completions,
    # and is found (skipped, with a warning) by the first query that reads it.
    raw = store.events_path.read_bytes().split(b"\n")
    damaged = next(i for i, r in enumerate(written) if r["type"] == "tool_call_started" and r["ts"] >= middle)
    raw[damaged] = raw[damaged].replace(b'"arguments":{', b'"arguments":{{', 1)
    store.events_path.write_bytes(b"\n".join(raw))
    lazy = Store(store.path, readonly=True)
    assert [e.id for e in lazy.query_events(types=["completed"], since=middle)] == \
        [r["id"] for r in written if r["type"] == "completed" and r["ts"] >= middle]
    assert lazy.warnings == []  # (the store's own queries use its index; a TinyDB query on .events is a scan)
    assert len(lazy.query_events(types="tool_call_started", since=middle)) == \
        len([r for r in written if r["type"] == "tool_call_started" and r["ts"] >= middle]) - 1
    assert any("not a valid event" in w for w in lazy.warnings)


def test_appends_continue_the_chains_of_a_reopened_log(tmp_path: Path) -> None:
    store, ids = filled(tmp_path, runs=2)
    store.close()
    again = Store(store.path)
    event = again.append(Thinking(text="more"), run_id=ids[0])
    assert event.seq == 23 and event.prev_hash == again.raw_events(ids[0])[-2]["hash"]
    assert verify_store(Store(store.path, readonly=True)).ok


def test_a_line_that_is_not_canonical_is_read(tmp_path: Path) -> None:
    store, ids = filled(tmp_path, runs=1, per_run=2)
    records = lines(store)
    text = "\n".join(json.dumps(r, indent=None, separators=(", ", ": ")) if i == 2 else json.dumps(r, sort_keys=True,
                     separators=(",", ":"), ensure_ascii=False) for i, r in enumerate(records)) + "\n"
    store.events_path.write_text(text)
    again = Store(store.path, readonly=True)
    assert again.raw_events(ids[0]) == [r for r in records if r["run_id"] == ids[0]]
    assert again.warnings == []


def test_a_line_damaged_inside_is_skipped_when_read_and_verify_reports_it(tmp_path: Path) -> None:
    store, ids = filled(tmp_path, runs=1, per_run=3)
    raw = store.events_path.read_bytes().split(b"\n")
    raw[3] = raw[3].replace(b'"arguments":{', b'"arguments":{{', 1)  # still ends like a canonical line
    store.events_path.write_bytes(b"\n".join(raw))
    again = Store(store.path, readonly=True)
    state = again.run_state(ids[0])  # the fold meets the damaged line first
    assert state.event_count == 4 and len(state.steps) == 2
    assert again.run_state(ids[0]).event_count == 4 and len(again.run_state(ids[0]).steps) == 2  # not applied twice
    events = again.raw_events(ids[0])
    assert len(events) == 4 and any("not a valid event" in w for w in again.warnings)
    report = verify_store(Store(store.path, readonly=True))
    assert not report.ok


@pytest.mark.parametrize(("runs", "per_run", "text", "keep"), [(2, 300, "small", 10), (1, 60, "x" * 100_000, None)])
def test_parsed_events_kept_in_memory_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: int,
                                                  per_run: int, text: str, keep: int | None) -> None:
    """After every event was read, the store holds a small part of what it parsed (and still gives every event):
    past its count of events kept (EventLog.KEEP, made 10 here) or its bytes (EventLog.KEEP_BYTES, as shipped)."""
    if keep is not None:
        monkeypatch.setattr(EventLog, "KEEP", keep)
    store = Store(tmp_path / "nb.ipynb")
    ids = [store.create_run(store.session().id, "p").id for _ in range(runs)]
    for run_id in ids:
        for i in range(per_run):
            store.append(Thinking(text=f"{i} {text}"), run_id=run_id)
    store.close()
    again = Store(store.path, readonly=True)
    assert again.run_ids() == ids  # the log indexed
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        parsed = sum(len(json.dumps(e)) for run_id in ids for e in again.raw_events(run_id))
        assert len(again.query_events()) == runs * (per_run + 1) + 1
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert parsed > runs * per_run * len(text) and held < parsed / 4, (held, parsed)


@pytest.fixture
def short_lock_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores made from here on wait 0.2 s for the write lock, not LOCK_TIMEOUT_S."""
    monkeypatch.setattr(store_module, "LOCK_TIMEOUT_S", 0.2)


def test_the_write_lock_excludes_another_store_even_after_the_lock_file_was_deleted(
        tmp_path: Path, short_lock_wait: None) -> None:
    a, ids = filled(tmp_path, runs=1, per_run=1)
    b = Store(a.path)
    (a.path / "lock").unlink()  # what the timeout message suggests when no kernel uses the notebook
    with b.locked(), pytest.raises(StoreError, match="held the store's lock"):
        a.append(Thinking(text="blocked"), run_id=ids[0])
    a.append(Thinking(text="free again"), run_id=ids[0])
    with a.locked(), pytest.raises(StoreError):
        b.append(Thinking(text="blocked"), run_id=ids[0])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_does_not_share_its_parents_hold(tmp_path: Path, short_lock_wait: None) -> None:
    store, ids = filled(tmp_path, runs=1, per_run=1)
    with store.locked():
        pid = os.fork()
        if pid == 0:  # the child: the parent holds the lock, so this must time out
            try:
                store.append(Thinking(text="child"), run_id=ids[0])
                code = 1
            except StoreError:
                code = 0
            except BaseException:
                code = 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    store.append(Thinking(text="parent"), run_id=ids[0])
    assert [e["payload"].get("text") for e in store.raw_events(ids[0])][-1] == "parent"


@pytest.mark.parametrize(("durability", "synced"), [
    ("checkpoint", ["run_started", "completed"]),
    ("step", ["run_started", "tool_call_completed", "llm_called", "completed"]),
    ("event", ["run_started", "tool_call_started", "tool_call_completed", "llm_called", "completed"]),
])
def test_durability_fsyncs_at_checkpoints_steps_or_every_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              durability: str, synced: list[str]) -> None:
    store = Store(tmp_path / "nb.ipynb", durability=durability)
    run = store.create_run(store.session().id, "p")
    fsynced: list[str] = []
    real = os.fsync
    log = os.stat(store.events_path)

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) == (log.st_dev, log.st_ino):  # the log's, not the runs table's (checkpoints)
            fsynced.append(lines(store)[-1]["type"])  # what was last written when it came
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    store.append(ToolCallStarted(call_id="c", tool="noop", arguments={}), run_id=run.id)
    store.append(ToolCallCompleted(call_id="c", tool="noop", result="ok"), run_id=run.id)
    store.append(LlmCalled(model="m"), run_id=run.id)
    store.append(Completed(summary="done"), run_id=run.id)
    assert fsynced == [t for t in synced if t != "run_started"]
    monkeypatch.setenv("NBAGENT_DURABILITY", "sometimes")
    with pytest.raises(ValueError, match="durability"):
        Store(tmp_path / "other.ipynb")
