"""`nbagent run` and the cells the agent ran (`run_cell`, `replace_cell`: `metadata.nbagent.ran`), issue 27.

Through `nbagent run` with real kernels and the scripted model: the executed notebook holds the cell the agent ran
(its outputs, an image among them, its provenance and count); a second `--approve recorded` run writes it anew (no
duplicate); a cell a person edited since its approval stays and fails in one line, unsent to the kernel. The rules
themselves over generated notebooks (a hypothesis property), against logs written by the runtime with a stand-in
`run_cell` / `replace_cell` (the contract's result shape; no kernel needed for the log).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import nbformat
import pytest
from examples import examples
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from nbagent.cli.run_cells import (
    Outputs,
    agent_cell_clearance,
    outputs_from_messages,
    put_back,
    take_out_ran_cells,
    write_agent_cells,
)
from nbagent.events.levels import Risk
from nbagent.gate.deciders import PolicyDecider
from nbagent.ipython.cells import insert_cell_tool
from nbagent.runtime import Agent
from nbagent.store import Store, store_path_for
from nbagent.tools.base import Tool

PLOT = ("%matplotlib inline\nimport matplotlib.pyplot as plt\nfrom pathlib import Path\n"
        "with Path('side.txt').open('a') as f:\n    f.write('ran\\n')\n"
        "print('hello from the agent')\nplt.plot([1, 2, 3]);")


def nbagent_run(path: Path, approve: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("nbagent")
    # the timeout is a guard against a hang, not a timing assertion
    return subprocess.run([str(exe), "run", str(path), "--approve", approve], capture_output=True, text=True,
                          cwd=path.parent, timeout=400, check=False)


def ran_cells(path: Path) -> list[Any]:
    return [c for c in nbformat.read(path, as_version=4).cells if (c.metadata.get("nbagent") or {}).get("ran")]


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A notebook whose %%agent cell ran a print and a plot (`--approve all`), executed once."""
    folder = tmp_path_factory.mktemp("ran")
    (folder / "s.json").write_text(json.dumps({"turns": [
        {"tool_calls": [{"name": "run_cell", "arguments": {"code": PLOT, "explanation": "plot it"}}]},
        {"content": "Plotted."}]}))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbagent"),
                nbformat.v4.new_code_cell("%%agent --script s.json\nplot the numbers"),
                nbformat.v4.new_code_cell("print('a person wrote this')")]
    path = folder / "plot.ipynb"
    nbformat.write(nb, path)
    result = nbagent_run(path, "all")
    assert result.returncode == 0, result.stdout + result.stderr
    return {"folder": folder, "path": path, "saved": nbformat.read(path, as_version=4)}


@pytest.mark.kernel
def test_the_cell_the_agent_ran_is_in_the_executed_notebook_with_its_outputs(first: dict[str, Any]) -> None:
    nb, path = first["saved"], first["path"]
    assert (first["folder"] / "side.txt").read_text() == "ran\n"
    agent = nb.cells[1]
    cell = nb.cells[2]  # below its %%agent cell, above the person's next cell
    assert nb.cells[3].source == "print('a person wrote this')" and len(nb.cells) == 4
    store = Store(store_path_for(path), readonly=True)
    (run_id,) = store.run_ids()
    result = next(e.payload.result for e in store.run_events(run_id) if e.type == "tool_call_completed")
    assert cell.id == result["cell_id"] and cell.source == f"# nbagent: run by run {run_id}: plot it\n{PLOT}\n"
    meta = cell.metadata["nbagent"]
    assert meta["ran"] is True and meta["run_id"] == run_id and store.run_state(run_id).cell_id == agent.id
    started = next(e.payload for e in store.run_events(run_id) if e.type == "tool_call_started")
    assert (meta["call_id"], meta["approval_event_id"]) == (started.call_id, started.approval_event_id)
    assert cell.execution_count == result["execution_count"] and isinstance(cell.execution_count, int)
    streams = [o for o in cell.outputs if o.output_type == "stream"]
    assert [(o.name, o.text) for o in streams] == [("stdout", "hello from the agent\n")]
    images = [o for o in cell.outputs if o.output_type == "display_data" and "image/png" in o.data]
    assert len(images) == 1 and len(images[0].data["image/png"]) > 1000  # the bytes, not a description
    assert not any(o.output_type == "error" for o in cell.outputs)


def copy_of(first: dict[str, Any], folder: Path, name: str, edit: bool) -> tuple[Path, str]:
    """The saved notebook (its agent cell's code edited by a person, or not), its script and log, in `folder`."""
    import shutil

    nb = nbformat.from_dict(json.loads(json.dumps(first["saved"])))
    source = nb.cells[2].source.replace("'ran\\n'", "'edited\\n'") if edit else nb.cells[2].source
    nb.cells[2].source = source
    path = folder / name
    nbformat.write(nb, path)
    (folder / "s.json").write_text((first["folder"] / "s.json").read_text())
    shutil.copytree(store_path_for(first["path"]), store_path_for(path))
    # the copy stands for the same person's notebook run again: their anchors (store/anchor.py) go with it, or
    # its recorded yes would be another's, asked again (nbagent/runtime/recorded_yes.py)
    from nbagent.store.anchor import Anchor

    mine, theirs = (Anchor(store_path_for(p), "").path for p in (first["path"], path))
    shutil.copyfile(mine, theirs)
    return path, source


@pytest.mark.kernel
def test_a_second_run_with_recorded_approvals_writes_the_cell_anew(first: dict[str, Any],
                                                                   tmp_path: Path) -> None:
    path, _ = copy_of(first, tmp_path, "again.ipynb", edit=False)
    result = nbagent_run(path, "recorded")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "side.txt").read_text() == "ran\n"  # the code ran again: once, by the re-run agent cell
    nb = nbformat.read(path, as_version=4)
    assert len(nb.cells) == 4 and nb.cells[3].source == "print('a person wrote this')"
    (cell,) = ran_cells(path)
    assert cell.id == nb.cells[2].id
    store = Store(store_path_for(path), readonly=True)
    new = store.run_ids()[-1]
    assert cell.metadata["nbagent"]["run_id"] == new != first["saved"].cells[2].metadata["nbagent"]["run_id"]
    assert cell.id != first["saved"].cells[2].id
    assert any(o.output_type == "display_data" and "image/png" in o.data for o in cell.outputs)
    assert [o.text for o in cell.outputs if o.output_type == "stream"] == ["hello from the agent\n"]


@pytest.mark.kernel
def test_a_cell_a_person_edited_fails_in_one_line_unsent_and_is_kept(first: dict[str, Any], tmp_path: Path) -> None:
    path, edited = copy_of(first, tmp_path, "edited.ipynb", edit=True)
    result = nbagent_run(path, "none")
    assert result.returncode == 1, result.stdout + result.stderr
    assert not (tmp_path / "side.txt").exists()  # neither the edited cell nor the (denied) re-run wrote it
    out = nbformat.read(path, as_version=4)
    kept = [c for c in out.cells if c.source == edited]
    assert len(kept) == 1  # the person's edit is there, once
    (error,) = kept[0].outputs
    assert error.output_type == "error" and error.ename == "AgentCellNotApproved"
    assert "the agent wrote and ran this cell" in error.evalue and "a person changed it since its approval" in \
        error.evalue and "re-run the %%agent cell" in error.evalue and "\n" not in error.evalue
    assert f"a cell failed: AgentCellNotApproved: {error.evalue}" in result.stderr.splitlines()


@pytest.mark.kernel
def test_a_re_run_that_writes_no_cells_puts_the_old_ones_back_unrun(first: dict[str, Any], tmp_path: Path) -> None:
    """`--approve none` (the default, in place): the re-run's run_cell is denied, so the agent's cell stays as it
    was saved (its outputs too), and its code is not run by the runner either."""
    path, _ = copy_of(first, tmp_path, "denied.ipynb", edit=False)
    result = nbagent_run(path, "none")
    assert result.returncode == 1 and "a cell failed" not in result.stderr, result.stdout + result.stderr
    assert not (tmp_path / "side.txt").exists()
    nb = nbformat.read(path, as_version=4)
    assert [c.source for c in nb.cells] == [c.source for c in first["saved"].cells]
    assert nb.cells[2].id == first["saved"].cells[2].id and nb.cells[2].outputs == first["saved"].cells[2].outputs
    assert nb.cells[3].outputs[0].text == "a person wrote this\n"  # the cells after it ran


@pytest.mark.kernel
def test_an_edited_cell_stays_beside_the_one_the_re_run_writes(first: dict[str, Any], tmp_path: Path) -> None:
    path, source = copy_of(first, tmp_path, "both.ipynb", edit=True)
    result = nbagent_run(path, "recorded")
    assert result.returncode == 1, result.stdout + result.stderr
    assert (tmp_path / "side.txt").read_text() == "ran\n"  # the agent's code, once; not the edit ('edited')
    nb = nbformat.read(path, as_version=4)
    fresh, kept = nb.cells[2], nb.cells[3]
    assert fresh.source == first["saved"].cells[2].source.replace(
        first["saved"].cells[2].metadata["nbagent"]["run_id"], fresh.metadata["nbagent"]["run_id"])
    assert any("image/png" in o.get("data", {}) for o in fresh.outputs)
    assert kept.source == source and kept.outputs[0].ename == "AgentCellNotApproved"


# ---------------------------------------------------------------------------------------------- the rules, generated

CODES = ["x = 1", "print('two')", "y = [3]", "y = [4]"]


def stand_ins(where: str) -> list[Tool]:
    """`run_cell` and `replace_cell` with their names, risk and result shapes (the contract), so the log needs no
    kernel; replace_cell's header is not run_cell's, as another tool's may not be."""
    from nbagent.gate.effects import current_call

    written: dict[str, str] = {}  # call id -> cell id

    def provenance(call: Any, source: str, **more: Any) -> dict[str, Any]:
        return {"nbagent": {"run_id": call.run_id, "index": 1, "call_id": call.call_id, "ran": True,
                            "approval_event_id": call.approval_event_id, "plan_id": call.plan_id,
                            "grant_id": None, "source_sha256": hashlib.sha256(source.encode()).hexdigest(), **more}}

    async def run_cell(code: str, explanation: str = "") -> dict[str, Any]:
        """Run code as a cell.

        Args:
            code: the code
            explanation: one line
        """
        call = current_call()
        assert call is not None
        source = f"# nbagent: run by run {call.run_id}" + (f": {explanation}" if explanation else "") + \
            f"\n{code}\n"
        written[call.call_id] = cell_id = uuid.uuid4().hex
        return {"ran": True, "cell_id": cell_id, "msg_id": uuid.uuid4().hex, "execution_count": 3,
                "source": source, "metadata": provenance(call, source), "after_cell_id": where, "stdout": "out\n"}

    async def replace_cell(cell: str, code: str, explanation: str = "") -> dict[str, Any]:
        """Replace the code of a cell the agent wrote, and run it.

        Args:
            cell: a cell id or the call id that wrote it
            code: the new code
            explanation: one line
        """
        call = current_call()
        assert call is not None
        source = f"# nbagent: replaced by run {call.run_id}\n{code}\n"
        target = list(written.values())[-1] if cell == "last" else written.get(cell, cell)
        return {"ran": True, "replaced": True, "cell_id": target, "msg_id": uuid.uuid4().hex,
                "execution_count": 4, "source": source, "metadata": provenance(call, source, version=2),
                "old_source": "(before)", "after_cell_id": where, "stdout": "replaced\n"}

    return [Tool(run_cell, risk=Risk.WRITE_HIGH_RISK), Tool(replace_cell, risk=Risk.WRITE_HIGH_RISK)]


def turns(codes: list[str], replace: bool) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = [{"name": "run_cell", "arguments": {"code": codes[0]}},
                                   {"name": "insert_code_cell", "arguments": {"code": codes[1]}},
                                   {"name": "run_cell", "arguments": {"code": codes[2], "explanation": "y"}}]
    later = [{"tool_calls": [{"name": "replace_cell", "arguments": {"cell": "last", "code": codes[3]}}]}] \
        if replace else []
    return [{"tool_calls": calls}, *later, {"content": "done"}]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Runs of three %%agent cells: "a1" approved by --approve all, "a2" run at L3 with no approval, "a3" approved
    by --approve all and replacing the cell its last run_cell wrote. Each writes an inserted cell and ran cells."""
    folder = tmp_path_factory.mktemp("logs")
    cells: list[dict[str, Any]] = []
    approved: set[str] = set()
    for agent_cell, decider, autonomy in (("a1", PolicyDecider("all"), "L1"), ("a2", PolicyDecider("none"), "L3"),
                                          ("a3", PolicyDecider("all"), "L1")):
        script = turns(CODES, replace=agent_cell == "a3")
        agent = Agent(script={"turns": script}, tools=[*stand_ins(agent_cell),
                                                       insert_cell_tool(lambda c=agent_cell: (c, None))],
                      autonomy=autonomy, decider=decider, store=folder / "nb.ipynb")
        state = asyncio.run(asyncio.wait_for(agent.run("go", cell_id=agent_cell), 120))
        store = Store(store_path_for(folder / "nb.ipynb"), readonly=True)
        for e in store.run_events(state.run_id):
            if e.type == "tool_call_completed" and isinstance(e.payload.result, dict):
                r = e.payload.result
                cell = {"cell_type": "code", "id": r.get("cell_id") or uuid.uuid4().hex[:8], "source": r["source"],
                        "metadata": r["metadata"], "outputs": [], "execution_count": None}
                cells.append(cell)
                if agent_cell != "a2":
                    approved.add(cell["source"])
    return {"store": Store(store_path_for(folder / "nb.ipynb"), readonly=True), "cells": cells,
            "approved": approved, "path": folder / "nb.ipynb"}


def test_the_logs_are_what_the_property_assumes(logs: dict[str, Any]) -> None:
    store = logs["store"]
    tools = [e.payload.tool for r in store.run_ids() for e in store.run_events(r) if e.type == "tool_call_completed"]
    assert tools.count("replace_cell") == 1 and len(logs["cells"]) == 10 and len(logs["approved"]) == 7
    for cell in logs["cells"]:
        assert (agent_cell_clearance(store, cell) is None) == (cell["source"] in logs["approved"]), cell


def probe_client(store_path: Path) -> Any:
    """The runner's own client class, with the kernel swapped for a list of what would be sent to it (its gate runs
    first; cooperative inheritance puts `Sent` between it and nbclient)."""
    from nbclient import NotebookClient

    from nbagent.cli.run import _client_class

    class Sent(NotebookClient):
        sent: list[str]

        async def async_execute_cell(self, cell: Any, cell_index: int, execution_count: int | None = None,
                                     store_history: bool = True) -> Any:
            self.sent.append(cell.source)
            return cell

    class Probe(_client_class(), Sent):  # type: ignore[misc]
        pass

    def make(nb: Any) -> Any:
        client = Probe(nb)
        client.sent = []
        client.store_path = store_path
        return client

    return make


def execute_all(client: Any) -> None:
    """Every cell through the client, as nbclient would with errors allowed (each refusal is its own cell's)."""
    from nbclient.exceptions import CellExecutionError

    async def go() -> None:
        for i, cell in enumerate(client.nb.cells):
            try:
                await client.async_execute_cell(cell, i)
            except CellExecutionError:
                pass

    asyncio.run(go())


@pytest.mark.kernel
@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_unapproved_agent_code_is_sent_and_no_edit_is_dropped(logs: dict[str, Any], data: st.DataObject) -> None:
    store, pool = logs["store"], logs["cells"]
    agent_sources = {c["source"].rstrip() for c in pool}
    approved = {s.rstrip() for s in logs["approved"]}
    person = st.builds(lambda i: {"cell_type": "code", "id": f"p{i}", "source": f"z = {i}", "metadata": {},
                                  "outputs": [], "execution_count": None}, st.integers(0, 10**6))
    agent = st.sampled_from(["a1", "a2", "a3"]).map(
        lambda a: {"cell_type": "code", "id": a, "metadata": {}, "source": "%%agent --script s.json\ngo",
                   "outputs": [], "execution_count": None})

    def written(cell: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
        edits = st.one_of(st.just(cell["source"]), st.just(cell["source"] + "\n\n"),
                          st.just(cell["source"] + "# mine\n"), st.just(cell["source"].replace("=", "==")),
                          st.just(cell["source"].replace("\n", "\r", 1)), st.just("y = 5"))
        ids = st.one_of(st.just(cell["id"]), st.integers(0, 10**6).map(lambda i: f"w{i}"))
        return st.tuples(edits, ids).map(lambda t: {**json.loads(json.dumps(cell)), "id": t[1], "source": t[0]})

    items = data.draw(st.lists(st.one_of(person, agent, st.sampled_from(pool).flatmap(written)), max_size=10))
    unique = list({c["id"]: c for c in items}.values())

    def notebook() -> Any:
        return nbformat.from_dict({"cells": json.loads(json.dumps(unique)), "metadata": {}, "nbformat": 4,
                                   "nbformat_minor": 5})

    nb = notebook()
    taken = take_out_ran_cells(nb, store)
    for _, _, cell in taken:  # only what the agent wrote, exactly
        assert cell.source.rstrip() in agent_sources
    client = probe_client(store_path_for(logs["path"]))(nb)
    execute_all(client)
    agent_written = {c["source"] for c in unique if c["metadata"].get("nbagent")}
    person_written = {c["source"] for c in unique if not c["metadata"].get("nbagent")}
    event(f"taken out: {bool(taken)}")
    event(f"agent code sent: {any(s not in person_written for s in client.sent)}")
    event(f"agent code refused: {len(client.sent) < len(nb.cells)}")
    for source in client.sent:  # an agent's source reaches the kernel only when it is exactly an approved one
        assert source in person_written or source.rstrip() in approved, source
        if source not in person_written:
            assert source in agent_written
    # whatever the re-run %%agent cells wrote this time, no source that is not exactly the agent's is dropped,
    # and nothing at all when they wrote nothing
    rewritten = data.draw(st.sets(st.sampled_from(["a1", "a2", "a3"])))
    if "a3" in rewritten:  # the cells a3's run wrote (a replace among them), written anew from the log
        rewritten |= write_agent_cells(nb, store, [store.run_ids()[2]], None)
    put_back(nb, taken, rewritten)
    left = [c.source for c in nb.cells]
    for source in (c["source"] for c in unique):
        if source.rstrip() not in agent_sources:
            assert source in left, source
    assert len({c.id for c in nb.cells}) == len(nb.cells)
    nb = notebook()
    put_back(nb, take_out_ran_cells(nb, store), set())
    assert [c.source for c in nb.cells] == [c["source"] for c in unique]  # all back, in their places


def test_outputs_from_messages_follow_clear_update_and_streams() -> None:
    def msg(kind: str, **content: Any) -> dict[str, Any]:
        return {"header": {"msg_type": kind}, "msg_type": kind, "parent_header": {"msg_id": "M"}, "content": content}

    msgs = [msg("stream", name="stdout", text="a"), msg("stream", name="stdout", text="b\n"),
            msg("display_data", data={"text/plain": "1"}, metadata={}, transient={"display_id": "d"}),
            msg("update_display_data", data={"text/plain": "2"}, metadata={}, transient={"display_id": "d"})]
    outs = outputs_from_messages(msgs)
    assert [o.output_type for o in outs] == ["stream", "display_data"]
    assert outs[0].text == "ab\n" and outs[1].data == {"text/plain": "2"}
    assert outputs_from_messages([*msgs, msg("clear_output", wait=True)]) == outs
    assert outputs_from_messages([*msgs, msg("clear_output", wait=True), msg("stream", name="stdout",
                                                                              text="c")])[0].text == "c"
    assert outputs_from_messages([*msgs, msg("clear_output", wait=False)]) == []
    seen = Outputs()
    seen.own.add("mine")
    for m in [*msgs, {**msgs[0], "parent_header": {"msg_id": "mine"}}, msg("status", execution_state="idle")]:
        seen.see(m)
    assert [len(v) for v in seen.by_parent.values()] == [4]


def test_cells_written_from_the_log_alone_and_a_replace_updates_its_cell(logs: dict[str, Any]) -> None:
    store = logs["store"]
    a1, _, a3 = store.run_ids()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%%agent go", id="a1"), nbformat.v4.new_code_cell("z = 0", id="p"),
                nbformat.v4.new_code_cell("%%agent go", id="a3")]
    assert write_agent_cells(nb, store, [a1, a3], None) == {"a1", "a3"}
    kinds = [("ran" if c.metadata["nbagent"].get("ran") else "inserted") if "nbagent" in c.metadata else c.source
             for c in nb.cells]
    assert kinds == ["%%agent go", "ran", "inserted", "ran", "z = 0", "%%agent go", "ran", "inserted", "ran"]
    first = next(e.payload.result for e in store.run_events(a1) if e.type == "tool_call_completed")
    assert nb.cells[1].id == first["cell_id"] and nb.cells[1].execution_count == 3
    assert [(o.output_type, o.text) for o in nb.cells[1].outputs] == [("stream", "out\n")]  # the log's text
    replaced = nb.cells[-1]  # a3's last run_cell cell, replaced in place: new source, count, outputs
    assert replaced.source == f"# nbagent: replaced by run {a3}\n{CODES[3]}\n" and replaced.execution_count == 4
    assert replaced.metadata["nbagent"]["version"] == 2 and replaced.outputs[0].text == "replaced\n"
