"""Huge inputs cost what the limits allow, not what was sent (issue 45).

A path over the 4,096-byte limit is refused on its length before any per-character look (nbagent/scope/rules.py: a
5,000,000-character path took a second of checks, twice per call); the refusal names the length. A model's answer is
kept in the log as a tool's result is: whole up to 1,000,000 characters, else its start and a note of how much it
had, once in the model call's response and once as the answer (a 10 MB answer made a 20 MB log). The numbers are in
bench/path_refusal_bench.py; no test here asserts a time.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from nbagent.runtime import MAX_RESULT_CHARS, Agent
from nbagent.scope.rules import Scope, ScopeDenied, ScopeGuard
from nbagent.ui.record_text import render_text
from nbagent.ui.viewstate import run_view


@pytest.mark.parametrize(("path", "said"), [
    ("é" * 5_000_000, "the path is 5,000,000 characters long, over the 4,096 bytes a path may have"),
    ("a/" * 2_049, "the path is 4,098 characters long, over the 4,096 bytes a path may have"),
    ("é" * 3_000, "the path is 6,000 bytes long, over the 4,096 bytes a path may have"),
], ids=["5M characters", "just over", "over in bytes"])
def test_a_path_over_the_limit_is_refused_naming_its_length(tmp_path: Path, path: str, said: str) -> None:
    guard = ScopeGuard(Scope(root=tmp_path, base=tmp_path))
    with pytest.raises(ScopeDenied) as caught:
        guard.check(path, "read")
    assert (caught.value.rule, caught.value.reason) == ("too_long", said)
    assert len(str(caught.value.path)) <= 81  # what the refusal carries is the path's start, not the path


def test_a_path_at_the_limit_is_judged_by_its_other_rules(tmp_path: Path) -> None:
    guard = ScopeGuard(Scope(root=tmp_path, base=tmp_path))
    with pytest.raises(ScopeDenied) as caught:
        guard.check("a/" * 2_047 + "\x07", "read")  # 4,095 bytes: the length is fine, the bell is not
    assert caught.value.rule == "invisible_character"


def test_a_model_that_asks_for_a_huge_path_is_refused_on_its_length(tmp_path: Path) -> None:
    path = "é" * 500_000

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        if messages[-1]["role"] == "user":
            return {"tool_calls": [{"name": "read_file", "arguments": {"path": path}}]}
        return "I could not read it."

    agent = Agent(function=model, store=tmp_path / "nb.ipynb", autonomy="L1")
    try:
        result = asyncio.run(agent.run("read it"))
        (denied,) = [e.payload for e in agent.store.run_events(result.run_id) if e.type == "authorization_denied"]
    finally:
        agent.store.close()
    assert denied.rule == "scope.too_long"
    assert denied.reason == "the path is 500,000 characters long, over the 4,096 bytes a path may have"
    assert result.status.value == "completed_with_errors"


def test_a_huge_answer_is_kept_as_a_result_is_and_says_how_much_it_had(tmp_path: Path) -> None:
    answer = "All rows checked. " + "x" * (MAX_RESULT_CHARS + 500_000)
    agent = Agent(function=lambda messages, tools: answer, store=tmp_path / "nb.ipynb", autonomy="L1")
    try:
        result = asyncio.run(agent.run("check the rows"))
        events = agent.store.run_events(result.run_id)
        shown = render_text(run_view(agent.store, result.run_id))
    finally:
        agent.store.close()
    note = f"… [truncated: the answer had {len(answer):,} characters; the log keeps the first {MAX_RESULT_CHARS:,}]"
    assert result.ok and result.answer == answer[:MAX_RESULT_CHARS] + note
    (called,) = [e.payload for e in events if e.type == "llm_called"]
    assert called.response["choices"][0]["message"]["content"] == answer[:MAX_RESULT_CHARS] + note
    # the answer twice, each cut: the log holds at most twice the limit of it, not twice the answer
    log = os.path.getsize(tmp_path / "nb.nbagent" / "events.jsonl")
    assert 2 * MAX_RESULT_CHARS < log < 2 * MAX_RESULT_CHARS + 200_000
    assert f"the answer had {len(answer):,} characters" in shown


def test_an_answer_within_the_limit_is_kept_whole(tmp_path: Path) -> None:
    answer = "y" * MAX_RESULT_CHARS
    agent = Agent(function=lambda messages, tools: answer, store=tmp_path / "nb.ipynb", autonomy="L1")
    try:
        result = asyncio.run(agent.run("go"))
    finally:
        agent.store.close()
    assert result.answer == answer


def test_the_text_beside_a_tool_call_is_cut_as_an_answer_is(tmp_path: Path) -> None:
    said = "z" * (MAX_RESULT_CHARS + 10)

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        if messages[-1]["role"] == "user":
            return {"content": said, "tool_calls": [{"name": "list_files", "arguments": {}}]}
        return "Listed."

    agent = Agent(function=model, store=tmp_path / "nb.ipynb", autonomy="L1")
    try:
        result = asyncio.run(agent.run("list"))
        events = agent.store.run_events(result.run_id)
    finally:
        agent.store.close()
    (thinking,) = [e.payload.text for e in events if e.type == "thinking"]
    assert result.ok and thinking.endswith(f"the answer had {len(said):,} characters; the log keeps the first "
                                           f"{MAX_RESULT_CHARS:,}]") and thinking.startswith("z" * MAX_RESULT_CHARS)
    first = next(e.payload for e in events if e.type == "llm_called")
    assert first.response["choices"][0]["message"]["tool_calls"]  # the calls are kept whole: they are what ran
