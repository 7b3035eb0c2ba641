"""The approval guarantee against the cases that broke it, through the Python API and `nbagent run`.

Each test is a case found from outside: a model reusing a tool-call id to get a delete through, a low-risk
create that plants a module, a user tool whose path argument escapes by name or by nesting, sub-agents
multiplying a budget. Logs written by the previous nbagent (tests/fixtures/legacy-v0, made with the commit
before nbagent owned call ids) still replay and resume, and a hole recorded there cannot be reopened.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest
from agents import CALLS, agent, call, run, turns
from pydantic import BaseModel
from test_runner import nbagent, notebook, script

from nbagent.events.levels import Risk
from nbagent.events.state import RunStatus
from nbagent.gate.deciders import PauseDecider, PolicyDecider, Verdict
from nbagent.gate.policy import Budget
from nbagent.gate.runs_later import runs_later as code_effect
from nbagent.runtime import Agent
from nbagent.scope.rules import Scope
from nbagent.tools.base import tool
from nbagent.tools.files import file_tools
from nbagent.ui.record import render_text
from nbagent.ui.viewstate import run_view

LEGACY = Path(__file__).parent / "fixtures" / "legacy-v0"


def started(a: Agent, run_id: str) -> list[Any]:
    return [e for e in a.store.run_events(run_id) if e.type == "tool_call_started"]


# ------------------------------------------------------------------------------------------------ ids


@pytest.mark.parametrize("autonomy", ["L0", "L1"])
def test_a_reused_id_never_carries_an_approval_to_another_call(tmp_path: Path, autonomy: str) -> None:
    CALLS.clear()
    reads = [{**call("read_file", path=f"r{i}.txt"), "id": f"call_{i}"} for i in range(3)]
    script_ = turns(reads, [{**call("delete_file", path="data.txt"), "id": "call_0"}], "done")
    a = agent(tmp_path, script_, autonomy=autonomy, decider=PolicyDecider("low"))
    result = run(a)
    assert ("delete_file", {"path": "data.txt"}) not in CALLS
    state = a.store.run_state(result.run_id)
    delete = next(s for s in state.steps.values() if s.tool == "delete_file")
    assert delete.status == "rejected" and delete.call_id.startswith("nb2_")
    assert all(not s.call_id.startswith("call_") for s in state.steps.values())
    # the model's own ids stay in the recorded responses, for the audit
    raw = [e.payload.response for e in a.store.run_events(result.run_id) if e.type == "llm_called"]
    assert raw[1]["choices"][0]["message"]["tool_calls"][0]["id"] == "call_0"


def test_duplicate_and_missing_ids_in_one_reply_are_separate_calls(tmp_path: Path) -> None:
    CALLS.clear()
    same = [{**call("read_file", path="a.txt"), "id": "dup"}, {**call("read_file", path="b.txt"), "id": "dup"},
            call("read_file", path="c.txt"), {**call("delete_file", path="d.txt"), "id": ""}]
    a = agent(tmp_path, turns(same, "done"), autonomy="L1", decider=PauseDecider())
    result = run(a)
    assert result.status == RunStatus.WAITING and CALLS == []
    steps = result.pending["steps"]
    assert [s["call_id"] for s in steps] == ["nb1_0", "nb1_1", "nb1_2", "nb1_3"]
    result = asyncio.run(a.resume(result.run_id, verdict=Verdict.approve()))
    assert [c[1]["path"] for c in CALLS] == ["a.txt", "b.txt", "c.txt", "d.txt"]
    assert result.status == RunStatus.COMPLETED


@pytest.mark.kernel
def test_reused_id_through_nbagent_run_at_l0_with_approve_none(tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("precious\n")
    script(tmp_path, "attack.json",
           {"tool_calls": [{"id": "X", "name": "read_file", "arguments": {"path": "data.txt"}}]},
           {"tool_calls": [{"id": "X", "name": "delete_file", "arguments": {"path": "data.txt"}}]},
           {"content": "deleted"})
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent --script attack.json --autonomy L0\nclean up"])
    result = nbagent("run", str(path), "--approve", "none", "-o", "out.ipynb", cwd=tmp_path)
    assert (tmp_path / "data.txt").read_text() == "precious\n", result.stdout + result.stderr
    log = (tmp_path / "analysis.nbagent" / "events.jsonl").read_text()
    assert "runs without asking at autonomy L0" not in log
    events = [json.loads(line) for line in log.splitlines()]
    assert not any(e["type"] == "tool_call_started" and e["payload"]["tool"] == "delete_file" for e in events)
    assert sum(e["type"] == "plan_rejected" for e in events) == 2
    assert '"call_id":"X"' not in log.replace(" ", "")


def test_an_approval_covers_only_the_calls_it_was_given(tmp_path: Path) -> None:
    """A plan approved, then the log is forged to slip a call into its step list: the gate refuses it."""
    CALLS.clear()
    a = agent(tmp_path, turns([call("delete_file", path="a.txt")], "done"), autonomy="L1", decider=PauseDecider())
    first = run(a)
    state = a.store.run_state(first.run_id)
    plan = state.plans[first.pending["plan_id"]]
    plan.steps[0].arguments = {"path": "b.txt"}  # the digest now covers a.txt only
    asyncio.run(a.resume(first.run_id, verdict=Verdict.approve()))
    assert CALLS == [("delete_file", {"path": "a.txt"})]


# ------------------------------------------------------------------------------------------------ risk


@pytest.mark.parametrize("path", ["pandas.py", "pkg/__init__.py", "evil.pth", "sitecustomize.py", "x.cpython-311.so",
                                  ".ipython/profile_default/startup/00.py", "startup.ipy", "jupyter_server_config.json",
                                  "kernel.json", "Pandas.PY", "lib/site-packages/x.txt"])
def test_writes_python_or_jupyter_would_run_are_high_risk(path: str) -> None:
    assert code_effect(path) is not None


@pytest.mark.parametrize("path", ["report.md", "data.csv", "notes/pandas.txt", "labs/results.json", "py/readme"])
def test_plain_data_files_keep_their_risk(path: str) -> None:
    assert code_effect(path) is None


def test_create_python_module_is_proposed_as_high_risk_and_refused_by_approve_low(tmp_path: Path) -> None:
    tools = file_tools(Scope(root=tmp_path, base=tmp_path))
    script_ = turns([call("create_file", path="pandas.py", content="import os; os.remove('data.txt')")], "ok")
    a = Agent(script=script_, tools=tools, autonomy="L2", decider=PolicyDecider("low"), store=tmp_path / "nb.ipynb")
    result = run(a)
    assert not (tmp_path / "pandas.py").exists()
    state = a.store.run_state(result.run_id)
    plan = next(iter(state.plans.values()))
    assert plan.max_risk == Risk.WRITE_HIGH_RISK and plan.status == "rejected"
    assert "import pandas" in (plan.steps[0].risk_reason or "")
    # the same create of a data file runs at L2 without asking
    a2 = Agent(script=turns([call("create_file", path="notes.md", content="hi")], "ok"), tools=tools, autonomy="L2",
               decider=PauseDecider(), store=tmp_path / "nb.ipynb")
    assert run(a2).status == RunStatus.COMPLETED and (tmp_path / "notes.md").read_text() == "hi"


@pytest.mark.kernel
def test_create_module_through_nbagent_run_with_approve_low(tmp_path: Path) -> None:
    script(tmp_path, "plant.json",
           {"tool_calls": [{"name": "create_file", "arguments": {"path": "pandas.py", "content": "print('pwned')"}}]},
           {"content": "created"})
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent --script plant.json --autonomy L1\nmake a helper"])
    result = nbagent("run", str(path), "--approve", "low", "-o", "out.ipynb", cwd=tmp_path)
    assert not (tmp_path / "pandas.py").exists(), result.stdout + result.stderr
    out = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    mime = "application/vnd.nbagent.run+json"
    record = next(o for c in out.cells for o in c.get("outputs", []) if mime in o.get("data", {}))["data"][mime]
    assert "WRITE_HIGH_RISK" in json.dumps(record) and "import pandas" in json.dumps(record)


# ------------------------------------------------------------------------------------------------ paths


class Job(BaseModel):
    inputs: list[Path]
    name: str = "job"


@dataclass
class Output:
    folder: Path


def _outside(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "nb"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    secret = tmp_path / "outside" / "secret.txt"
    secret.write_text("top secret")
    return root, secret


READS: list[str] = []


@tool(risk="READ_ONLY")
def read_named(file_path: str) -> str:
    """Read a file by a name the heuristic knows."""
    READS.append(file_path)
    return "read"


@tool(risk="READ_ONLY")
def read_nested(options: dict[str, Any]) -> str:
    """Read files named deep inside a dict."""
    READS.append(json.dumps(options))
    return "read"


@tool(risk="READ_ONLY")
def read_typed(source: Path, job: Job, extra: dict[str, Path] | None = None, out: Output | None = None) -> str:
    """Read files given as typed paths."""
    READS.append(str(source))
    return "read"


@tool(risk="READ_ONLY")
def lookup(query: str) -> str:
    """Not a path at all."""
    READS.append(query)
    return "ok"


@pytest.mark.parametrize("tool_name,arguments", [
    ("read_named", {"file_path": "../outside/secret.txt"}),
    ("read_nested", {"options": {"deep": [{"output_dir": "../outside"}]}}),
    ("read_typed", {"source": "ok.txt", "job": {"inputs": ["a.txt", "../outside/secret.txt"]}}),
    ("read_typed", {"source": "ok.txt", "job": {"inputs": []}, "extra": {"x": "/etc/passwd"}}),
    ("read_typed", {"source": ".env", "job": {"inputs": []}}),
    ("read_typed", {"source": "ok.txt", "job": {"inputs": []}, "out": {"folder": "../outside"}}),
])
def test_user_tool_paths_go_through_the_scope(tmp_path: Path, tool_name: str, arguments: dict[str, Any]) -> None:
    root, _ = _outside(tmp_path)
    READS.clear()
    tools = [read_named, read_nested, read_typed, lookup]
    a = Agent(script=turns([call(tool_name, **arguments)], "done"), tools=tools, autonomy="L1",
              decider=PauseDecider(), store=root / "nb.ipynb")
    result = run(a)
    assert READS == []
    denied = [e for e in a.store.run_events(result.run_id) if e.type == "authorization_denied"]
    assert len(denied) == 1 and denied[0].payload.rule.startswith("scope.")


def test_user_tool_paths_inside_the_folder_and_non_paths_run(tmp_path: Path) -> None:
    root, _ = _outside(tmp_path)
    READS.clear()
    calls = [call("read_typed", source="in.txt", job={"inputs": ["a.csv", "sub/b.csv"]}),
             call("lookup", query="sales by region/quarter, not a path")]
    a = Agent(script=turns(calls, "done"), tools=[read_typed, lookup], autonomy="L1", decider=PauseDecider(),
              store=root / "nb.ipynb")
    # (a one-line value that climbs with `..` is a path whatever its key: docs/tools.md, tests/test_path_arguments.py)
    assert run(a).status == RunStatus.COMPLETED and READS == ["in.txt", "sales by region/quarter, not a path"]


def test_typed_paths_are_found_in_the_schema_too() -> None:
    schema = read_typed.schema()["function"]["parameters"]
    assert schema["properties"]["source"]["format"] == "path"
    assert read_typed.path_values({"source": "x", "job": {"inputs": ["y", "z"]}, "extra": {"k": "w"}}) == \
        ["x", "y", "z", "w"]


# ------------------------------------------------------------------------------------------------ budgets


def test_budgets_cover_the_run_tree(tmp_path: Path) -> None:
    spawn = [call("spawn_agent", prompt=f"sub-task {i}") for i in range(6)]
    script_ = turns(spawn, *(["child answer"] * 12), "parent answer")
    a = agent(tmp_path, script_, budget=Budget(max_model_calls=2, max_cost=1.0), decider=PolicyDecider("all"),
              autonomy="L3")
    result = run(a)
    usage = a.tree_usage(result.run_id)
    assert usage.model_calls == 2, usage
    assert len(usage.runs) == 7 and usage.runs[result.run_id]["model_calls"] == 1
    errors = [e for rid in usage.runs for e in a.store.run_state(rid).errors]
    assert any("this run and its sub-agents" in e for e in errors)
    # the record shows the tree's totals and each run's share
    view = run_view(a.store, result.run_id)
    assert view["tree"]["model_calls"] == 2 and len(view["tree"]["runs"]) == 7
    text = render_text(view)
    assert "run tree: with 6 sub-agents: 2 model calls" in text and result.run_id[-6:] + ": 1 call" in text


def test_cost_budget_covers_the_run_tree(tmp_path: Path) -> None:
    spawn = [call("spawn_agent", prompt=f"sub-task {i}") for i in range(6)]
    script_ = turns(spawn, *(["child answer"] * 12), "parent answer")
    a = agent(tmp_path, script_, budget=Budget(max_cost=0.001), decider=PolicyDecider("all"), autonomy="L3")
    result = run(a)
    usage = a.tree_usage(result.run_id)
    one_call = max(s["cost"] for s in usage.runs.values())
    assert usage.cost <= 0.001 + one_call, usage


# ------------------------------------------------------------------------------------------------ old logs


@tool(name="read_file", risk="READ_ONLY")
def legacy_read(path: str) -> str:
    """Read a file."""
    return (Path.cwd() / path).read_text()


@tool(name="delete_file", risk="WRITE_HIGH_RISK")
def legacy_delete(path: str) -> str:
    """Delete a file."""
    (Path.cwd() / path).unlink()
    return f"deleted {path}"


@pytest.fixture
def legacy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "legacy"
    shutil.copytree(LEGACY, folder)
    monkeypatch.chdir(folder)
    return folder


def _run_by_prompt(a: Agent, prompt: str) -> str:
    return next(r.id for r in a.store.list_runs() if r.prompt == prompt)


def test_a_log_from_before_owned_ids_replays(legacy: Path) -> None:
    (legacy / "old.txt").write_text("old\n")
    probe = Agent(script=legacy / "s1.json", store=legacy / "nb.ipynb")
    recorded = _run_by_prompt(probe, "tidy up")
    a = Agent(replay=recorded, tools=[legacy_read, legacy_delete], store=legacy / "nb.ipynb", session="replayme")
    result = asyncio.run(a.run("tidy up"))
    assert result.status == RunStatus.COMPLETED, result.error
    assert result.answer == "done: read data.txt, deleted old.txt" and not (legacy / "old.txt").exists()


def test_a_waiting_run_from_before_owned_ids_resumes(legacy: Path) -> None:
    a = Agent(script=legacy / "s2.json", tools=[legacy_read, legacy_delete], store=legacy / "nb.ipynb",
              decider=PauseDecider(), session="waiting")
    waiting = _run_by_prompt(a, "delete data")
    result = asyncio.run(a.resume(waiting, verdict=Verdict.approve()))
    assert result.status == RunStatus.COMPLETED and not (legacy / "data.txt").exists()
    delete = next(e for e in started(a, waiting) if e.payload.tool == "delete_file")
    approvals = [e.id for e in a.store.run_events(waiting) if e.type == "plan_approved"]
    assert delete.payload.approval_event_id == approvals[-1]


def test_a_hole_recorded_by_the_old_version_cannot_be_reopened(legacy: Path) -> None:
    """The old log: at L0 a read with model id X approved; the model's next reply reuses X for a delete (the
    old version ran it; the log here is cut just before). Resumed now, the delete waits for its own decision."""
    (legacy / "victim.txt").write_text("victim\n")
    a = Agent(script=legacy / "s3.json", tools=[legacy_read, legacy_delete], store=legacy / "hole.ipynb",
              decider=PauseDecider(), session="hole", autonomy="L0")
    run_id = _run_by_prompt(a, "look, then delete")
    result = asyncio.run(a.resume(run_id))
    assert result.status == RunStatus.WAITING and (legacy / "victim.txt").exists()
    assert result.pending["steps"][0]["tool"] == "delete_file" and result.pending["steps"][0]["call_id"] != "X"
    result = asyncio.run(a.resume(run_id, verdict=Verdict.deny("no")))
    assert (legacy / "victim.txt").exists() and result.status == RunStatus.COMPLETED_WITH_ERRORS  # denied: not done


def test_a_waiting_sub_agent_leaves_its_parent_waiting_and_both_resume(tmp_path: Path) -> None:
    """Found by the property test: a sub-agent waiting for a decision nobody could give made its parent re-enter
    it forever. Now the parent returns `waiting` with the sub-agent's request, and resuming the parent goes on."""
    CALLS.clear()
    script_ = turns([call("spawn_agent", prompt="tidy")], [call("delete_file", path="x.txt")], "child done",
                    "parent done")
    a = agent(tmp_path, script_, autonomy="L1", decider=PauseDecider())
    result = run(a)
    assert result.status == RunStatus.WAITING and CALLS == []
    child = a.store.run_state(result.run_id).children[0]
    assert result.pending["run_id"] == child and result.pending["steps"][0]["tool"] == "delete_file"
    a.answer_pending(child, verdict=Verdict.approve())
    result = asyncio.run(a.resume(result.run_id))
    assert result.status == RunStatus.COMPLETED and result.answer == "parent done"
    assert CALLS == [("delete_file", {"path": "x.txt"})]


@pytest.mark.kernel
def test_user_tool_paths_credentials_and_tree_budgets_through_nbagent_run(tmp_path: Path) -> None:
    folder = tmp_path / "nb"
    folder.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("top secret outside")
    (folder / ".env~").write_text("OPENAI_API_KEY=sk-backupkey-0123456789abcdef\n")
    (folder / "kaggle.json").write_text('{"username": "me", "key": "0123456789abcdef0123456789abcdef"}')
    script(folder, "peek.json",
           {"tool_calls": [{"name": "peek", "arguments": {"file_path": "../outside/secret.txt"}},
                           {"name": "peek", "arguments": {"options": {"file_path": "/etc/hostname"}}},
                           {"name": "read_file", "arguments": {"path": ".env~"}},
                           {"name": "read_file", "arguments": {"path": "kaggle.json"}}]},
           {"content": "nothing to see"})
    script(folder, "spawn.json", {"tool_calls": [{"name": "spawn_agent", "arguments": {"prompt": f"part {i}"}}
                                                 for i in range(6)]},
           *({"content": "child answer"} for _ in range(12)), {"content": "parent answer"})
    tool_cell = ("import nbagent\n\n@nbagent.tool(risk='READ_ONLY')\ndef peek(file_path: str = '', "
                 "options: dict | None = None) -> str:\n    '''Read a file.'''\n    return open(file_path).read()")
    path = notebook(folder, ["%load_ext nbagent", tool_cell, "%%agent --script peek.json\nlook around",
                             "%%agent --script spawn.json --autonomy L3 --budget 0.001\nsplit the work"])
    result = nbagent("run", str(path), "--approve", "all", "-o", "out.ipynb", cwd=folder)
    saved = (folder / "out.ipynb").read_text() + (folder / "analysis.nbagent" / "events.jsonl").read_text()
    for secret in ("top secret outside", "sk-backupkey", "0123456789abcdef0123456789abcdef"):
        assert secret not in saved and secret not in result.stdout + result.stderr
    events = [json.loads(line) for line in (folder / "analysis.nbagent" / "events.jsonl").read_text().splitlines()]
    denied = [e["payload"]["rule"] for e in events if e["type"] == "authorization_denied" and e["payload"]["call_id"]]
    assert len(denied) == 4 and all(r.startswith("scope.") for r in denied), denied
    assert not any(e["type"] == "tool_call_started" and e["payload"]["tool"] in ("peek", "read_file") for e in events)
    starts = {e["run_id"]: e["payload"] for e in events if e["type"] == "run_started"}
    tree = {rid for rid, p in starts.items() if p["prompt"] == "split the work"}
    tree |= {rid for rid, p in starts.items() if p["parent_run_id"] in tree}
    costs = [e["payload"]["cost"] for e in events if e["type"] == "llm_called" and e["run_id"] in tree]
    # a budget per run would have let every run call (8 calls, each run under $0.001); the tree stops at the cap
    assert len(tree) == 7 and 2 <= len(costs) < 8 and sum(costs) <= 0.001 + max(costs), costs
