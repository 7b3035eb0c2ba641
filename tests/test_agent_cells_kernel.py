"""list_cells and replace_cell in real kernels: the kernel knows which cells the agent wrote; the agent replaces only
those, in place, with the diff on the card and in the result; decisions bind to the cell, not to its spelling."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kernel_harness import RecordingKernel, script

from nbagent.store import Store

pytestmark = [pytest.mark.kernel, pytest.mark.slow]
AGENT = "%%agent --script s.json --approve all --autonomy L3 --new\n"


@pytest.fixture
def k(tmp_path: Path) -> Iterator[RecordingKernel]:
    kernel = RecordingKernel(tmp_path)
    assert kernel.run("%load_ext nbagent", cell_id="setup").ok
    yield kernel
    kernel.close()


def turn(name: str, call_id: str | None = None, **arguments: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "arguments": arguments}
    if call_id:
        c["id"] = call_id
    return {"tool_calls": [c]}


def agent(k: RecordingKernel, *turns: dict[str, Any], cell_id: str = "c1", flags: str = AGENT) -> None:
    script(k.folder / "s.json", *turns, {"content": "done"})
    cell = k.run(flags + "go", cell_id=cell_id)
    assert cell.ok, (cell.stderr, cell.outputs)


def events(k: RecordingKernel, kind: str, tool: str | None = None) -> list[Any]:
    store = Store(k.folder / "test.nbagent", readonly=True)
    out = []
    for run_id in store.run_ids():
        for e in store.run_events(run_id):
            if e.type == kind and (tool is None or getattr(e.payload, "tool", None) == tool):
                out.append(e.payload)
    return out


def completed(k: RecordingKernel, tool: str) -> list[dict[str, Any]]:
    return [p.result for p in events(k, "tool_call_completed", tool)]


def failed(k: RecordingKernel, tool: str) -> list[str]:
    return [p.error for p in events(k, "tool_call_failed", tool)]


def test_list_cells_names_the_agents_cells_and_the_persons(k: RecordingKernel) -> None:
    k.run("x = 1  # mine", cell_id="p1")
    agent(k, turn("run_cell", code="y = x + 1\nprint(y)", explanation="add one"),
          turn("list_cells", "call_l"))
    (ran,) = completed(k, "run_cell")
    (listed,) = completed(k, "list_cells")
    rows = listed["cells"]
    person = next(r for r in rows if "x = 1" in r["source"])
    assert person["written_by"] == "person" and person["cell_id"] == "p1"
    mine = next(r for r in rows if r.get("cell_id") == ran["cell_id"])
    assert mine["written_by"].startswith("agent (run ") and "call nb1_0" in mine["written_by"]
    assert mine["execution_count"] == ran["execution_count"] and "printed '2'" in mine["outputs"]
    request = next(r for r in rows if r.get("cell_id") == "c1")
    assert request["written_by"] == "person (a request to the agent)"


def test_list_cells_is_bounded(k: RecordingKernel) -> None:
    k.run("for i in range(60):\n    get_ipython().run_cell('z = ' + 'x' * 3000, store_history=True)", cell_id="p1")
    agent(k, turn("list_cells"))
    (listed,) = completed(k, "list_cells")
    assert len(listed["cells"]) == 40 and "older cells not shown" in listed["cells_not_shown"]
    assert all(len(r["source"]) <= 400 for r in listed["cells"])


def test_replace_cell_replaces_the_agents_cell_in_place_and_runs_it(k: RecordingKernel) -> None:
    agent(k, turn("run_cell", "call_a", code="value = 1 / 0", explanation="divide"),
          turn("replace_cell", "call_b", cell="nb1_0", code="value = 1 / 2", explanation="fix the division"),
          flags=AGENT.replace("L3", "L2"))  # (asked, and approved: the plan's card is in the log)
    (ran,) = completed(k, "run_cell")
    (rep,) = completed(k, "replace_cell")
    assert ran["error"].startswith("ZeroDivisionError") and "error" not in rep
    assert rep["replaced"] is True and rep["cell_id"] == ran["cell_id"]
    assert rep["old_source"] == ran["source"] and "fix the division" in rep["source"]
    assert rep["execution_count"] > ran["execution_count"] and rep["after_cell_id"] == ran["after_cell_id"]
    assert "-value = 1 / 0" in rep["diff"] and "+value = 1 / 2" in rep["diff"]
    prov = rep["metadata"]["nbagent"]
    assert prov["version"] == 2 and prov["call_id"] == "nb2_0" and prov["ran"] is True
    from nbagent.tools.cell_text import source_digest

    assert prov["replaces_sha256"] == source_digest(ran["source"]) == ran["metadata"]["nbagent"]["source_sha256"]
    assert prov["source_sha256"] == source_digest(rep["source"])
    assert k.run("print(value)", cell_id="p2").stdout == "0.5\n"
    # the front end was told to replace that cell, before it ran, with the parent to route its outputs by
    replace = [c for c in k.comms() if c.get("action") == "replace"]
    assert len(replace) == 1 and replace[0]["cell_id"] == ran["cell_id"] and replace[0]["msg_id"] == rep["msg_id"]
    assert replace[0]["execution_count"] == rep["execution_count"] and replace[0]["ran"] is True
    # the card showed the diff
    (plan_step,) = [s for p in events(k, "plan_proposed") for s in p.steps if s.tool == "replace_cell"]
    assert plan_step.preview and "+value = 1 / 2" in plan_step.preview and plan_step.risk == "WRITE_HIGH_RISK"
    assert plan_step.effect.cell == "the cell this run's call nb1_0 wrote"  # (the same in a replay of the run)
    # list_cells tells the cell as it is now from its earlier version
    agent(k, turn("list_cells"), cell_id="c3", flags=AGENT.replace(" --new", ""))
    rows = completed(k, "list_cells")[-1]["cells"]
    before = next(r for r in rows if r["execution_count"] == ran["execution_count"])
    now = next(r for r in rows if r["execution_count"] == rep["execution_count"])
    assert before["written_by"].endswith("; replaced since") and before["cell_id"] == ran["cell_id"]
    assert now["written_by"] == f"agent (run {prov['run_id']}, call nb2_0)" and now["version"] == 2
    # the cell id spelling works too, and the cell's version goes on
    agent(k, turn("replace_cell", cell=ran["cell_id"], code="value = 3"), cell_id="c2",
          flags=AGENT.replace(" --new", ""))
    assert completed(k, "replace_cell")[-1]["metadata"]["nbagent"]["version"] == 3


def test_replace_cell_refuses_a_persons_cell_and_an_unknown_id(k: RecordingKernel) -> None:
    k.run("secret_work = 42", cell_id="person-cell")
    agent(k, turn("replace_cell", cell="person-cell", code="secret_work = 0"),
          turn("replace_cell", cell="call_that_never_ran", code="x = 0"))
    errors = failed(k, "replace_cell")
    assert len(errors) == 2 and all("not a cell you wrote" in e for e in errors), errors
    assert k.run("print(secret_work)", cell_id="p2").stdout == "42\n"
    assert not [c for c in k.comms() if c.get("action") == "replace"]


def test_a_cell_the_person_edited_and_ran_is_theirs(k: RecordingKernel) -> None:
    agent(k, turn("run_cell", "call_a", code="a = 1"))
    (ran,) = completed(k, "run_cell")
    k.run("a = 'edited by the person'", cell_id=ran["cell_id"])  # the front end runs the edited cell, same id
    agent(k, turn("replace_cell", cell="nb1_0", code="a = 2"), turn("list_cells"), cell_id="c2",
          flags=AGENT.replace(" --new", ""))
    assert "edited and run by the person" in failed(k, "replace_cell")[0]
    rows = completed(k, "list_cells")[0]["cells"]
    theirs = [r for r in rows if r.get("cell_id") == ran["cell_id"]]
    assert [r["written_by"].rsplit("; ", 1)[-1] for r in theirs] == ["the person edited and ran it since", "person"]
    assert k.run("print(a)", cell_id="p2").stdout == "edited by the person\n"


def test_a_denied_run_cell_leaves_no_cell_to_replace(k: RecordingKernel) -> None:
    flags = "%%agent --script s.json --approve none --new\n"
    script(k.folder / "s.json", turn("run_cell", "call_a", code="a = 1"),
           turn("replace_cell", "call_b", cell="nb1_0", code="a = 2"), {"content": "done"})
    k.run(flags + "go", cell_id="c1")
    assert not completed(k, "run_cell") and not completed(k, "replace_cell")
    assert k.run("print('a' in dir())", cell_id="p2").stdout == "False\n"
