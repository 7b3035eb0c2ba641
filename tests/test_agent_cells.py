"""Cells the agent wrote run under `nbagent run` only when an approval in the log covers exactly that code (issue 23).

`insert_code_cell` makes code that runs later (Run All, the next `nbagent run`), so it is WRITE_HIGH_RISK and each
cell carries its provenance; `nbagent.cli.run.agent_cell_clearance` checks a cell against the log. Real kernels
through `nbagent run` for the whole path; the pure check directly, over runs made by the runtime (a person's yes,
`--approve all`, autonomy L3, a replayed decision) and over generated cells (a property test with an oracle written
here, not nbagent's own code).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from examples import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbagent.cli.run import agent_cell_clearance
from nbagent.events.state import RunStatus
from nbagent.gate.deciders import PauseDecider, PolicyDecider, RecordedDecider, Verdict
from nbagent.ipython.cells import insert_cell_tool
from nbagent.runtime import Agent
from nbagent.runtime.recording import recorded_events
from nbagent.store import Store, store_path_for

CODE = "from pathlib import Path\nwith Path('ran.txt').open('a') as f:\n    f.write('ran\\n')"


def insert(code: str = CODE, explanation: str = "mark that it ran") -> dict[str, Any]:
    return {"name": "insert_code_cell", "arguments": {"code": code, "explanation": explanation}}


def expected_source(run_id: str, code: str = CODE, explanation: str = "mark that it ran") -> str:
    """What the cell holds, written here from the documented form (docs/jupyter.md), not from nbagent's code."""
    return f"# nbagent: proposed by run {run_id}: {explanation}\n{code}\n"


def nbagent_run(path: Path, approve: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("nbagent")
    # the timeout is a guard against a hang, not a timing assertion
    return subprocess.run([str(exe), "run", str(path), "--approve", approve], capture_output=True, text=True,
                          cwd=path.parent, timeout=400, check=False)


# ---------------------------------------------------------------------------------------------- through nbagent run


@pytest.mark.kernel
def test_nbagent_run_runs_an_agent_cell_only_with_an_approval_of_exactly_its_code(tmp_path: Path) -> None:
    """Was: `--approve low` inserted the cell (WRITE_LOW_RISK, "runs nothing"), and the next `nbagent run --approve
    none` executed it: code no person approved ran."""
    (tmp_path / "s.json").write_text(json.dumps({"turns": [
        {"content": "Here is the code.", "tool_calls": [insert()]}, {"content": "It is in a cell below."}]}))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbagent"),
                nbformat.v4.new_code_cell("%%agent --script s.json\nwrite the code that marks the run"),
                nbformat.v4.new_markdown_cell("the end")]
    path = tmp_path / "cells.ipynb"
    nbformat.write(nb, path)
    ran = tmp_path / "ran.txt"

    # --approve low: the insert is WRITE_HIGH_RISK (code that runs later), denied by the policy; no cell
    result = nbagent_run(path, "low")
    assert result.returncode == 1, result.stdout + result.stderr  # the insert was denied: not done
    assert [c.cell_type for c in nbformat.read(path, as_version=4).cells] == ["code", "code", "markdown"]
    store = Store(store_path_for(path), readonly=True)
    (low,) = store.run_ids()
    plan = next(e.payload for e in store.run_events(low) if e.type == "plan_proposed")
    assert plan.steps[0].risk == "WRITE_HIGH_RISK" and "runs it" in (plan.steps[0].risk_reason or "")
    denied = next(e.payload for e in store.run_events(low) if e.type == "plan_rejected")
    assert denied.by == "policy:low" and "WRITE_HIGH_RISK is above WRITE_LOW_RISK" in denied.reason

    # --approve all: inserted, with its provenance, not executed
    result = nbagent_run(path, "all")
    assert result.returncode == 0, result.stdout + result.stderr
    cells = nbformat.read(path, as_version=4).cells
    assert [c.cell_type for c in cells] == ["code", "code", "code", "markdown"] and not ran.exists()
    cell = cells[2]
    store = Store(store_path_for(path), readonly=True)
    run_id = store.run_ids()[-1]
    assert cell.source == expected_source(run_id)
    meta = cell.metadata["nbagent"]
    events = {e.id: e for e in store.run_events(run_id)}
    started = next(e.payload for e in events.values() if e.type == "tool_call_started")
    assert (meta["run_id"], meta["call_id"], meta["plan_id"]) == (run_id, started.call_id, started.plan_id)
    approval = events[meta["approval_event_id"]]
    assert approval.type == "plan_approved" and approval.payload.by == "policy:all"
    assert meta["approval_event_id"] == started.approval_event_id and meta["grant_id"] is None
    assert meta["source_sha256"] == hashlib.sha256(cell.source.encode()).hexdigest()
    assert cell.outputs == [] and cell.execution_count is None

    # a later run with no approvals at all runs it: the log holds the approval of exactly this code
    result = nbagent_run(path, "none")
    assert result.returncode == 1, result.stdout + result.stderr  # (the re-run agent cell's insert: denied, not done)
    assert "a cell failed" not in result.stderr  # the agent-written cell itself ran
    assert ran.read_text() == "ran\n"
    assert len(nbformat.read(path, as_version=4).cells) == 4  # the re-run agent cell's insert was denied

    # one character changed in the .ipynb: not sent to the kernel, one line, exit 1
    ran.unlink()
    nb = nbformat.read(path, as_version=4)
    nb.cells[2].source = nb.cells[2].source.replace("'ran\\n'", "'rat\\n'")
    nbformat.write(nb, path)
    result = nbagent_run(path, "none")
    assert result.returncode == 1, result.stdout + result.stderr
    assert not ran.exists() and not (tmp_path / "rat.txt").exists()
    why = (f"nbagent: not run: the agent wrote this cell (run {run_id}, call {started.call_id}) and its source is "
           f"not the code approved in run {run_id} (it was edited since); run it by hand in JupyterLab if you trust "
           "it, or delete its \"nbagent\" metadata to make it your own cell")
    assert f"a cell failed: AgentCellNotApproved: {why}" in result.stderr.splitlines()
    (error,) = nbformat.read(path, as_version=4).cells[2].outputs
    assert error.output_type == "error" and error.evalue == why


# ---------------------------------------------------------------------------------------------- the check itself


def run(agent: Agent, prompt: str = "go") -> Any:
    return asyncio.run(asyncio.wait_for(agent.run(prompt), 120))


def make(folder: Path, decider: Any, autonomy: str = "L1", turns: list[dict[str, Any]] | None = None) -> Agent:
    turns = turns or [{"tool_calls": [insert(), insert("print('second')", "another")]}, {"content": "done"}]
    return Agent(script={"turns": turns}, tools=[insert_cell_tool(lambda: (None, None))], autonomy=autonomy,
                 decider=decider, store=folder / "nb.ipynb")


def cells_of(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The cells a run inserted, as `nbagent run` puts them into the notebook (from the logged results)."""
    return [{"cell_type": "code", "source": e.payload.result["source"], "metadata": e.payload.result["metadata"]}
            for e in store.run_events(run_id) if e.type == "tool_call_completed"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One log with runs of every kind: approved by a person, by --approve all, run at L3 without asking, and a
    decision replayed (--approve recorded)."""
    folder = tmp_path_factory.mktemp("cells")
    person = make(folder, PauseDecider())
    waiting = run(person)
    assert waiting.status == RunStatus.WAITING
    person.answer_pending(waiting.run_id, verdict=Verdict.approve(by="user"))
    by_person = asyncio.run(person.resume(waiting.run_id))
    by_policy = run(make(folder, PolicyDecider("all")))
    at_l3 = run(make(folder, PolicyDecider("none"), autonomy="L3"))
    store = Store(store_path_for(folder / "nb.ipynb"))
    replayed = run(make(folder, RecordedDecider.from_events(recorded_events(store, by_policy.run_id),
                                                            by_policy.run_id)))
    out = {"person": by_person.run_id, "all": by_policy.run_id, "L3": at_l3.run_id, "recorded": replayed.run_id}
    store = Store(store_path_for(folder / "nb.ipynb"), readonly=True)
    for name, run_id in out.items():
        assert store.run_state(run_id).status == RunStatus.COMPLETED, name
        assert len(cells_of(store, run_id)) == 2, name
    return {"store": store, **out}


def test_the_check_over_runs_of_every_kind(runs: dict[str, Any]) -> None:
    store = runs["store"]
    for kind in ("person", "all"):
        for cell in cells_of(store, runs[kind]):
            assert agent_cell_clearance(store, cell) is None, kind
    (l3, _), (rec, _) = (cells_of(store, runs[k]) for k in ("L3", "recorded"))
    why = agent_cell_clearance(store, l3)
    assert why is not None and "no one approved its code: the call ran because \"WRITE_HIGH_RISK runs without " \
                              "asking at autonomy L3\", which is not an approval of running it" in why
    why = agent_cell_clearance(store, rec)
    assert why is not None and f"its plan was approved by recorded:{runs['all']}, not by a person" in why
    good = cells_of(store, runs["person"])[0]
    assert agent_cell_clearance(store, {**good, "source": good["source"] + "\n\n"}) is None  # trailing space only
    assert agent_cell_clearance(store, {"cell_type": "code", "source": "1 + 1", "metadata": {}}) is None  # a person's
    meta = good["metadata"]["nbagent"]
    unknown = {**good, "metadata": {"nbagent": {**meta, "run_id": "01JZZZZZZZZZZZZZZZZZZZZZZZ"}}}
    assert "run 01JZZZZZZZZZZZZZZZZZZZZZZZ is not in this notebook's log" in (agent_cell_clearance(store, unknown)
                                                                            or "")
    # the metadata points: the log decides. Another call's approval, a forged approval id, no call, no store
    second = cells_of(store, runs["person"])[1]["metadata"]["nbagent"]
    swapped = {**good, "metadata": {"nbagent": {**meta, "call_id": second["call_id"]}}}
    assert "its source is not the code approved" in (agent_cell_clearance(store, swapped) or "")
    forged = {**cells_of(store, runs["L3"])[0]}
    forged["metadata"] = {"nbagent": {**forged["metadata"]["nbagent"], "approval_event_id": meta["approval_event_id"]}}
    assert "no one approved its code" in (agent_cell_clearance(store, forged) or "")
    for bad in ({}, {"run_id": meta["run_id"]}, "yes", {"run_id": meta["run_id"], "call_id": "nb9_9"}):
        assert agent_cell_clearance(store, {**good, "metadata": {"nbagent": bad}}) is not None, bad
    assert "is not in this notebook's log" in (agent_cell_clearance(None, good) or "")


# ---------------------------------------------------------------------------------------------- property


def _edits(text: str) -> st.SearchStrategy[str]:
    """The cell as written, or edited: one character replaced, inserted or removed anywhere."""
    pos = st.integers(0, max(0, len(text) - 1))
    char = st.characters(codec="utf-8")
    return st.one_of(
        st.just(text),
        st.builds(lambda i, c: text[:i] + c + text[i + 1:], pos, char),
        st.builds(lambda i, c: text[:i] + c + text[i:], pos, char),
        st.builds(lambda i: text[:i] + text[i + 1:], pos),
    )


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_cell_runs_unless_a_person_or_approve_all_approved_exactly_its_code(runs: dict[str, Any],
                                                                               data: st.DataObject) -> None:
    store = runs["store"]
    # the oracle: which (run, call) a person or --approve all approved, and the code each approval covered
    approved: dict[tuple[str, str], str] = {}
    pool: list[dict[str, Any]] = []
    for kind in ("person", "all", "L3", "recorded"):
        for cell, (code, explanation) in zip(cells_of(store, runs[kind]), [(CODE, "mark that it ran"),
                                                                           ("print('second')", "another")],
                                             strict=True):
            meta = cell["metadata"]["nbagent"]
            pool.append(cell)
            if kind in ("person", "all"):
                approved[(meta["run_id"], meta["call_id"])] = expected_source(meta["run_id"], code, explanation)
    base = data.draw(st.sampled_from(pool))
    meta = dict(base["metadata"]["nbagent"])
    runs_seen = sorted({m["metadata"]["nbagent"]["run_id"] for m in pool})
    calls_seen = sorted({m["metadata"]["nbagent"]["call_id"] for m in pool})
    meta["run_id"] = data.draw(st.one_of(st.just(meta["run_id"]), st.sampled_from(runs_seen), st.text(max_size=30)))
    meta["call_id"] = data.draw(st.one_of(st.just(meta["call_id"]), st.sampled_from(calls_seen),
                                          st.text(max_size=8)))
    for key in ("approval_event_id", "plan_id", "grant_id", "source_sha256"):  # whatever the metadata claims
        meta[key] = data.draw(st.one_of(st.just(meta.get(key)), st.none(), st.text(max_size=30)))
    source = data.draw(st.one_of(_edits(base["source"]), st.sampled_from([c["source"] for c in pool])))
    cell = {"cell_type": "code", "source": source, "metadata": {"nbagent": meta}}
    allowed = agent_cell_clearance(store, cell) is None
    want = approved.get((meta["run_id"], meta["call_id"]))
    assert allowed == (want is not None and source.rstrip() == want.rstrip()), (meta, source)
