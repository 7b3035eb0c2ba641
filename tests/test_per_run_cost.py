"""What a run costs does not grow with the runs before it, and what every run makes anew is made once.

Each `%%agent` cell asks the store for the session's runs (what a new run continues). That read the whole
runs table once per run in the notebook, so a cell's cost grew with the square of the runs the notebook had
(1.7 s a cell at 600 runs, docs/performance.md). These tests pin the shape, not a time: how many times the
table file is read, and that the tools each run makes share their argument models.
"""

from __future__ import annotations

import os
import types
from pathlib import Path
from typing import Any

import pytest
from examples import examples
from helpers import new_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbagent.events import model as E
from nbagent.ipython.cells import insert_cell_tool
from nbagent.scope.rules import Scope, ScopeDenied, ScopeGuard
from nbagent.store import Store
from nbagent.store.tables import AtomicJSONStorage
from nbagent.tools.base import Tool


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    reads: list[Path] = []
    real = AtomicJSONStorage.read

    def counted(self: AtomicJSONStorage) -> Any:
        reads.append(self.path)
        return real(self)

    monkeypatch.setattr(AtomicJSONStorage, "read", counted)
    return reads


@pytest.mark.parametrize("runs", [1, 12])
def test_listing_a_sessions_runs_reads_the_table_once(store: Store, monkeypatch: pytest.MonkeyPatch,
                                                      runs: int) -> None:
    ids = [new_run(store, f"request {i}") for i in range(runs)]
    for run in ids:
        store.append(E.Completed(answer="ok"), run_id=run)
    other = store.create_run(store.session("other").id, "elsewhere", model="scripted/test").id
    session = store.session(notebook="analysis.ipynb").id
    expected = [store.get_run(r) for r in ids]

    reads = _count_reads(monkeypatch)
    listed = store.list_runs(session)
    assert len(reads) == 1  # whatever the number of runs
    assert listed == expected  # the same records, oldest first
    assert [r.id for r in store.list_runs()] == [*ids, other]


def test_a_damaged_row_in_a_listing_comes_from_the_events(store: Store) -> None:
    run = new_run(store)
    store.append(E.Completed(answer="ok"), run_id=run)
    store.runs.update_row(run, {"status": "no such status"})  # a cached row that does not parse
    (listed,) = store.list_runs()
    assert listed.status == "completed"


def test_a_checkpoint_reads_the_table_once(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    run = new_run(store)
    reads = _count_reads(monkeypatch)
    store.append(E.Completed(answer="ok"), run_id=run)  # a checkpoint: the run's row is put
    assert len([p for p in reads if p == store.runs.storage.path]) == 1  # type: ignore[attr-defined]
    assert store.runs.row(run)["status"] == "completed"  # type: ignore[index]


def test_tools_made_per_run_share_their_argument_model() -> None:
    first = insert_cell_tool(lambda: ("cell-1", "run-1"))
    second = insert_cell_tool(lambda: ("cell-2", "run-2"))
    assert first.args_model is second.args_model
    assert first.schema() == second.schema()
    assert first.schema() is not second.schema()  # each run may change its own copy
    with pytest.raises(Exception, match="unexpected"):
        second.validate({"code": "1", "unexpected": True})


def _closure(default: Any) -> Tool:
    def act(n: int, extra: Any = default) -> int:
        """Act.

        Args:
            n: how many
        """
        return n

    return Tool(act)


def test_a_closure_with_other_defaults_gets_its_own_model() -> None:
    one, same, other = _closure(1), _closure(1), _closure(2)
    assert one.args_model is same.args_model
    assert other.args_model is not one.args_model
    assert other.validate({"n": 3}) == {"n": 3, "extra": 2}
    assert one.validate({"n": 3}) == {"n": 3, "extra": 1}


def test_a_closure_with_an_unhashable_default_is_not_shared() -> None:
    a, b = _closure([1]), _closure([1])
    assert a.args_model is not b.args_model
    assert a.validate({"n": 1}) == {"n": 1, "extra": [1]}


def test_guards_of_one_scope_judge_alike(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("x")
    (tmp_path / "data.csv").write_text("a\n1\n")
    scope = Scope(root=tmp_path, base=tmp_path, exclude=["*.csv"])
    for guard in (ScopeGuard(scope), ScopeGuard(scope)):
        with pytest.raises(ScopeDenied):
            guard.check("data.csv", "read")
        with pytest.raises(ScopeDenied):
            guard.check(".git/config", "read")
    assert ScopeGuard(Scope(root=tmp_path, base=tmp_path)).check("data.csv", "read").rel == "data.csv"


def test_a_row_edited_to_name_another_session_does_not_move_the_run(store: Store) -> None:
    """The session a run belongs to is what its events say: tables.json is a cache anyone could edit."""
    run = new_run(store)
    other = store.session("other").id
    store.runs.update_row(run, {"session_id": other})
    mine = store.session(notebook="analysis.ipynb").id
    assert [(r.id, r.session_id) for r in store.list_runs(mine)] == [(run, mine)]
    assert store.get_run(run).session_id == mine
    assert store.list_runs(other) == []


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    import nbagent.store.tables as tables

    parsed: list[int] = []
    real = tables.json

    def counted(text: Any, *a: Any, **k: Any) -> Any:
        parsed.append(len(text))
        return real.loads(text, *a, **k)

    monkeypatch.setattr(tables, "json", types.SimpleNamespace(loads=counted, dumps=real.dumps))  # that module's only
    return parsed


def test_the_table_file_is_parsed_again_only_when_its_bytes_change(store: Store, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each cell reads tables.json a dozen times and it holds every run's row: parsing it each time made a cell's
    bookkeeping grow with the notebook's age. Read again unchanged (or as this store wrote it) it is not parsed;
    written by another process, the next read sees the change, whatever its size or time stamp."""
    runs = [new_run(store, f"request {i}") for i in range(5)]
    store.runs.all()
    parsed = _count_parses(monkeypatch)
    for _ in range(3):
        assert {str(r.doc_id) for r in store.runs.all()} >= set(runs)
    store.append(E.Completed(answer="ok"), run_id=runs[0])  # this store's own write
    assert store.runs.row(runs[0])["status"] == "completed"  # type: ignore[index]
    assert parsed == []
    other = Store(tmp_path / "analysis.ipynb")  # another writer (a second kernel, the CLI)
    other.runs.update_row(runs[1], {"note": "x" * 3})
    other.close()
    parsed.clear()
    assert store.runs.row(runs[1])["note"] == "xxx"  # type: ignore[index]
    assert store.runs.row(runs[2]) is not None
    assert len(parsed) == 1  # the new bytes, once


def test_what_a_reader_changes_in_a_row_it_was_given_is_never_what_the_next_reader_gets(store: Store) -> None:
    run = new_run(store)
    row = store.runs.row(run)
    assert row is not None
    row["status"] = "edited in memory"
    row.clear()
    for table in store.runs._read_table(), store.runs._storage.read():  # TinyDB's own reads, which it changes
        table.clear()
    assert store.runs.row(run)["status"] == "running"  # type: ignore[index]


OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 3), st.text(max_size=4)),
    st.tuples(st.just("outside"), st.integers(0, 3), st.text(max_size=4)),  # another process's write
    st.tuples(st.just("failed write"), st.integers(0, 3), st.text(max_size=4)),  # a full disk
    st.tuples(st.just("failed update"), st.integers(0, 3), st.text(max_size=4)),  # TinyDB's updater raised
), max_size=14)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_reads_through_the_kept_parse_are_what_the_file_says(tmp_path_factory: pytest.TempPathFactory,
                                                             ops: list[tuple[str, int, str]]) -> None:
    from nbagent.store.tables import open_tables

    path = tmp_path_factory.mktemp("tables") / "tables.json"
    mine, theirs = open_tables(path, False).id_table("runs"), open_tables(path, False).id_table("runs")
    for op, n, value in ops:
        doc = f"run{n}"
        if op == "put":
            mine.put(doc, {"v": value, "nested": {"v": value}})
        elif op == "outside":
            theirs.put(doc, {"v": value, "nested": {"v": value}})
        elif op == "failed write":
            real = os.replace
            os.replace = lambda *a: (_ for _ in ()).throw(OSError(28, "No space left on device"))  # type: ignore
            try:
                with pytest.raises(Exception, match="No space"):
                    mine.put(doc, {"v": value + "!"})
            finally:
                os.replace = real

        else:
            def fail(table: dict[Any, Any]) -> None:
                for row in table.values():
                    row["v"] = "half-done"
                raise ValueError("updater failed")

            with pytest.raises(ValueError):
                mine._update_table(fail)
        fresh = {str(d.doc_id): dict(d) for d in open_tables(path, True).id_table("runs").all()}
        assert {str(d.doc_id): dict(d) for d in mine.all()} == fresh
        assert {str(d.doc_id): dict(d) for d in theirs.all()} == fresh


RUN_OPS = st.lists(st.tuples(
    st.sampled_from(["run", "continued run", "child run", "completed", "superseded"]),
    st.sampled_from(["mine", "theirs"]),  # this kernel's store, or another kernel's on the same notebook
    st.integers(0, 7), st.integers(0, 7), st.sampled_from(["a", "b"]), st.sampled_from([None, "c0", "c1"]),
), max_size=16)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=RUN_OPS)
def test_states_read_once_for_many_runs_are_the_runs_and_their_records(
        tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, str, int, int, str, str | None]]) -> None:
    """`run_states` and `session_states` (what a cell asks of every run, the log read once) say what `run_state`
    and `list_runs` say, run by run, and what a fresh reader of the files folds, whoever wrote the events."""
    path = tmp_path_factory.mktemp("nb") / "analysis.ipynb"
    stores = {"mine": Store(path), "theirs": Store(path)}
    try:
        runs: list[str] = []
        made: dict[str, tuple[str, str | None, str | None, str | None]] = {}
        for op, who, i, j, session_name, cell in ops:
            s = stores[who]
            session = s.session(session_name, notebook=path.name).id
            if op == "completed" and runs:
                s.append(E.Completed(answer="ok"), run_id=runs[i % len(runs)])
            elif op == "superseded" and len(runs) > 1:
                s.append(E.RunSuperseded(by_run_id=runs[j % len(runs)]), run_id=runs[i % len(runs)])
            elif op in ("run", "continued run", "child run"):
                earlier = runs[i % len(runs)] if runs else None
                runs.append(s.create_run(session, "go", model="scripted/test", cell_id=cell,
                                         previous_run_id=earlier if op == "continued run" else None,
                                         parent_run_id=earlier if op == "child run" else None).id)
                made[runs[-1]] = (session_name, cell, earlier if op == "child run" else None,
                                  earlier if op == "continued run" else None)
            mine = stores["mine"]
            fresh = Store(path, readonly=True)
            ids = fresh.run_ids()
            assert mine.run_states(ids) == [fresh.run_state(r) for r in ids]  # (first: nothing else read the log)
            fresh.close()
            assert mine.run_states(ids) == [mine.run_state(r) for r in ids]
            for name in ("a", "b"):  # the session's runs, oldest first, as they were made
                assert [(x.run_id, x.cell_id, x.parent_run_id, x.previous_run_id)
                        for x in mine.session_states(mine.session(name, notebook=path.name).id)] == \
                    [(r, *made[r][1:]) for r in runs if made[r][0] == name]
            for sid in [None, *(mine.session(n, notebook=path.name).id for n in ("a", "b"))]:
                assert [(x.run_id, x.status, x.cell_id, x.parent_run_id, x.previous_run_id)
                        for x in mine.session_states(sid)] == \
                    [(r.id, r.status, r.cell_id, r.parent_run_id, r.previous_run_id) for r in mine.list_runs(sid)]
    finally:
        for s in stores.values():
            s.close()
