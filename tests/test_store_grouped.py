"""`Store.grouped()`: inside a run driven on an event loop, a run's checkpoints are committed (the log's fsync, the
runs row, the anchor) once per turn of the loop and at the group's end. What must hold: every event is in the log
the moment `append` returns; once the turn or the group ends, the store is exactly as committing each checkpoint at
once would leave it (verify finds it sound, each run's row and anchor at its last checkpoint); outside a group,
on another thread or with no loop, nothing changes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from pathlib import Path

import pytest
from examples import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbagent.events.model import AnswerReady, Completed, LlmCalled, Thinking, WaitingForApproval
from nbagent.store import Store
from nbagent.store.commits import HELD, Hold
from nbagent.store.verify import verify_store


def log_types(store: Store) -> list[str]:
    return [json.loads(line)["type"] for line in store.events_path.read_text().splitlines()]


def row(store: Store, run_id: str) -> dict | None:
    """The run's row as another reader sees it in tables.json (not this store's memory)."""
    tables = json.loads(store.tables_path.read_text()) if store.tables_path.exists() else {}
    return (tables.get("runs") or {}).get(run_id)


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The descriptors os.fsync was called on."""
    seen: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        seen.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def log_fsyncs(store: Store, fds: list[int]) -> int:
    log = os.stat(store.events_path)
    n = 0
    for fd in fds:
        try:
            st_ = os.fstat(fd)
        except OSError:
            continue
        n += (st_.st_dev, st_.st_ino) == (log.st_dev, log.st_ino)
    return n


def test_an_answer_and_the_runs_end_are_committed_once_and_each_event_is_in_the_log_at_once(
        tmp_path: Path, fsyncs: list[int]) -> None:
    store = Store(tmp_path / "nb.ipynb")
    session = store.session().id

    async def drive() -> str:
        with store.grouped():
            run = store.create_run(session, "p")
            assert log_types(store)[-1] == "run_started" and row(store, run.id) is None  # written, not committed
            assert store.get_run(run.id).status.value == "running"  # the store's own reads go by the events
            await asyncio.sleep(0)  # the loop's turn ends: committed (while a model call would be in flight)
            assert row(store, run.id) is not None and row(store, run.id)["last_seq"] == 1
            store.append(LlmCalled(model="m"), run_id=run.id)
            fsyncs.clear()
            store.append(AnswerReady(content="hi"), run_id=run.id)
            store.append(Completed(), run_id=run.id)
            assert log_types(store)[-2:] == ["answer_ready", "completed"]
            assert row(store, run.id)["last_seq"] == 1 and log_fsyncs(store, fsyncs) == 0
        assert log_fsyncs(store, fsyncs) == 1  # the group's end: one fsync for both checkpoints
        return run.id

    run_id = asyncio.run(drive())
    assert row(store, run_id)["last_seq"] == 4 and row(store, run_id)["status"] == "completed"
    assert store.anchored(run_id) is not None and store.anchored(run_id)[0] == 4
    assert verify_store(Store(store.path, readonly=True)).ok


def test_a_held_cell_commits_nothing_at_its_turns_or_its_groups_end_and_once_when_asked(
        tmp_path: Path, fsyncs: list[int]) -> None:
    """A kernel's `%%agent` cell holds its commits (`HELD`): its run's start and end wait for the one commit it
    runs after its reply; a wait for a person is durable at once, with everything before it."""
    store = Store(tmp_path / "nb.ipynb")
    session = store.session().id

    async def cell() -> tuple[str, str]:
        HELD.set(Hold(asyncio.get_running_loop()))
        fsyncs.clear()
        with store.grouped():
            run = store.create_run(session, "p")
            await asyncio.sleep(0)  # a model call in flight: nothing committed meanwhile
            assert row(store, run.id) is None and log_fsyncs(store, fsyncs) == 0
            store.append(AnswerReady(content="hi"), run_id=run.id)
            store.append(Completed(), run_id=run.id)
        assert row(store, run.id) is None and store.pending() and log_types(store)[-1] == "completed"
        with store.grouped():
            waiting = store.create_run(session, "q")
            store.append(WaitingForApproval(request_id="r1", plan_id="p1"), run_id=waiting.id)
            assert row(store, waiting.id)["status"] == "waiting" and log_fsyncs(store, fsyncs) == 1
        return run.id, waiting.id

    run_id, _ = asyncio.run(cell())
    assert store.pending() and row(store, run_id) is None
    store.commit()  # the cell's one commit
    assert not store.pending() and row(store, run_id)["status"] == "completed" and log_fsyncs(store, fsyncs) == 2
    assert store.anchored(run_id) is not None and store.anchored(run_id)[0] == 3
    assert verify_store(Store(store.path, readonly=True)).ok


def test_a_task_that_outlives_its_cell_commits_per_turn_again(tmp_path: Path) -> None:
    store = Store(tmp_path / "nb.ipynb")
    session = store.session().id

    async def cell() -> None:
        hold = Hold(asyncio.get_running_loop())
        HELD.set(hold)
        started = asyncio.Event()

        async def lingering() -> None:  # (its context is a copy of the cell's: the same hold)
            await started.wait()
            with store.grouped():
                run = store.create_run(session, "after the cell")
                await asyncio.sleep(0)
                assert row(store, run.id) is not None  # the hold is closed: committed at the turn's end

        task = asyncio.get_running_loop().create_task(lingering())
        hold.open = False  # the cell ended
        started.set()
        await task

    asyncio.run(cell())


def test_outside_a_group_on_another_thread_or_with_no_loop_every_checkpoint_is_committed_at_once(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "nb.ipynb")
    session = store.session().id
    run = store.create_run(session, "no loop")
    assert row(store, run.id) is not None

    async def outside() -> str:
        return store.create_run(session, "a loop, no group").id

    assert row(store, asyncio.run(outside())) is not None

    async def other_thread() -> None:
        with store.grouped():
            found: list[str] = []
            t = threading.Thread(target=lambda: found.append(store.create_run(session, "another thread").id))
            t.start()
            t.join()
            assert row(store, found[0]) is not None  # no loop runs on that thread: at once

    asyncio.run(other_thread())


@pytest.mark.parametrize("durability", ["event", "step"])
def test_a_store_that_promises_more_than_checkpoints_commits_at_once_even_in_a_group(
        tmp_path: Path, fsyncs: list[int], durability: str) -> None:
    store = Store(tmp_path / "nb.ipynb", durability=durability)
    session = store.session().id

    async def drive() -> None:
        with store.grouped():
            fsyncs.clear()
            run = store.create_run(session, "p")
            assert row(store, run.id) is not None and log_fsyncs(store, fsyncs) == 1
            store.append(Completed(), run_id=run.id)
            assert row(store, run.id)["status"] == "completed" and log_fsyncs(store, fsyncs) == 2

    asyncio.run(drive())


def test_a_checkpoint_read_and_close_commit_what_waits(tmp_path: Path) -> None:
    store = Store(tmp_path / "nb.ipynb")
    session = store.session().id

    async def drive() -> None:
        with store.grouped():
            run = store.create_run(session, "p")
            assert row(store, run.id) is None
            assert store.checkpoint(run.id) == (1, store.run_events(run.id)[0].hash)  # committed first
            assert row(store, run.id) is not None
            run2 = store.create_run(session, "q")
            store.close()  # (a kernel shutting down mid-turn)
            assert row(store, run2.id) is not None

    asyncio.run(drive())


def test_a_commit_that_fails_is_kept_and_raised_by_the_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "nb.ipynb")
    session = store.session().id
    real = store._checkpoint
    failing = [True]

    def checkpoint(run_id: str) -> None:
        if failing[0]:
            raise OSError(28, "No space left on device")
        real(run_id)

    monkeypatch.setattr(store, "_checkpoint", checkpoint)

    async def drive() -> str:
        with pytest.raises(OSError, match="No space"), store.grouped():
            run = store.create_run(session, "p")
            await asyncio.sleep(0)  # the turn's commit fails quietly: kept for the group's end, which raises
            assert row(store, run.id) is None
        return run.id

    run_id = asyncio.run(drive())
    failing[0] = False
    store.commit()
    assert row(store, run_id) is not None


STEP = st.sampled_from(["llm", "thinking", "wait", "answer", "end", "turn", "new"])


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=1, max_size=25))
def test_after_a_group_the_store_is_as_committing_each_checkpoint_at_once_leaves_it(
        tmp_path_factory: pytest.TempPathFactory, steps: list[str]) -> None:
    """The same events written with and without a group give the same statuses and anchors, and both stores
    verify. A grouped row is written when its turn ends, so it may name events written after its checkpoint in
    that turn (never fewer: the log is fsynced before the row, so the row never names an event a power loss
    could take)."""
    def play(store: Store, mode: str) -> list[str]:
        session = store.session().id
        runs: list[str] = []

        async def drive() -> None:
            if mode == "held":  # a kernel's cell: committed once it has answered
                HELD.set(Hold(asyncio.get_running_loop()))
            with store.grouped() if mode != "at once" else contextlib.nullcontext():
                runs.append(store.create_run(session, "p").id)
                for step in steps:
                    run = runs[-1]
                    if step == "turn":
                        await asyncio.sleep(0)
                    elif step == "new":
                        runs.append(store.create_run(session, "p").id)
                    elif step == "llm":
                        store.append(LlmCalled(model="m"), run_id=run)
                    elif step == "thinking":
                        store.append(Thinking(text="t"), run_id=run)
                    elif step == "wait":
                        store.append(WaitingForApproval(request_id=f"r{len(log_types(store))}", plan_id="p"),
                                     run_id=run)
                    elif step == "answer":
                        store.append(AnswerReady(content="a"), run_id=run)
                    else:
                        store.append(Completed(), run_id=run)

        asyncio.run(drive())
        if mode == "held":
            store.commit()  # (what the cell has run just after its reply)
        return runs

    seen = []
    for mode in ("at once", "grouped", "held"):
        store = Store(tmp_path_factory.mktemp("grouped") / "nb.ipynb")
        runs = play(store, mode)
        rows = [(row(store, r) or {}).get("last_seq") or 0 for r in runs]
        statuses = [(row(store, r) or {}).get("status") for r in runs]
        anchors = [(store.anchored(r) or (0,))[0] for r in runs]
        lengths = [len(store.run_events(r)) for r in runs]
        assert verify_store(Store(store.path, readonly=True)).ok and not store.warnings
        seen.append((rows, statuses, anchors, lengths))
    (rows, statuses, anchors, lengths), *later = seen
    for g_rows, g_statuses, g_anchors, g_lengths in later:
        assert (g_statuses, g_anchors, g_lengths) == (statuses, anchors, lengths)
        assert all(a <= b <= n for a, b, n in zip(rows, g_rows, lengths, strict=True))

