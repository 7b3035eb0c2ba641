"""Undo covers the cells agent runs wrote: the cells a run added are removed, the code its replace_cell calls
overwrote is restored (in the front end, through the comm), and the report says the kernel's memory is not undone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kernel_harness import Kernel, script

from nbagent.store import Store
from nbagent.undo.files import preview, undo

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
    assert all("what its code did in the kernel and on disk is not undone" in n.why for n in seen.not_undoable)
    k.opened.clear()
    out = k.run(f"%agent undo {second}", cell_id="u1")
    assert out.ok, (out.stderr, out.outputs)
    assert f"[{a['execution_count']}] a = 1: removed" in out.stdout
    assert f"[{replaced['execution_count']}] b = 2: restored to its code from before" in out.stdout
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
    said = out.stdout + out.stderr + str(out.outputs)  # (the run's only change is the person's cell: nothing to undo)
    assert f"nothing to undo: [{x['execution_count']}] x = 1: kept: you edited it since; it is yours" in said, said
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


def test_a_run_that_only_writes_cells_names_them_offers_undo_and_its_undo_claims_only_what_happened(k: Raw) -> None:
    """Issue 46: such a run's Effects said "effects not tracked file by file" and offered no Undo…; its undo said
    "cell removed" and logged `removed` for a cell the person had edited (which stayed), and the undone record said
    "the files this run changed were put back"."""
    from nbagent.ui.record import render_html, render_text, undo_hint
    from nbagent.ui.viewstate import run_view

    first = agent(k, turn("run_cell", code="b = 1"), cell_id="c1", new=True)
    (b,) = results(k, first, "run_cell")
    run = agent(k, turn("run_cell", code="a = 1\nprint(a)"), turn("replace_cell", cell=b["cell_id"], code="b = 2"),
                turn("run_cell", code="c = 3"), cell_id="c2")
    a, c = results(k, run, "run_cell")
    (b2,) = results(k, run, "replace_cell")
    store = Store(k.folder / "test.nbagent", readonly=True)
    view = run_view(store, run)
    names = {x["cell_id"]: (x["verb"], x["name"]) for x in view["effects"]["cells"]}
    assert names == {a["cell_id"]: ("added", f"[{a['execution_count']}] a = 1"),
                     b["cell_id"]: ("replaced", f"[{b2['execution_count']}] b = 2"),
                     c["cell_id"]: ("added", f"[{c['execution_count']}] c = 3")}
    text, page = render_text(view), render_html(view)
    assert f"effects: added [{a['execution_count']}] a = 1" in text
    assert f"<code>[{b2['execution_count']}] b = 2</code>" in page
    assert "not tracked file by file" not in text + page and "put back" not in text
    assert undo_hint(view) == f"%agent undo {run} undoes this run's changes (3 cells)"
    # the kernel's Undo… offer for the record (what the comm nbagent.undo answers), before and after an edit
    ask = ("from nbagent.ipython.entry import current\nfrom nbagent.ipython.undo_offers import offers\n"
           f"h = current()\nprint(offers(h.notebook, [{run!r}], h.folder, kept=h.cells_yours())[{run!r}])")
    offer = k.run(ask, cell_id="ask1").stdout
    assert "'undo': True" in offer and "undoes this run's changes (3 cells)" in offer, offer
    k.run("c = 'my own now'", cell_id=c["cell_id"])  # the person edits the agent's cell and runs it: theirs
    offer = k.run(ask, cell_id="ask2").stdout
    assert "undoes this run's changes (2 cells)" in offer, offer
    k.opened.clear()
    out = k.run(f"%agent undo {run}", cell_id="u1")
    assert out.ok, (out.stderr, out.outputs)
    kept = f"[{c['execution_count']}] c = 3: kept: you edited it since; it is yours"
    assert kept in out.stdout and f"[{a['execution_count']}] a = 1: removed" in out.stdout
    assert f"[{b2['execution_count']}] b = 2: restored to its code from before" in out.stdout
    assert "file" not in out.stdout.splitlines()[0], out.stdout  # "undo run U: 3 cells: 1 removed, 1 restored, ..."
    assert out.stdout.count(": removed") == 1 and out.stdout.count(NOTE) == 1, out.stdout  # each said once
    # exactly what it says: A removed, B restored, nothing sent for C
    assert [p for p in k.opened if p.get("action") == "remove"] == [{"action": "remove", "cell_ids": [a["cell_id"]]}]
    assert [p["cell_id"] for p in k.opened if p.get("action") == "restore"] == [b["cell_id"]]
    assert k.run("print(c)", cell_id="p1").stdout == "my own now\n"
    # the log's events say kept for the edited cell
    store = Store(k.folder / "test.nbagent", readonly=True)
    (uid,) = [r for r in store.run_ids() if r not in (first, run)]
    acted = {e.payload.result["cell_id"]: e.payload.result["action"] for e in store.run_events(uid)
             if e.type == "tool_call_completed" and e.payload.tool == "restore_cell"}
    assert acted == {a["cell_id"]: "remove", b["cell_id"]: "restore", c["cell_id"]: "keep"}
    # the undone record claims only what happened: no files, each cell by what was done to it
    undone = run_view(store, run)
    note = undone["words"]["undo_note"]
    assert "the files this run changed" not in note and "put back" not in note, note
    assert f"cell [{a['execution_count']}] a = 1 removed" in note and kept.replace(":", "", 1) in note
    assert f"[{b2['execution_count']}] b = 2 got back its code from before" in note
    assert f"undoing run {uid} does not bring cells back" in note
    assert note in render_text(undone) and undo_hint(undone) == ""
    fx = run_view(store, uid)["effects"]
    assert {x["cell_id"]: x["verb"] for x in fx["cells"]} == {a["cell_id"]: "removed", b["cell_id"]: "restored",
                                                              c["cell_id"]: "kept"}
