"""Append and query round trips through the store, and its TinyDB face."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from helpers import llm, new_run
from tinydb import Query

from nbagent.events import model as E
from nbagent.events.model import compute_hash
from nbagent.store import AppendOnly, NewerFormat, NotAStore, RunNotFound, Store, StoreReadOnly


def test_append_assigns_gap_free_seq_and_links_hashes(store: Store) -> None:
    run = new_run(store)
    for i in range(5):
        store.append(E.Thinking(text=f"step {i}"), run_id=run)
    raw = store.raw_events(run)
    assert [r["seq"] for r in raw] == [1, 2, 3, 4, 5, 6]
    assert raw[0]["prev_hash"] is None
    for prev, cur in itertools.pairwise(raw):
        assert cur["prev_hash"] == prev["hash"]
        assert compute_hash(cur) == cur["hash"]


def test_round_trip_survives_reopen(store: Store, tmp_path: Path) -> None:
    run = new_run(store, "load sales.csv")
    store.append(llm("hi"), run_id=run)
    store.append(E.ToolCallCompleted(call_id="c1", tool="read_file", result={"rows": [1, 2]}, preview="2 rows"),
                 run_id=run)
    written = store.run_events(run)
    store.close()

    again = Store(tmp_path / "analysis.nbagent", readonly=True)
    read = again.run_events(run)
    assert read == written
    assert read[2].payload.result == {"rows": [1, 2]}
    assert isinstance(read[1], E.EVENT_MODELS["llm_called"])
    assert again.get_run(run).prompt == "load sales.csv"


def test_queries_by_session_run_type_and_time(store: Store) -> None:
    a = new_run(store, "a")
    other = store.create_session("other")
    b = store.create_run(other.id, "b").id
    store.append(llm("x"), run_id=a)
    store.append(llm("y"), run_id=b)
    store.append(E.Completed(), run_id=a)

    assert {e.run_id for e in store.query_events(types="llm_called")} == {a, b}
    assert [e.type for e in store.query_events(run_id=a)] == ["run_started", "llm_called", "completed"]
    assert {e.run_id for e in store.query_events(session_id=other.id)} == {b, None}
    assert [e.type for e in store.query_events(session_id=other.id, types=["llm_called", "completed"])] == [
        "llm_called"
    ]
    every = store.query_events()
    middle = every[len(every) // 2]
    later = store.query_events(since=middle.ts)
    assert later and all(e.ts >= middle.ts for e in later)
    assert all(e.ts <= middle.ts for e in store.query_events(until=middle.ts))
    # TinyDB's own Query works on the events table too
    assert len(store.events.search(Query().payload.content == "y")) == 0  # content lives in the response
    assert store.events.count(Query().type == "run_started") == 2


def test_events_table_is_append_only(store: Store) -> None:
    run = new_run(store)
    for op in (
        lambda: store.events.insert({"type": "x"}),
        lambda: store.events.update({"type": "x"}),
        lambda: store.events.remove(Query().run_id == run),
        lambda: store.events.truncate(),
        lambda: store.events.upsert({"type": "x"}, Query().type == "y"),
    ):
        with pytest.raises(AppendOnly, match="append-only"):
            op()
    assert len(store.run_events(run)) == 1


def test_sees_events_appended_by_another_store_object(tmp_path: Path) -> None:
    one = Store(tmp_path / "nb.ipynb")
    two = Store(tmp_path / "nb.ipynb")
    run = new_run(one)
    two.append(E.Thinking(text="from two"), run_id=run)
    one.append(E.Thinking(text="from one"), run_id=run)
    assert [e.seq for e in two.run_events(run)] == [1, 2, 3]
    assert [e.payload.text for e in one.run_events(run)[1:]] == ["from two", "from one"]


def test_run_rows_are_cached_at_checkpoints_keyed_by_ulid(store: Store) -> None:
    run = new_run(store)
    store.append(llm("done", tokens=(100, 20), cost=0.5), run_id=run)
    store.append(E.Completed(), run_id=run)
    row = store.runs.get(doc_id=run)
    assert row is not None and row["status"] == "completed" and row["tokens"] == 120 and row["cost"] == 0.5
    assert row["last_seq"] == 3
    raw = json.loads(store.tables_path.read_text())
    assert run in raw["runs"]  # the TinyDB doc id is the run's ULID, not a per-process counter


def test_resolve_run_by_unique_prefix(store: Store) -> None:
    run = new_run(store)
    assert store.resolve_run(run[:16]) == run
    assert store.resolve_run(run.lower()[:20]) == run
    with pytest.raises(RunNotFound, match="no such run"):
        store.resolve_run("ZZZZ")


def test_ids_are_unique_ulids(store: Store) -> None:
    run = new_run(store)
    for _ in range(200):
        store.append(E.Thinking(text="x"), run_id=run)
    ids = [e.id for e in store.run_events(run)]
    assert len(set(ids)) == len(ids) and all(len(i) == 26 for i in ids)


def test_unserialisable_and_nan_values_are_recorded_not_fatal(store: Store) -> None:
    run = new_run(store)
    ev = store.append(E.ToolCallCompleted(call_id="c", tool="t", result={"x": float("nan"), "o": object()}),
                      run_id=run)
    assert ev.payload.result["x"] is None and ev.payload.result["o"].startswith("<object object")


def test_newer_format_is_refused(tmp_path: Path) -> None:
    Store(tmp_path / "nb.ipynb").close()
    meta = tmp_path / "nb.nbagent" / "meta.json"
    meta.write_text(json.dumps({"format": "nbagent-store", "version": 99}))
    for readonly in (True, False):
        with pytest.raises(NewerFormat, match=r"meta.json: written by a newer nbagent .*pip install -U nbagent"):
            Store(tmp_path / "nb.ipynb", readonly=readonly)


def test_folder_with_other_files_is_not_a_store(tmp_path: Path) -> None:
    (tmp_path / "nb.nbagent").mkdir()
    (tmp_path / "nb.nbagent" / "mine.txt").write_text("keep me")
    with pytest.raises(NotAStore, match=r"no meta\.json"):
        Store(tmp_path / "nb.ipynb")
    assert (tmp_path / "nb.nbagent" / "mine.txt").read_text() == "keep me"
    assert sorted(p.name for p in (tmp_path / "nb.nbagent").iterdir()) == ["mine.txt"]


def test_readonly_store_refuses_writes(store: Store, tmp_path: Path) -> None:
    run = new_run(store)
    ro = Store(tmp_path / "analysis.nbagent", readonly=True)
    with pytest.raises(StoreReadOnly):
        ro.append(E.Thinking(text="x"), run_id=run)
    assert len(store.run_events(run)) == 1
