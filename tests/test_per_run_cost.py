"""What a run costs does not grow with the runs before it, and what every run makes anew is made once.

Each `%%agent` cell asks the store for the session's runs (what a new run continues). That read the whole
runs table once per run in the notebook, so a cell's cost grew with the square of the runs the notebook had
(1.7 s a cell at 600 runs, docs/performance.md). These tests pin the shape, not a time: how many times the
table file is read, and that the tools each run makes share their argument models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import new_run

from nbagent import events as E
from nbagent.ipython.cells import insert_cell_tool
from nbagent.scope import Scope, ScopeDenied, ScopeGuard
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
