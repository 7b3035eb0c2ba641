"""`nbagent run` and the cells the agent ran (`run_cell`, `replace_cell`: `metadata.nbagent.ran`), issue 27.

Through `nbagent run` with real kernels and the scripted model: the executed notebook holds the cell the agent ran
(its outputs, an image among them, its provenance and count); a second `--approve recorded` run writes it anew (no
duplicate); a cell a person edited since its approval stays and fails in one line, unsent to the kernel. The rules
themselves over generated notebooks (a hypothesis property), against logs written by the runtime with a stand-in
`run_cell` / `replace_cell` (the contract's result shape; no kernel needed for the log).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import nbformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbagent.deciders import PolicyDecider
from nbagent.ipython.cells import insert_cell_tool
from nbagent.levels import Risk
from nbagent.runner_cells import (
    Outputs,
    agent_cell_clearance,
    outputs_from_messages,
    put_back,
    take_out_ran_cells,
    write_agent_cells,
)
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


def test_a_second_run_with_recorded_approvals_writes_the_cell_anew(first: dict[str, Any],
                                                                   tmp_path: Path) -> None:
    path = tmp_path / "again.ipynb"
    nbformat.write(first["saved"], path)
    (tmp_path / "s.json").write_text((first["folder"] / "s.json").read_text())
    import shutil

    shutil.copytree(store_path_for(first["path"]), store_path_for(path))
    result = nbagent_run(path, "recorded")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "side.txt").read_text() == "ran\n"  # the code ran again: once, by the re-run agent cell
    nb = nbformat.read(path, as_version=4)
    assert len(nb.cells) == 4 and nb.cells[3].source == "print('a person wrote this')"
    (cell,) = ran_cells(path)
    assert cell is nb.cells[2] or cell.id == nb.cells[2].id
    store = Store(store_path_for(path), readonly=True)
    new = store.run_ids()[-1]
    assert cell.metadata["nbagent"]["run_id"] == new != first["saved"].cells[2].metadata["nbagent"]["run_id"]
    assert cell.id != first["saved"].cells[2].id
    assert any(o.output_type == "display_data" and "image/png" in o.data for o in cell.outputs)
    assert [o.text for o in cell.outputs if o.output_type == "stream"] == ["hello from the agent\n"]


def test_a_cell_a_person_edited_fails_in_one_line_unsent_and_is_kept(first: dict[str, Any], tmp_path: Path) -> None:
    nb = first["saved"].copy()
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    edited = nb.cells[2].source.replace("'ran\\n'", "'edited\\n'")
    nb.cells[2].source = edited
    path = tmp_path / "edited.ipynb"
    nbformat.write(nb, path)
    (tmp_path / "s.json").write_text((first["folder"] / "s.json").read_text())
    import shutil

    shutil.copytree(store_path_for(first["path"]), store_path_for(path))
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


# ---------------------------------------------------------------------------------------------- the rules, generated

CODES = ["x = 1", "print('two')", "y = [3]"]


def fake_run_cell(where: Any) -> Tool:
    """A stand-in with run_cell's name, risk and result shape (the contract), so the log needs no kernel."""
    from nbagent.effects import current_call

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
        meta = {"nbagent": {"run_id": call.run_id, "index": 1, "call_id": call.call_id, "ran": True,
                            "approval_event_id": call.approval_event_id, "plan_id": call.plan_id}}
        return {"ran": True, "cell_id": uuid.uuid4().hex, "msg_id": uuid.uuid4().hex, "execution_count": 3,
                "source": source, "metadata": meta, "after_cell_id": where, "stdout": "out\n"}

    return Tool(run_cell, risk=Risk.WRITE_HIGH_RISK)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Runs of two %%agent cells ("a1" approved by --approve all, "a2" run at L3 with no approval), each writing
    an inserted cell and two ran cells."""
    folder = tmp_path_factory.mktemp("logs")
    cells: list[dict[str, Any]] = []
    approved: set[str] = set()
    for agent_cell, decider, autonomy in (("a1", PolicyDecider("all"), "L1"), ("a2", PolicyDecider("none"), "L3")):
        turns = [{"tool_calls": [{"name": "run_cell", "arguments": {"code": CODES[0]}},
                                 {"name": "insert_code_cell", "arguments": {"code": CODES[1]}},
                                 {"name": "run_cell", "arguments": {"code": CODES[2], "explanation": "y"}}]},
                 {"content": "done"}]
        agent = Agent(script={"turns": turns}, tools=[fake_run_cell(agent_cell),
                                                      insert_cell_tool(lambda c=agent_cell: (c, None))],
                      autonomy=autonomy, decider=decider, store=folder / "nb.ipynb")
        state = asyncio.run(asyncio.wait_for(agent.run("go", cell_id=agent_cell), 120))
        store = Store(store_path_for(folder / "nb.ipynb"), readonly=True)
        for e in store.run_events(state.run_id):
            if e.type == "tool_call_completed":
                cell = {"cell_type": "code", "id": e.payload.result.get("cell_id") or uuid.uuid4().hex[:8],
                        "source": e.payload.result["source"], "metadata": e.payload.result["metadata"],
                        "outputs": [], "execution_count": None}
                cells.append(cell)
                if agent_cell == "a1":
                    approved.add(cell["source"])
    return {"store": Store(store_path_for(folder / "nb.ipynb"), readonly=True), "cells": cells,
            "approved": approved}


def test_the_logs_are_what_the_property_assumes(logs: dict[str, Any]) -> None:
    store = logs["store"]
    assert len(logs["cells"]) == 6 and len(logs["approved"]) == 3
    for cell in logs["cells"]:
        assert (agent_cell_clearance(store, cell) is None) == (cell["source"] in logs["approved"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_unapproved_agent_code_is_sent_and_no_edit_is_dropped(logs: dict[str, Any], data: st.DataObject) -> None:
    store, pool = logs["store"], logs["cells"]
    person = st.builds(lambda i: {"cell_type": "code", "id": f"p{i}", "source": f"z = {i}", "metadata": {},
                                  "outputs": []}, st.integers(0, 10**6))
    agent = st.sampled_from(["a1", "a2"]).map(lambda a: {"cell_type": "code", "id": a, "metadata": {},
                                                          "source": "%%agent --script s.json\ngo", "outputs": []})

    def written(cell: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
        return st.one_of(st.just(cell["source"]), st.just(cell["source"] + "\n# mine"),
                         st.just(cell["source"].replace("=", "==")), st.just("")).map(
            lambda s: {**json.loads(json.dumps(cell)), "id": f"{cell['id']}-{uuid.uuid4().hex[:4]}", "source": s})

    items = data.draw(st.lists(st.one_of(person, agent, st.sampled_from(pool).flatmap(written)), max_size=10))
    seen: set[str] = set()
    unique = [c for c in items if not (c["id"] in seen or seen.add(c["id"]))]  # type: ignore[func-returns-value]
    nb = nbformat.from_dict({"cells": unique, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    everything = [c["source"] for c in unique]
    taken = take_out_ran_cells(nb, store)
    # what the client sends: a person's cell, or an agent's cell the check clears (never the taken-out ones)
    sent = [c for c in nb.cells if agent_cell_clearance(store, c) is None]
    for cell in sent:
        if "nbagent" in cell.metadata:
            assert cell.source.rstrip() in {s.rstrip() for s in logs["approved"]}, cell.source
    for _, _, cell in taken:  # only what the agent wrote, exactly
        assert cell.source.rstrip() in {c["source"].rstrip() for c in pool}
    # the re-run agent cells wrote nothing this time (or did): either way, every source is still somewhere
    rewritten = data.draw(st.sets(st.sampled_from(["a1", "a2"])))
    put_back(nb, taken, set())
    assert sorted(c.source for c in nb.cells) == sorted(everything)
    nb2 = nbformat.from_dict({"cells": json.loads(json.dumps(unique)), "metadata": {}, "nbformat": 4,
                              "nbformat_minor": 5})
    taken2 = take_out_ran_cells(nb2, store)
    put_back(nb2, taken2, rewritten)
    left = [c.source for c in nb2.cells]
    pool_sources = {c["source"] for c in pool}
    for source in everything:  # a person's source (anything not exactly the agent's) is never dropped
        if source not in pool_sources:
            assert source in left


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
    seen = Outputs()
    seen.own.add("mine")
    for m in [*msgs, {**msgs[0], "parent_header": {"msg_id": "mine"}}, msg("status", execution_state="idle")]:
        seen.see(m)
    assert [len(v) for v in seen.by_parent.values()] == [4]


def test_a_replace_cell_result_updates_the_cell_it_names(logs: dict[str, Any]) -> None:
    store = logs["store"]
    run_id = store.run_ids()[0]
    first = next(e.payload.result for e in store.run_events(run_id)
                 if e.type == "tool_call_completed" and e.payload.tool == "run_cell")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%%agent go", id="a1")]
    write_agent_cells(nb, store, [run_id], None)
    assert [c.id for c in nb.cells][:2] == ["a1", first["cell_id"]]
    assert nb.cells[1].outputs[0].text == "out\n" and nb.cells[1].execution_count == 3  # the log's text
    assert len([c for c in nb.cells if c.metadata.get("nbagent", {}).get("ran")]) == 2
