"""Re-running an `%%agent` cell in a real kernel, as JupyterLab's Run All sends it: every cell's execute_request
back to back, with its cell id, so the agent's old cells are queued behind the `%%agent` cell before its run begins.

The cells its earlier runs wrote and ran are superseded: each queued one, unchanged, is a no-op that says so in one
line (its code does not run again), the front end is told which to replace before the new run writes its first
cell, and a cell the person changed runs as theirs. Each bad input of issue 46: the agent's cells deleted, moved or
edited between runs; two `%%agent` cells whose runs wrote cells; Run All interrupted half-way; requests with no
cell ids; a cell whose run is missing from the log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kernel_harness import Cell, RecordingKernel, script

from nbagent.store import Store

pytestmark = [pytest.mark.kernel, pytest.mark.slow]
LOAD = "%load_ext nbagent"
MAGIC = "%%agent --script {name} --approve all --autonomy L1\n{prompt}"
REFUSED = "nbagent: not run:"


def step(code: str, explanation: str = "") -> dict[str, Any]:
    return {"tool_calls": [{"name": "run_cell", "arguments": {"code": code, "explanation": explanation}}]}


def fix(code: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "replace_cell", "arguments": {"cell": "nb1_0", "code": code,
                                                                 "explanation": "fixed"}}]}


def mark(word: str) -> str:
    """Code that leaves a trace each time it runs: the kernel's own count of its executions."""
    return f"open('ran.txt', 'a').write({word!r} + '\\n')\nprint({word!r})"


def ran(k: RecordingKernel) -> list[str]:
    path = k.folder / "ran.txt"
    return path.read_text().split() if path.exists() else []


@pytest.fixture
def k(tmp_path: Path) -> Iterator[RecordingKernel]:
    kernel = RecordingKernel(tmp_path)
    yield kernel
    kernel.close()


def agent_cells(k: RecordingKernel, notebook: str = "test") -> list[dict[str, Any]]:
    """The cells the log says the agent ran (the latest write of each), in the order they were written."""
    store = Store(k.folder / f"{notebook}.nbagent", readonly=True)
    out: dict[str, dict[str, Any]] = {}
    for run_id in store.run_ids():
        for e in store.run_events(run_id):
            if e.type == "tool_call_completed" and e.payload.tool in ("run_cell", "replace_cell"):
                r = e.payload.result
                out[r["cell_id"]] = {"cell_id": r["cell_id"], "source": r["source"], "run_id": run_id,
                                     "agent_cell": store.run_state(run_id).cell_id}
    return list(out.values())


def submit_as_lab(k: RecordingKernel, code: str, cell_id: str | None) -> Cell:
    """An execute_request as JupyterLab sends it: its metadata is the cell's own (an agent's cell: its `nbagent`
    provenance) with the cell's id."""
    if cell_id is None:
        return k.submit(code)
    meta: dict[str, Any] = {"cellId": cell_id, "deletedCells": [], "recordTiming": False, "trusted": True}
    if code.startswith("# nbagent: run by run"):
        meta["nbagent"] = {"ran": True, "run_id": code.split()[5].rstrip(":")}
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False,
               "stop_on_error": True}
    msg = k.kc.session.msg("execute_request", content, metadata=meta)
    k.kc.shell_channel.send(msg)
    cell = Cell(msg["header"]["msg_id"])
    k.cells[cell.msg_id] = cell
    return cell


def run_all(k: RecordingKernel, cells: list[tuple[str | None, str]], timeout: float = 120) -> list[Cell]:
    """Run All: every request sent at once (as JupyterLab queues them), then each reply awaited."""
    sent = [submit_as_lab(k, code, cell_id) for cell_id, code in cells]
    for c in sent:
        k.wait(c, timeout)
    return sent


def refusal(cell: Cell) -> str:
    """The cell's one refusal line (it did not run), or ''."""
    lines = [n for n in cell.notes if n.startswith(REFUSED)]
    assert len(lines) <= 1 and all("\n" not in n for n in lines), lines
    return lines[0] if lines else ""


def supersedes(k: RecordingKernel) -> list[dict[str, Any]]:
    return [d for d in k.comms() if d.get("action") == "supersede"]


def first_run(k: RecordingKernel, name: str = "s.json", cell_id: str | None = "agent", prompt: str = "go",
              setup: str | None = "setup") -> None:
    """One `%%agent` run that runs a cell and then replaces it (both approved by --approve all)."""
    script(k.folder / name, step(mark("first")), fix(mark("fixed")), {"content": "done"})
    assert k.run(LOAD, cell_id=setup).ok
    c = k.run(MAGIC.format(name=name, prompt=prompt), cell_id=cell_id)
    assert c.ok, (c.stderr, c.outputs)


def test_run_all_in_a_new_kernel_runs_the_agents_code_once_and_keeps_the_persons_edit(k: RecordingKernel) -> None:
    """The agent's cell, queued behind its re-run `%%agent` cell, is a no-op with one line; the re-run's own cell
    runs the code; the front end is told to replace the old cell before the new one is written; the person's own
    cells run; a moved agent cell (below the person's) is refused just the same. Then the person edits the agent's
    (new) cell and Run All again: their edit runs as their cell, not refused, and the front end is told to decide."""
    first_run(k)
    (old,) = agent_cells(k)
    assert ran(k) == ["first", "fixed"]
    k.restart()  # saved, shut down, reopened: a new kernel
    sent = run_all(k, [("setup", LOAD), ("agent", MAGIC.format(name="s.json", prompt="go")),
                       ("mine", "print('the person')"), (old["cell_id"], old["source"])])
    assert all(c.ok for c in sent), [(c.stderr, c.outputs) for c in sent]
    assert ran(k) == ["first", "fixed", "first", "fixed"]  # the re-run ran the code; the old cell did not
    line = refusal(sent[3])
    assert old["run_id"] in line and "its %%agent cell ran again" in line and "edit this cell" in line, line
    assert sent[3].stdout == "" and refusal(sent[2]) == "" and "the person" in sent[2].stdout
    (told,) = supersedes(k)
    # the new run's messages to the front end (the first run's last ones may be read only now, on a loaded machine)
    comms = [d for d in k.comms() if told["run_id"] in (d.get("run_id"), ((d.get("metadata") or {}).get("nbagent")
                                                                           or {}).get("run_id"))]
    kinds = [d.get("action", "insert") for d in comms]
    assert kinds[:2] == ["supersede", "insert"], kinds  # said before the new run's first cell is written
    assert told["agent_cell_id"] == "agent" and told["cells"] == [{"cell_id": old["cell_id"],
                                                                   "source": old["source"]}]
    new = [c for c in agent_cells(k) if c["cell_id"] != old["cell_id"]]
    assert len(new) == 1 and told["run_id"] == new[0]["run_id"] != old["run_id"]

    # the person edits the agent's new cell; Run All again in the same kernel
    edited = new[0]["source"] + "print('my line')\n"
    sent = run_all(k, [("setup", LOAD), ("agent", MAGIC.format(name="s.json", prompt="go")),
                       (new[0]["cell_id"], edited), (old["cell_id"], old["source"])])
    assert all(c.ok for c in sent)
    assert refusal(sent[2]) == "" and "my line" in sent[2].stdout  # theirs: it ran as their cell
    assert "its %%agent cell ran again" in refusal(sent[3])
    assert ran(k) == ["first", "fixed"] * 3 + ["fixed"]  # the re-run's two, the person's edited cell once
    told = supersedes(k)[-1]
    assert {c["cell_id"] for c in told["cells"]} == {old["cell_id"], new[0]["cell_id"]}


def test_two_agent_cells_each_supersede_only_their_own(k: RecordingKernel) -> None:
    """Two `%%agent` cells whose runs wrote cells; the person deleted one of the first one's cells and moved the
    second's above its `%%agent` cell. Run All: the first's re-run refuses only its own old cell, the second's old
    cell (reached before the second re-runs) still runs once, and the second's re-run then refuses nothing more."""
    script(k.folder / "a.json", step(mark("a1")), step(mark("a2")), {"content": "done"})
    script(k.folder / "b.json", step(mark("b")), {"content": "done"})
    assert k.run(LOAD, cell_id="setup").ok
    assert k.run(MAGIC.format(name="a.json", prompt="first"), cell_id="A").ok
    assert k.run(MAGIC.format(name="b.json", prompt="second"), cell_id="B").ok
    cells = agent_cells(k)
    a_cells = [c for c in cells if c["agent_cell"] == "A"]
    (b_cell,) = [c for c in cells if c["agent_cell"] == "B"]
    assert len(a_cells) == 2 and ran(k) == ["a1", "a2", "b"]
    k.restart()
    # a1's cell deleted; b's cell moved above B
    sent = run_all(k, [("setup", LOAD), ("A", MAGIC.format(name="a.json", prompt="first")),
                       (a_cells[1]["cell_id"], a_cells[1]["source"]), (b_cell["cell_id"], b_cell["source"]),
                       ("B", MAGIC.format(name="b.json", prompt="second"))])
    assert all(c.ok for c in sent), [(c.stderr, c.outputs) for c in sent]
    assert "its %%agent cell ran again" in refusal(sent[2]) and refusal(sent[3]) == ""
    assert ran(k) == ["a1", "a2", "b", "a1", "a2", "b", "b"]
    told = supersedes(k)
    assert [t["agent_cell_id"] for t in told] == ["A", "B"]
    assert [c["cell_id"] for c in told[0]["cells"]] == [c["cell_id"] for c in a_cells]
    assert [c["cell_id"] for c in told[1]["cells"]] == [b_cell["cell_id"]]


def test_run_all_interrupted_half_way_leaves_the_old_cells_refused_and_the_kernel_alive(tmp_path: Path) -> None:
    """The re-run waits for a card; the person interrupts: the queued cells are not run (the kernel aborts them),
    the new run wrote no cell so the front end is told nothing (the old cells stay), and running the old cell by
    hand afterwards is refused in one line; the kernel answers the next cell."""
    k = RecordingKernel(tmp_path)
    try:
        magic = "%%agent --script s.json --autonomy L1\ngo"
        script(tmp_path / "s.json", step(mark("first")), {"content": "done"})
        assert k.run(LOAD, cell_id="setup").ok
        c = k.submit(magic, "agent")
        comm, pending = k.wait_for_pending()
        k.click(comm, pending["request_id"], "approve")
        k.wait(c)
        assert c.ok and ran(k) == ["first"]
        (old,) = agent_cells(k)
        k.restart()
        assert k.run(LOAD, cell_id="setup").ok
        sent = [k.submit(magic, "agent"), k.submit(old["source"], old["cell_id"]), k.submit("print(2)", "mine")]
        k.wait_for_pending(exclude={pending["request_id"]})
        k.km.interrupt_kernel()
        for s in sent:
            k.wait(s)
        assert not sent[0].ok  # the %%agent cell failed as interrupted: Run All stops there
        assert [s.reply["content"]["status"] for s in sent[1:]] == ["aborted", "aborted"]  # type: ignore[index]
        assert ran(k) == ["first"] and supersedes(k) == []
        by_hand = k.run(old["source"], cell_id=old["cell_id"])
        assert by_hand.ok and "its %%agent cell ran again" in refusal(by_hand) and ran(k) == ["first"]
        assert "2" in k.run("print(1 + 1)", cell_id="later").stdout
    finally:
        k.close()


def test_requests_without_cell_ids_are_matched_by_their_source(k: RecordingKernel) -> None:
    """A front end that sends no cell ids: the runs are recorded without one, and a re-run of the same request
    supersedes their cells, matched by source; the agent's cell then runs once per Run All, not twice."""
    first_run(k, cell_id=None, setup=None)
    (old,) = agent_cells(k)
    k.restart()
    sent = run_all(k, [(None, LOAD), (None, MAGIC.format(name="s.json", prompt="go")), (None, old["source"]),
                       (None, old["source"] + "# mine\n")])
    assert all(c.ok for c in sent)
    assert "its %%agent cell ran again" in refusal(sent[2])
    assert refusal(sent[3]) == "" and "fixed" in sent[3].stdout  # a changed one is the person's
    assert ran(k) == ["first", "fixed", "first", "fixed", "fixed"]
    assert supersedes(k) == []  # no cell ids: nothing a front end could find the cells by


def test_a_cell_whose_run_is_missing_from_the_log_is_refused_in_one_line(tmp_path: Path) -> None:
    """The notebook came without its log (copied under another name): its agent cell names a run the log does not
    hold. After its `%%agent` cell ran in this kernel, that cell is not run (its code cannot be checked), in one
    line; the person's cells run; nothing is duplicated."""
    k = RecordingKernel(tmp_path)
    try:
        first_run(k)
        (old,) = agent_cells(k)
    finally:
        k.close()
    copy = RecordingKernel(tmp_path, env={"JPY_SESSION_NAME": str(tmp_path / "copy.ipynb")})
    try:
        sent = run_all(copy, [("setup", LOAD), ("agent", MAGIC.format(name="s.json", prompt="go")),
                              (old["cell_id"], old["source"]), ("mine", "print('mine')")])
        assert all(c.ok for c in sent)
        line = refusal(sent[2])
        assert f"run {old['run_id']}, which this notebook's log does not hold" in line, line
        assert "mine" in sent[3].stdout and ran(copy) == ["first", "fixed", "first", "fixed"]
        assert supersedes(copy) == []  # the copy's log has no earlier run of the cell
    finally:
        copy.close()


def test_a_rerun_cannot_replace_a_cell_it_supersedes(k: RecordingKernel) -> None:
    """In the same kernel, the re-run's replace_cell of the earlier run's cell (named by its id, as list_cells shows
    it) is refused in one line the model reads: that cell is being replaced by this run; the run goes on."""
    first_run(k)
    (old,) = agent_cells(k)
    script(k.folder / "s.json", {"tool_calls": [{"name": "replace_cell", "arguments": {
        "cell": old["cell_id"], "code": mark("again")}}]}, {"content": "done"})
    c = k.run(MAGIC.format(name="s.json", prompt="go"), cell_id="agent")
    assert c.ok and ran(k) == ["first", "fixed"]
    store = Store(k.folder / "test.nbagent", readonly=True)
    last = store.run_ids()[-1]
    (failed,) = [e.payload for e in store.run_events(last) if e.type == "tool_call_failed"]
    assert "written by an earlier run of this %%agent cell" in str(failed.error), failed


def test_a_notebook_whose_cell_ids_changed_is_matched_by_request_and_code(k: RecordingKernel) -> None:
    """Saved by a front end that drops cell ids, then opened in JupyterLab, which gives every cell a new id: the log's
    runs name ids the notebook no longer has. The re-run's earlier runs are found by its request, its old cell by its
    code: the queued copy is a no-op in one line, the front end is told to look for it by its code (`by_request`),
    and the agent's code runs once per run. A second `%%agent` cell with the same request, run after it, replaces
    nothing of the first's."""
    first_run(k)
    (old,) = agent_cells(k)
    k.restart()
    sent = run_all(k, [("new-setup", LOAD), ("new-agent", MAGIC.format(name="s.json", prompt="go")),
                       ("new-old", old["source"])])
    assert all(c.ok for c in sent)
    assert f"run {old['run_id']}" in refusal(sent[2]) and ran(k) == ["first", "fixed"] * 2
    (told,) = supersedes(k)
    assert told["by_request"] is True and told["cells"] == [{"cell_id": old["cell_id"], "source": old["source"]}]
    copy = k.run(MAGIC.format(name="s.json", prompt="go"), cell_id="copy")
    assert copy.ok and ran(k) == ["first", "fixed"] * 3
    mine = [c for c in agent_cells(k) if c["agent_cell"] == "new-agent"]
    assert all(mine[0]["cell_id"] not in [c["cell_id"] for c in t["cells"]] for t in supersedes(k))
