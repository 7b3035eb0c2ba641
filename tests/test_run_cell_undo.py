"""Undo covers the cells agent runs wrote: the cells a run added are removed, the code its replace_cell calls
overwrote is restored (in the front end, through the comm), and the report says the kernel's memory is not undone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kernel_harness import Kernel, script

from nbagent.store import Store
from nbagent.undo import preview, undo

pytestmark = [pytest.mark.kernel, pytest.mark.slow]
AGENT = "%%agent --script s.json --approve all --autonomy L3"
NOTE = "the cells' effects on the kernel's memory (variables, imports) are not undone"


class Raw(Kernel):
    def __init__(self, folder: Path, env: dict[str, str] | None = None) -> None:
        self.opened: list[dict[str, Any]] = []
        super().__init__(folder, env=env)

    def _iopub(self, msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "comm_open" and msg["content"].get("target_name") == "nbagent.cells":
            self.opened.append(msg["content"]["data"])
        super()._iopub(msg)


@pytest.fixture
def k(tmp_path: Path) -> Iterator[Raw]:
    kernel = Raw(tmp_path, env={"NBAGENT_HEADLESS": "1"})  # (%agent undo acts at once: no Undo panel to click)
    assert kernel.run("%load_ext nbagent", cell_id="setup").ok
    yield kernel
    kernel.close()


def turn(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def agent(k: Raw, *turns: dict[str, Any], cell_id: str, new: bool = False) -> str:
    script(k.folder / "s.json", *turns, {"content": "done"})
    cell = k.run(AGENT + (" --new" if new else "") + "\ngo", cell_id=cell_id)
    assert cell.ok, (cell.stderr, cell.outputs)
    return Store(k.folder / "test.nbagent", readonly=True).run_ids()[-1]


def results(k: Raw, run_id: str, tool: str) -> list[dict[str, Any]]:
    store = Store(k.folder / "test.nbagent", readonly=True)
    return [e.payload.result for e in store.run_events(run_id)
            if e.type == "tool_call_completed" and e.payload.tool == tool]


def test_undo_removes_the_cells_a_run_added_and_restores_the_code_it_replaced(k: Raw) -> None:
    first = agent(k, turn("run_cell", code="b = 1"), cell_id="c1", new=True)
    (b,) = results(k, first, "run_cell")
    second = agent(k, turn("run_cell", code="a = 1"), turn("replace_cell", cell=b["cell_id"], code="b = 2"),
                   cell_id="c2")
    (a,) = results(k, second, "run_cell")
    (replaced,) = results(k, second, "replace_cell")
    assert replaced["old_source"] == b["source"]
    store = Store(k.folder / "test.nbagent", readonly=True)
    seen = preview(store, second)
    assert [(c.cell_id, c.action) for c in seen.cells] == [(b["cell_id"], "restore"), (a["cell_id"], "remove")]
    assert all(NOTE in n.why for n in seen.not_undoable)  # what the Undo panel lists before any click
    k.opened.clear()
    out = k.run(f"%agent undo {second}", cell_id="u1")
    assert out.ok, (out.stderr, out.outputs)
    assert f"removed cell {a['cell_id']}" in out.stdout and f"restored the code of cell {b['cell_id']}" in out.stdout
    assert NOTE in out.stdout
    assert {"action": "remove", "cell_ids": [a["cell_id"]]} in k.opened
    restore = next(p for p in k.opened if p.get("action") == "restore")
    assert restore["cell_id"] == b["cell_id"] and restore["source"] == b["source"]
    assert restore["metadata"] == b["metadata"]
    # the kernel's memory is not undone, as said
    assert k.run("print(a, b)", cell_id="p1").stdout == "1 2\n"
    # the kernel forgot the removed cell: the agent cannot replace it any more; the restored one is replaceable
    third = agent(k, turn("replace_cell", cell=a["cell_id"], code="a = 3"),
                  turn("replace_cell", cell=b["cell_id"], code="b = 3"), cell_id="c3")
    store = Store(k.folder / "test.nbagent", readonly=True)
    errors = [e.payload.error for e in store.run_events(third) if e.type == "tool_call_failed"]
    assert len(errors) == 1 and "not a cell you wrote" in errors[0]
    (again,) = results(k, third, "replace_cell")
    assert again["old_source"] == b["source"]


def test_an_undo_of_cells_alone_is_recorded_and_not_repeated(k: Raw) -> None:
    run = agent(k, turn("run_cell", code="x = 1"), cell_id="c1", new=True)
    store = Store(k.folder / "test.nbagent")
    report = undo(store, run, folder=k.folder)
    assert report.ok and report.undo_run_id and not report.restores and len(report.cells) == 1
    assert NOTE in report.text()
    recorded = [e.payload for e in store.run_events(report.undo_run_id) if e.type == "tool_call_completed"]
    assert [r.result["action"] for r in recorded] == ["remove"]
    with pytest.raises(Exception, match="already undone"):
        undo(store, run, folder=k.folder)


def test_a_cell_the_person_edited_is_left_alone(k: Raw) -> None:
    run = agent(k, turn("run_cell", code="x = 1"), cell_id="c1", new=True)
    (x,) = results(k, run, "run_cell")
    k.run("x = 'my own now'", cell_id=x["cell_id"])
    k.opened.clear()
    out = k.run(f"%agent undo {run}", cell_id="u1")
    assert "edited and run by the person since: left as it is" in out.stdout
    assert not [p for p in k.opened if p.get("action") == "remove"]


def test_a_cell_a_later_run_replaced_is_a_conflict(k: Raw) -> None:
    first = agent(k, turn("run_cell", code="v = 1"), cell_id="c1", new=True)
    (v,) = results(k, first, "run_cell")
    agent(k, turn("replace_cell", cell=v["cell_id"], code="v = 2"), cell_id="c2")
    store = Store(k.folder / "test.nbagent")
    refused = undo(store, first, folder=k.folder)
    assert not refused.ok and refused.undo_run_id is None
    assert refused.conflicts[0].path == f"cell {v['cell_id']}" and "replaced by run" in refused.conflicts[0].reason
    assert "1 file(s) or cell(s) changed since" in refused.text()
    both = undo(store, first, to=True, folder=k.folder)  # that run too: the cell goes, once
    assert both.ok and [(c.cell_id, c.action, c.calls) for c in both.cells] == [(v["cell_id"], "remove", 2)]
