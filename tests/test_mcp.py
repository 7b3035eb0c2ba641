"""MCP servers' tools as ordinary tools (nbagent/mcp/, docs/mcp.md).

Real servers not written here: mcp-server-time and mcp-server-git from PyPI (the `test` extras). A broken server
of our own (tests/fixtures/mcp_broken_server.py) crashes, hangs and sends garbage. Everything runs offline with
the scripted model; each wait is bounded by a server's `timeout`, and no test asserts a duration.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nbagent import mcp
from nbagent.events.levels import Risk
from nbagent.events.state import RunStatus
from nbagent.gate.deciders import PauseDecider, PolicyDecider
from nbagent.mcp.servers import background_loop, running_servers
from nbagent.runtime import Agent
from nbagent.tools.base import ToolArgumentError, ToolError

BROKEN = str(Path(__file__).parent / "fixtures" / "mcp_broken_server.py")
TIME = {"command": "python", "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}


def broken(mode: str, timeout: float = 2, *extra: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": [BROKEN, mode, *extra], "timeout": timeout}


def needs(module: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed: pip install -e '.[test]' installs the MCP servers the tests use")


def lines(*sources: Any, folder: Path | None = None) -> tuple[list[Any], list[str]]:
    problems: list[str] = []
    found = mcp.tools(*sources, folder=folder, on_problem=problems.append)
    return found, problems


def run(agent: Agent, prompt: str = "go") -> Any:
    # a guard, not a timing assertion: a hang fails the test instead of stalling the suite
    return asyncio.run(asyncio.wait_for(agent.run(prompt), 120))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit, inside the notebook's folder (where path arguments may point)."""
    folder = tmp_path / "work"
    folder.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(folder)], check=True, env=env)
    (folder / "notes.txt").write_text("first\n")
    subprocess.run(["git", "-C", str(folder), "add", "notes.txt"], check=True, env=env)
    subprocess.run(["git", "-C", str(folder), "commit", "-q", "-m", "first"], check=True, env=env)
    return folder


# ---------------------------------------------------------------------------------------------- configuration


def test_a_config_that_is_not_json_is_one_line_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "mcp.json").write_text('{"mcpServers": {\n  "time": {"command": "x",}\n}}')
    found, problems = lines("mcp.json", folder=tmp_path)
    assert found == [] and len(problems) == 1
    assert problems[0].startswith(f"MCP config {tmp_path / 'mcp.json'}: not valid JSON: ")
    assert "line 2, column" in problems[0]


def test_bad_entries_are_one_line_each_and_the_good_ones_stay(tmp_path: Path) -> None:
    loaded = mcp.read({"mcpServers": {
        "both": {"command": "x", "url": "http://127.0.0.1:1/mcp"},
        "neither": {"args": ["a"]},
        "sse": {"url": "http://127.0.0.1:1/sse", "type": "sse"},
        "risky": {"command": "x", "risk": {"t": "SOMEWHAT"}},
        "good": {"command": "x", "risk": {"t": "read_only"}, "alwaysAllow": ["ignored"]},
    }}, label="test.json")
    assert list(loaded.servers) == ["good"] and loaded.servers["good"].risk == {"t": Risk.READ_ONLY}
    assert len(loaded.problems) == 4 and all(p.startswith("MCP server '") for p in loaded.problems)
    assert "either \"command\"" in loaded.problems[0] and "SSE" in loaded.problems[2]
    assert "risk.t" in loaded.problems[3]
    assert mcp.read({"servers": []}, label="x.json").problems == [
        'MCP config x.json: expected a JSON object with an "mcpServers" object']
    assert mcp.read(tmp_path / "missing.json").problems == [f"MCP config {tmp_path / 'missing.json'}: no such file"]
    with pytest.raises(mcp.MCPConfigError, match="no such file"):
        mcp.load_config(tmp_path / "missing.json")


def test_annotations_give_the_risk() -> None:
    assert mcp.annotation_risk({"readOnlyHint": True}) == (Risk.READ_ONLY, "readOnlyHint: true")
    # what a tool that writes touches cannot be seen from its annotations: destructiveHint: false lowers nothing
    # (tests/test_mcp_server_rules.py, docs/mcp.md "Risk")
    assert mcp.annotation_risk({"readOnlyHint": False, "destructiveHint": False})[0] == Risk.WRITE_HIGH_RISK
    assert mcp.annotation_risk({"readOnlyHint": True, "destructiveHint": True})[0] == Risk.WRITE_HIGH_RISK
    assert mcp.annotation_risk({"destructiveHint": True})[0] == Risk.WRITE_HIGH_RISK
    assert mcp.annotation_risk({})[0] == Risk.WRITE_HIGH_RISK  # MCP's default: destructive
    assert mcp.annotation_risk(None)[0] == Risk.WRITE_HIGH_RISK


# ---------------------------------------------------------------------------------------------- real servers


def test_a_real_server_tools_have_its_schema_and_risk() -> None:
    needs("mcp_server_time")
    found, problems = lines({"mcpServers": {"time": TIME}})
    assert problems == []
    by = {t.name: t for t in found}
    assert set(by) == {"mcp__time__get_current_time", "mcp__time__convert_time"}
    t = by["mcp__time__convert_time"]
    assert t.risk == Risk.READ_ONLY and t.risk_reason == "readOnlyHint: true" and t.server == "time"
    params = t.schema()["function"]["parameters"]
    assert set(params["required"]) == {"source_timezone", "time", "target_timezone"}
    result = asyncio.run(t.call({"source_timezone": "UTC", "time": "14:30", "target_timezone": "Asia/Tokyo"}))
    assert result["target"]["datetime"].endswith("T23:30:00+09:00")
    with pytest.raises(ToolArgumentError, match="'time' is a required property"):
        t.validate({"source_timezone": "UTC", "target_timezone": "Asia/Tokyo"})
    with pytest.raises(ToolError, match="Invalid timezone"):  # the server's own error result
        asyncio.run(by["mcp__time__get_current_time"].call({"timezone": "Nowhere/Nothing"}))


def test_servers_start_once_per_process() -> None:
    needs("mcp_server_time")
    first, _ = lines({"mcpServers": {"time": TIME}})
    server = next(s for s in running_servers() if s.name == "time" and s.config.args == TIME["args"])
    task = server._task
    again, _ = lines({"mcpServers": {"time": TIME}})
    assert server.state == "running" and server._task is task  # the same session: not started again
    assert [t.name for t in first] == [t.name for t in again]
    assert len([s for s in running_servers() if s.name == "time" and s.config.args == TIME["args"]]) == 1


def test_a_server_whose_process_died_between_runs_is_started_again() -> None:
    import os
    import signal

    config = {"mcpServers": {"ok": broken("ok", 5, "", "pid-test")}}
    found, _ = lines(config)
    pid = int(asyncio.run(next(t for t in found if t.remote_name == "pid").call({})))
    os.kill(pid, signal.SIGKILL)
    again, problems = lines(config)  # the next run's listing finds it gone and starts it again
    assert problems == []
    assert int(asyncio.run(next(t for t in again if t.remote_name == "pid").call({}))) != pid


def test_an_edited_entry_stops_the_old_server() -> None:
    first, _ = lines({"mcpServers": {"edited": broken("ok", 5)}}, folder=Path(BROKEN).parent)
    old = next(s for s in running_servers() if s.name == "edited")
    pid = int(asyncio.run(next(t for t in first if t.remote_name == "pid").call({})))
    again, _ = lines({"mcpServers": {"edited": broken("ok", 6)}}, folder=Path(BROKEN).parent)
    assert [s for s in running_servers() if s.name == "edited"] != [old]
    assert int(asyncio.run(next(t for t in again if t.remote_name == "pid").call({}))) != pid
    background_loop().submit(asyncio.sleep(0)).result(10)  # the old session's stop was queued before this
    old_task = old._task
    assert old_task is not None
    background_loop().submit(asyncio.wait_for(asyncio.shield(old_task), 20)).result(30)
    assert old_task.done()
    import os

    with pytest.raises(ProcessLookupError):  # its process is gone
        os.kill(pid, 0)


def test_risk_from_annotations_read_only_runs_at_l1_a_destructive_call_is_proposed(repo: Path) -> None:
    needs("mcp_server_git")
    config = {"mcpServers": {"git": {"command": "python", "args": ["-m", "mcp_server_git"]}}}
    found, problems = lines(config, folder=repo)
    assert problems == []
    risks = {t.remote_name: t.risk for t in found}
    # git_add is annotated destructiveHint: false, but what it changes cannot be seen: high risk (server rules)
    assert risks["git_status"] == Risk.READ_ONLY and risks["git_add"] == Risk.WRITE_HIGH_RISK
    assert risks["git_reset"] == Risk.WRITE_HIGH_RISK
    script = {"turns": [
        {"tool_calls": [{"name": "mcp__git__git_status", "arguments": {"repo_path": str(repo)}}]},
        {"tool_calls": [{"name": "mcp__git__git_reset", "arguments": {"repo_path": str(repo)}}]},
        {"content": "Reset."},
    ]}
    agent = Agent(script=script, tools=found, autonomy="L1", decider=PauseDecider(), store=repo / "nb.ipynb")
    result = run(agent)
    assert result.status == RunStatus.WAITING, result.error  # the destructive call waits for a person
    events = agent.store.run_events(result.run_id)
    done = [e.payload for e in events if e.type == "tool_call_completed"]
    assert [p.tool for p in done] == ["mcp__git__git_status"] and "On branch main" in done[0].result
    plan = next(e.payload for e in events if e.type == "plan_proposed")
    assert [s.tool for s in plan.steps] == ["mcp__git__git_reset"] and plan.max_risk == "WRITE_HIGH_RISK"
    assert not plan.auto_executing and any(e.type == "waiting_for_approval" for e in events)


@pytest.mark.kernel
def test_risk_override_in_the_config(repo: Path) -> None:
    needs("mcp_server_git")
    config = {"mcpServers": {"git": {"command": "python", "args": ["-m", "mcp_server_git"],
                                     "risk": {"git_status": "WRITE_HIGH_RISK", "git_log": "read_only",
                                              "git_nothing": "READ_ONLY"}}}}
    found, problems = lines(config, folder=repo)
    by = {t.remote_name: t for t in found}
    assert by["git_status"].risk == Risk.WRITE_HIGH_RISK and "risk" in by["git_status"].risk_reason
    assert by["git_log"].risk == Risk.READ_ONLY
    assert problems == ["MCP server 'git' (the MCP config): \"risk\" names 'git_nothing', which is not one of its "
                        "tools"]
    script = {"turns": [{"tool_calls": [{"name": "mcp__git__git_status", "arguments": {"repo_path": str(repo)}}]},
                        {"content": "ok"}]}
    agent = Agent(script=script, tools=found, autonomy="L2", decider=PauseDecider(), store=repo / "nb.ipynb")
    assert run(agent).status == RunStatus.WAITING  # now proposed even at L2


def test_mcp_calls_go_through_authorization_and_the_file_scope(repo: Path, tmp_path: Path) -> None:
    """A path argument outside the notebook's folder is refused before the server sees it, as for user tools."""
    needs("mcp_server_git")
    found, _ = lines({"mcpServers": {"git": {"command": "python", "args": ["-m", "mcp_server_git"]}}}, folder=repo)
    script = {"turns": [{"tool_calls": [{"name": "mcp__git__git_status", "arguments": {"repo_path": "/etc"}}]},
                        {"content": "done"}]}
    agent = Agent(script=script, tools=found, autonomy="L3", decider=PolicyDecider("all"), store=repo / "nb.ipynb")
    result = run(agent)
    events = agent.store.run_events(result.run_id)
    assert [e.payload.tool for e in events if e.type == "authorization_denied"] == ["mcp__git__git_status"]
    assert not any(e.type == "tool_call_started" for e in events)


# ---------------------------------------------------------------------------------------------- broken servers


def test_a_broken_server_is_a_tool_error_and_the_run_continues(tmp_path: Path) -> None:
    config = {"mcpServers": {m: broken(m) for m in ("crash", "hang", "garbage")} | {"ok": broken("ok")}}
    found, problems = lines(config)
    assert problems == []
    calls = [{"tool_calls": [{"name": f"mcp__{m}__boom", "arguments": {}}]} for m in ("crash", "hang", "garbage")]
    calls += [{"tool_calls": [{"name": "mcp__hang__fine", "arguments": {"text": "again"}}]},
              {"tool_calls": [{"name": "mcp__ok__fine", "arguments": {"text": "hello"}}]}]
    agent = Agent(script={"turns": [*calls, {"content": "Three servers failed; ok answered."}]}, tools=found,
                  autonomy="L3", decider=PolicyDecider("all"), store=tmp_path / "nb.ipynb")
    result = run(agent)
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS and result.answer == "Three servers failed; ok answered."
    events = agent.store.run_events(result.run_id)
    failed = {e.payload.tool: e.payload.error for e in events if e.type == "tool_call_failed"}
    assert "closed" in failed["mcp__crash__boom"] and "crashing on purpose" in failed["mcp__crash__boom"]
    assert "no answer within 2 s" in failed["mcp__hang__boom"]
    assert "no answer within 2 s" in failed["mcp__garbage__boom"] and "not JSON-RPC" in failed["mcp__garbage__boom"]
    assert "garbage instead of an answer" in failed["mcp__garbage__boom"]
    assert "is not running" in failed["mcp__hang__fine"]  # after a timeout the server is stopped, not waited on
    done = [e.payload for e in events if e.type == "tool_call_completed"]
    assert [(p.tool, p.result) for p in done] == [("mcp__ok__fine", "fine: hello")]
    messages = agent.store.run_state(result.run_id).messages
    assert any(m["role"] == "tool" and m["content"].startswith("Error: MCP server 'crash'") for m in messages)
    # the next listing (the next run) starts the failed servers again
    again, _ = lines(config)
    assert {t.server for t in again} == {"crash", "hang", "garbage", "ok"}
    assert asyncio.run(next(t for t in again if t.name == "mcp__hang__fine").call({"text": "x"})) == "fine: x"


def test_a_server_that_does_not_start_is_one_line_with_its_command_and_stderr(tmp_path: Path) -> None:
    config = {"mcpServers": {"sc": broken("start-crash"), "sh": broken("start-hang"),
                             "sg": broken("start-garbage"), "gone": {"command": "no-such-mcp-server-here"},
                             "ok": broken("ok")}}
    found, problems = lines(config)
    assert {t.server for t in found} == {"ok"}
    assert len(problems) == 4 and all("did not start" in p and "\n" not in p for p in problems)
    by = {p.split("'")[1]: p for p in problems}
    assert "start-crash" in by["sc"] and "cannot start (configuration missing)" in by["sc"]
    assert "did not answer within 2 s" in by["sh"] and "start-hang" in by["sh"]
    assert "not JSON-RPC" in by["sg"]
    assert "no-such-mcp-server-here" in by["gone"] and "No such file" in by["gone"]


def test_name_collisions_and_bad_server_names_are_one_line_each() -> None:
    config = {"mcpServers": {"t": broken("ok", 5, "_"), "t_": broken("ok"), "my server": broken("ok"),
                             "a__b": broken("ok")}}
    found, problems = lines(config)
    names = [t.name for t in found]
    assert len(names) == len(set(names)) and "mcp__t___fine" in names
    collisions = [p for p in problems if "collision" in p]
    assert len(collisions) == len([t for t in found if t.server == "t"])  # each of t_'s tools: one line
    assert all("server 't' has a tool of that name" in p for p in collisions)
    bad = [p for p in problems if "cannot be part of a tool name" in p]
    assert [p.split("'")[1] for p in bad] == ["my server", "a__b"]
    # a name an existing tool has (the notebook's own tool) is kept by that tool
    taken = mcp.toolset(mcp.read({"mcpServers": {"ok": broken("ok")}}), taken={"mcp__ok__fine"})
    assert "mcp__ok__fine" not in [t.name for t in taken.tools]
    assert taken.problems == ["MCP tool name collision: 'mcp__ok__fine' of server 'ok' is left out; a tool of "
                              "nbagent or the notebook has that name"]


def test_results_images_are_summarised_and_arguments_checked() -> None:
    found, _ = lines({"mcpServers": {"ok": broken("ok")}})
    by = {t.remote_name: t for t in found}
    result = asyncio.run(by["picture"].call({}))
    assert result.startswith("a red dot\n[image image/png, about ") and "iVBOR" not in result
    with pytest.raises(ToolArgumentError, match="argument 'text': 5 is not of type 'string'"):
        by["fine"].validate({"text": 5})
    assert by["fine"].schema()["function"]["parameters"]["required"] == ["text"]


# ---------------------------------------------------------------------------------------------- replay


def test_a_replayed_run_calls_the_mcp_tools_again(repo: Path) -> None:
    needs("mcp_server_git")
    config = {"mcpServers": {"git": {"command": "python", "args": ["-m", "mcp_server_git"]}}}
    found, _ = lines(config, folder=repo)
    script = {"turns": [{"tool_calls": [{"name": "mcp__git__git_log", "arguments": {"repo_path": str(repo)}}]},
                        {"content": "One commit: first."}]}
    agent = Agent(script=script, tools=found, decider=PauseDecider(), store=repo / "nb.ipynb")
    recorded = run(agent)
    assert recorded.status == RunStatus.COMPLETED
    again, _ = lines(config, folder=repo)  # the replaying agent's tools are made the same way
    replay = Agent(replay=recorded.run_id, tools=again, store=repo / "nb.ipynb")
    result = run(replay)
    assert result.status == RunStatus.COMPLETED and result.answer == "One commit: first."
    events = replay.store.run_events(result.run_id)
    done = [e.payload for e in events if e.type == "tool_call_completed"]
    assert [p.tool for p in done] == ["mcp__git__git_log"] and "first" in done[0].result


# ---------------------------------------------------------------------------------------------- streamable HTTP


@pytest.fixture
def http_server() -> Any:
    """tests/fixtures/mcp_http_server.py on a free port of 127.0.0.1, requiring `Authorization: Bearer secret-1`."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(Path(BROKEN).with_name("mcp_http_server.py")), str(port),
                             "secret-1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):  # bounded: up to about 30 s for the server to listen
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail("the HTTP MCP server of the test did not start")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_streamable_http_server_with_headers(http_server: str) -> None:
    found, problems = lines({"mcpServers": {
        "remote": {"url": http_server, "headers": {"Authorization": "Bearer secret-1"}, "timeout": 10},
        "refused": {"url": http_server, "headers": {"Authorization": "Bearer wrong"}, "timeout": 10}}})
    by = {t.remote_name: t for t in found}
    assert set(by) == {"add", "forget"} and {t.server for t in found} == {"remote"}
    assert by["add"].risk == Risk.READ_ONLY and by["forget"].risk == Risk.WRITE_HIGH_RISK
    assert asyncio.run(by["add"].call({"a": 2, "b": 3})) == {"result": 5}
    assert len(problems) == 1 and problems[0].startswith("MCP server 'refused' (the MCP config) did not start: ")
    assert f"URL {http_server}" in problems[0]


def test_the_mcp_module_imports_no_ipython_widgets_or_litellm() -> None:
    code = ("import sys, nbagent.mcp; bad = [m for m in ('IPython', 'ipywidgets', 'anywidget', 'litellm', 'ipykernel') "
            "if m in sys.modules]; print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
