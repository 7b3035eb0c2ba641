"""Replay of a recorded run with the model unreachable; malformed model output never crashes the loop."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agents import CALLS, TOOLS, agent, call, run, turns, types

from nbagent.events.state import RunStatus
from nbagent.gate.deciders import PolicyDecider
from nbagent.runtime import Agent
from nbagent.tools.base import tool


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    CALLS.clear()


def recorded(tmp_path: Path) -> tuple[Agent, str]:
    script = turns(
        {"content": "Reading first.", "tool_calls": [call("read_file", path="a.csv")]},
        [call("ask_human", question="Which file name?")],
        [call("create_file", path="r.md", content="report")],
        "Wrote r.md from a.csv.",
    )
    a = agent(tmp_path, script, decider=PolicyDecider("all", answer="r.md"))
    result = run(a, "write a report from a.csv")
    assert result.status == RunStatus.COMPLETED
    return a, result.run_id


def test_replay_reproduces_the_run_offline(tmp_path: Path) -> None:
    a, original = recorded(tmp_path)
    CALLS.clear()
    # no script, no network: only the recording can answer; decisions come from the recording too
    replayer = Agent(replay=original, tools=TOOLS, store=a.store)
    result = asyncio.run(replayer.run("write a report from a.csv"))  # starts where the recording started
    assert result.status == RunStatus.COMPLETED and result.answer == "Wrote r.md from a.csv."
    assert types(a, result.run_id) == types(a, original)
    results = lambda r: [(e.payload.tool, e.payload.result) for e in a.store.run_events(r)  # noqa: E731
                         if e.type == "tool_call_completed"]
    assert results(result.run_id) == results(original)
    decisions = [d.by for d in a.store.run_state(result.run_id).decisions]
    assert decisions == [f"recorded:{original}"] * 2
    assert CALLS == [("read_file", {"path": "a.csv"}), ("create_file", {"path": "r.md", "content": "report"})]


def test_diverging_replay_names_the_first_differing_message(tmp_path: Path) -> None:
    a, original = recorded(tmp_path)

    @tool(risk="READ_ONLY", name="read_file")
    def changed_read_file(path: str) -> str:
        """Read a text file.

        Args:
            path: the file, relative to the notebook's folder
        """
        return "DIFFERENT CONTENT"  # same schema, different behaviour

    tools = [changed_read_file, *[t for t in TOOLS if t.name != "read_file"]]
    replayer = Agent(replay=original, tools=tools, store=a.store)
    result = asyncio.run(replayer.run("write a report from a.csv", previous_run_id=None))
    assert result.status == RunStatus.FAILED
    assert "replay diverged at model call 2" in (result.error or "")
    assert "message 3 (tool) differs: recorded contents of a.csv but now DIFFERENT CONTENT" in (result.error or "")


def test_replay_with_changed_tools_says_so(tmp_path: Path) -> None:
    a, original = recorded(tmp_path)
    replayer = Agent(replay=original, tools=[t for t in TOOLS if t.name != "explode"], store=a.store)
    result = asyncio.run(replayer.run("write a report from a.csv", previous_run_id=None))
    assert result.status == RunStatus.FAILED and "the tools differ from the recording" in (result.error or "")


def test_replay_of_a_different_prompt_diverges_at_the_first_call(tmp_path: Path) -> None:
    a, original = recorded(tmp_path)
    replayer = Agent(replay=original, tools=TOOLS, store=a.store)
    result = asyncio.run(replayer.run("something else entirely", previous_run_id=None))
    assert result.status == RunStatus.FAILED
    assert "model call 1" in result.error and "message 1 (user) differs" in result.error


# ---------------------------------------------------------------------------------------------- malformed output


def errors_seen_by_model(a: Agent, run_id: str) -> list[str]:
    return [m["content"] for m in a.store.run_state(run_id).messages if m["role"] == "tool"]


def test_invalid_json_arguments(tmp_path: Path) -> None:
    a = agent(tmp_path, turns({"tool_calls": [{"name": "read_file", "arguments": '{"path": "a.csv"'}]},
                              [call("read_file", path="a.csv")], "recovered"))
    result = run(a)
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS and result.answer == "recovered"
    first = errors_seen_by_model(a, result.run_id)[0]
    assert "not valid JSON" in first and "as a JSON object" in first
    assert CALLS == [("read_file", {"path": "a.csv"})]


def test_arguments_that_are_json_but_not_an_object(tmp_path: Path) -> None:
    a = agent(tmp_path, turns({"tool_calls": [{"name": "read_file", "arguments": "[1, 2]"}]}, "ok"))
    result = run(a)
    assert "must be a JSON object, got list" in errors_seen_by_model(a, result.run_id)[0]


def test_unknown_tool(tmp_path: Path) -> None:
    a = agent(tmp_path, turns([call("format_disk", device="/dev/sda")], "sorry"))
    result = run(a)
    msg = errors_seen_by_model(a, result.run_id)[0]
    assert "unknown tool 'format_disk'" in msg and "read_file" in msg and CALLS == []
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS


def test_arguments_of_the_wrong_type(tmp_path: Path) -> None:
    a = agent(tmp_path, turns([call("add", a="two", b=3)], [call("add", a=2, b=3)], "5"))
    result = run(a)
    msg = errors_seen_by_model(a, result.run_id)[0]
    assert "invalid arguments for add: argument 'a': Input should be a valid integer" in msg
    assert CALLS == [("add", {"a": 2, "b": 3})]


def test_missing_and_extra_arguments(tmp_path: Path) -> None:
    a = agent(tmp_path, turns([call("add", a=1, c=3)], "x"))
    msg = errors_seen_by_model(a, run(a).run_id)[0]
    assert "argument 'b': Field required" in msg and "argument 'c': Extra inputs are not permitted" in msg


def test_empty_reply_fails_cleanly(tmp_path: Path) -> None:
    a = agent(tmp_path, turns({"content": ""}))
    result = run(a)
    assert result.status == RunStatus.FAILED and "empty reply" in (result.error or "")
    assert types(a, result.run_id)[-1] == "error"


def test_fifty_tool_calls_in_one_reply(tmp_path: Path) -> None:
    a = agent(tmp_path, turns([call("add", a=i, b=1) for i in range(50)], "added"), autonomy="L3")
    result = run(a)
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS and result.answer == "added"
    assert len(CALLS) == 20  # Budget.max_tool_calls_per_turn
    tool_msgs = errors_seen_by_model(a, result.run_id)
    assert len(tool_msgs) == 50  # every call answered, so the conversation stays valid
    assert sum("more than 20 tool calls in one reply" in m for m in tool_msgs) == 30


def test_text_and_tool_calls_mixed(tmp_path: Path) -> None:
    a = agent(tmp_path, turns({"content": "Let me check the file first.",
                               "tool_calls": [call("read_file", path="a.csv")]}, "checked"))
    result = run(a)
    assert result.status == RunStatus.COMPLETED
    thinking = next(e for e in a.store.run_events(result.run_id) if e.type == "thinking")
    assert thinking.payload.text == "Let me check the file first."


def test_running_out_of_script_is_a_clear_failure(tmp_path: Path) -> None:
    a = agent(tmp_path, turns([call("read_file", path="a")]))
    result = run(a)
    assert result.status == RunStatus.FAILED
    assert "the script (inline script) has 1 turn(s) and all were used" in (result.error or "")


def test_tool_call_without_a_name(tmp_path: Path) -> None:
    a = agent(tmp_path, turns({"tool_calls": [{"name": "", "arguments": {}}]}, "ok"))
    result = run(a)
    assert "has no tool name" in errors_seen_by_model(a, result.run_id)[0]


def test_a_function_model_returning_garbage_fails_cleanly(tmp_path: Path) -> None:
    a = Agent(function=lambda messages, tools: 42, tools=TOOLS, store=tmp_path / "nb.ipynb")
    result = asyncio.run(a.run("x"))
    assert result.status == RunStatus.FAILED and "must return a str or a dict" in (result.error or "")


def test_unserialisable_tool_result_is_recorded_as_text(tmp_path: Path) -> None:
    @tool(risk="READ_ONLY")
    def weird() -> Any:
        """Returns an object."""
        return {"when": object(), "n": float("nan")}

    a = agent(tmp_path, turns([call("weird")], "ok"), tools=[weird])
    result = run(a)
    assert result.status == RunStatus.COMPLETED
    assert "object object" in str(a.store.run_state(result.run_id).steps["nb1_0"].result)
