"""Whatever JSON a model sends becomes a valid call or a clear tool error, and its reply is always recorded.

Found from outside: arguments with a lone surrogate (valid JSON; models emit them when they split an emoji)
failed the run with UnicodeEncodeError; arguments nested 100,000 deep failed it with RecursionError before the
reply's `llm_called` (tokens, cost) was recorded; a 5 MB argument was copied into the denial's target.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from nbagent.events.state import RunStatus
from nbagent.gate.deciders import PolicyDecider
from nbagent.runtime import Agent
from nbagent.scope.rules import Scope
from nbagent.tools.files import file_tools


def run_turn(tmp_path: Path, turn: dict[str, Any]) -> tuple[Agent, Any]:
    (tmp_path / "a.txt").write_text("alpha\n")
    a = Agent(script={"turns": [turn, {"content": "done"}]}, tools=file_tools(Scope(root=tmp_path, base=tmp_path)),
              autonomy="L2", decider=PolicyDecider("all"), store=tmp_path / "nb.ipynb")
    return a, asyncio.run(a.run("go"))


CASES = {
    "lone surrogate": ('{"path": "a\\ud800.txt"}', "unpaired UTF-16 surrogate"),
    "nested 100,000 deep": ('{"path": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    "nested 65 deep": ('{"path": ' + "[" * 65 + "]" * 65 + "}", "nested more than 64 levels"),
    "NaN": ('{"path": "a.txt", "start_line": NaN}', "NaN or Infinity"),
    "not JSON": ('{"path": "a.txt"', "not valid JSON"),
    "a list": ('["a.txt"]', "must be a JSON object"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_odd_arguments_are_a_tool_error_the_model_sees(tmp_path: Path, case: str) -> None:
    raw, expected = CASES[case]
    a, result = run_turn(tmp_path, {"tool_calls": [{"name": "read_file", "arguments": raw}]})
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS and result.answer == "done", result.error
    events = a.store.run_events(result.run_id)
    assert [e.type for e in events][:4] == ["run_started", "context_assembled", "llm_called", "tool_call_failed"]
    failed = events[3].payload
    assert expected in failed.error and len(failed.error) < 300
    assert events[2].payload.usage.total_tokens > 0  # the reply and its usage were recorded first
    # the model sees the error as the call's result
    assert any(m["role"] == "tool" and expected in m["content"] for m in a.store.run_state(result.run_id).messages)


def test_a_lone_surrogate_in_the_reply_text_is_kept_as_a_replacement_character(tmp_path: Path) -> None:
    a, result = run_turn(tmp_path, {"content": "half an emoji \ud83d here",
                                    "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]})
    assert result.status == RunStatus.COMPLETED, result.error
    thinking = next(e for e in a.store.run_events(result.run_id) if e.type == "thinking")
    assert "half an emoji" in thinking.payload.text and "\ud83d" not in thinking.payload.text


def test_a_huge_argument_is_not_copied_into_errors_or_targets(tmp_path: Path) -> None:
    huge = "x" * 5_000_000
    a, result = run_turn(tmp_path, {"tool_calls": [{"name": "read_file", "arguments": {"path": huge}}]})
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS
    for e in a.store.run_events(result.run_id):
        if e.type != "llm_called":  # the model's reply itself is the record of what it sent
            assert len(e.payload.model_dump_json()) < 2_000, e.type
    # the log holds the reply (and the request that repeats it), not a copy per event
    assert (tmp_path / "nb.nbagent" / "events.jsonl").stat().st_size < 2.1 * len(huge)
