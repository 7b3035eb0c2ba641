"""A model call's usage cannot lie a budget open (issue 45).

A server that reports negative usage would refill the run tree's token budget, and one that reports none would
leave it unspent. Each call's recorded usage is at least nbagent's own count of what it sent (the request sized in
the model's tokens before the call, runtime/fitting.py) and received (the reply's text and tool calls); a report
above that count is kept, up to `usage.MAX_TOKENS`. Through litellm's real HTTP path against a hostile
OpenAI-compatible server on 127.0.0.1 (tests/stub_openai.py), and as hypothesis properties over generated usage
fields, for the function `usage.floored` and for whole runs.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from examples import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stub_openai import HttpError, Reply, Respond, StubOpenAI, tool_call

from nbagent.events.model import Usage
from nbagent.events.state import RunStatus
from nbagent.gate.policy import Budget
from nbagent.models.usage import MAX_TOKENS, count_of, floored
from nbagent.runtime import Agent, RunResult
from nbagent.store import Store
from nbagent.tools.base import tool
from nbagent.ui.record_text import render_text
from nbagent.ui.viewstate import run_view

API_KEY = "sk-test-usage-0123456789abcdef"
MODEL = "openai/gpt-4o-mini"  # litellm knows its window and price: each request is counted before it is sent
BUDGET = 2_500


@tool(risk="READ_ONLY")
def read_file(path: str) -> str:
    """Read a text file of the project.

    Args:
        path: the file to read, relative to the project
    """
    return f"{path}: " + "the quick brown fox jumps over the lazy dog. " * 20


def keeps_reading(usage: dict[str, Any] | None) -> Respond:
    """A model that never stops: every reply asks for another file, with the usage given."""
    def answer(body: dict[str, Any]) -> Reply | HttpError:
        n = sum(1 for m in body["messages"] if m["role"] == "tool")
        return Reply(content=f"Reading part {n}.", tool_calls=[tool_call("read_file", {"path": f"part{n}.txt"})],
                     usage=usage)
    return Respond(answer)


@pytest.fixture(scope="module")
def stub() -> Iterator[StubOpenAI]:
    with StubOpenAI() as server:
        yield server


def run(stub: StubOpenAI, folder: Path, usage: dict[str, Any] | None, budget: Budget, stream: bool = False
        ) -> tuple[RunResult, list[Any]]:
    stub.fallback = keeps_reading(usage)
    agent = Agent(model=MODEL, api_base=stub.base_url, api_key=API_KEY, store=folder / "agent.nbagent",
                  tools=[read_file], autonomy="L3", budget=budget, max_retries=0, retry_base=0.01, timeout=5.0,
                  stream=stream)
    try:
        result = asyncio.run(agent.run("read every part"))
        return result, agent.store.run_events(result.run_id)
    finally:
        agent.store.close()


def own_input(called: Any) -> int:
    """The request's tokens as nbagent counted them before the call (recorded with the call)."""
    counted = called.request["input_tokens"]
    assert counted["exact"], "a token budget decides on the count, never on an estimate"
    return int(counted["input_tokens"])


def check_bound(result: RunResult, events: list[Any], budget: int) -> None:
    """The budget bound: every call's usage is at least what was sent, the run stopped on the token budget, and
    the tree's tokens only grew, up to at most one call past the budget."""
    called = [e.payload for e in events if e.type == "llm_called"]
    assert called, result.error
    spent = 0
    for c in called:
        u = c.usage
        assert 0 <= u.prompt_tokens <= MAX_TOKENS and 0 <= u.completion_tokens <= MAX_TOKENS
        assert u.prompt_tokens >= own_input(c)
        assert u.completion_tokens >= 1  # the reply had text and a call: something was received
        assert u.total_tokens >= u.prompt_tokens + u.completion_tokens
        assert spent < budget  # a call is made only while the budget has room
        spent += u.total_tokens
    denied = [e.payload for e in events if e.type == "authorization_denied"]
    assert [d.rule for d in denied] == ["budget.max_tokens"], [d.reason for d in denied]
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS
    assert result.usage.total_tokens == spent


# --------------------------------------------------------------------------- a hostile server on 127.0.0.1


NEGATIVE = {"prompt_tokens": -2_000_000, "completion_tokens": -5, "total_tokens": -2_000_005}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
def test_negative_usage_does_not_refill_the_token_budget(stub: StubOpenAI, tmp_path: Path, stream: bool) -> None:
    result, events = run(stub, tmp_path, NEGATIVE, Budget(max_tokens=BUDGET), stream=stream)
    check_bound(result, events, BUDGET)
    called = [e.payload for e in events if e.type == "llm_called"]
    assert len(called) <= math.ceil(BUDGET / own_input(called[0])) + 1
    # what the server said stays in the recorded response; the usage says it is nbagent's count, and of what
    assert called[0].response["usage"]["prompt_tokens"] == -2_000_000
    assert called[0].usage.counted == {"prompt_tokens": called[0].usage.prompt_tokens,
                                       "completion_tokens": called[0].usage.completion_tokens}
    assert result.cost is not None and result.cost > 0  # a negative price would refill a cost budget the same way
    store = Store(tmp_path / "agent.nbagent", readonly=True)
    try:
        shown = render_text(run_view(store, result.run_id))
    finally:
        store.close()
    assert "usage by nbagent's count (the provider reported less, or none)" in shown


@pytest.mark.parametrize("usage", [{}, {"prompt_tokens": None, "completion_tokens": None, "total_tokens": None},
                                   {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}],
                         ids=["missing", "null", "zero"])
def test_a_provider_that_reports_no_usage_still_spends_the_budget(stub: StubOpenAI, tmp_path: Path,
                                                                  usage: dict[str, Any]) -> None:
    result, events = run(stub, tmp_path, usage, Budget(max_tokens=BUDGET))
    check_bound(result, events, BUDGET)


def test_a_huge_report_is_capped_and_ends_the_budget_at_once(stub: StubOpenAI, tmp_path: Path) -> None:
    result, events = run(stub, tmp_path, {"prompt_tokens": 10**30, "completion_tokens": 3, "total_tokens": 4},
                         Budget(max_tokens=BUDGET, max_cost=1.0))
    (called,) = [e.payload for e in events if e.type == "llm_called"]
    assert called.usage.prompt_tokens == MAX_TOKENS
    assert called.usage.total_tokens == MAX_TOKENS + called.usage.completion_tokens
    assert called.cost is not None and called.cost < 10**6  # priced from the capped count, not 10**30 tokens
    assert {e.payload.rule for e in events if e.type == "authorization_denied"} <= {"budget.max_tokens",
                                                                                     "budget.max_cost"}
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS


def test_an_honest_report_is_recorded_as_it_was_said(stub: StubOpenAI, tmp_path: Path) -> None:
    honest = {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940}
    result, events = run(stub, tmp_path, honest, Budget(max_tokens=BUDGET))
    called = [e.payload for e in events if e.type == "llm_called"]
    assert all(own_input(c) <= 900 for c in called)  # the server's count is above nbagent's: it is kept
    assert [(c.usage.prompt_tokens, c.usage.total_tokens, getattr(c.usage, "counted", None)) for c in called] == \
        [(900, 940, None)] * len(called)
    check_bound(result, events, BUDGET)


def test_without_a_budget_an_unreported_call_is_counted_and_a_reported_one_is_not_recounted(
        stub: StubOpenAI, tmp_path: Path) -> None:
    stub.push(Reply(content="hi", usage={}),
              Reply(content="again", usage={"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22}))
    agent = Agent(model=MODEL, api_base=stub.base_url, api_key=API_KEY, store=tmp_path / "agent.nbagent",
                  autonomy="L3", max_retries=0)
    try:
        first, second = asyncio.run(agent.run("hello")), asyncio.run(agent.run("and again"))
    finally:
        agent.store.close()
    assert first.ok and second.ok
    assert first.usage.prompt_tokens > 0 and first.usage.completion_tokens >= 1
    assert (second.usage.prompt_tokens, second.usage.total_tokens) == (20, 22)


# --------------------------------------------------------------------------- properties


# anything a JSON body can hold where a count should be
REPORTED = st.one_of(st.integers(min_value=-(10**40), max_value=10**40), st.floats(allow_nan=True),
                     st.text(max_size=8), st.none(), st.booleans(), st.lists(st.integers(), max_size=2))
HOSTILE = st.fixed_dictionaries({}, optional={k: REPORTED for k in ("prompt_tokens", "completion_tokens",
                                                                    "total_tokens")})


@given(HOSTILE, st.integers(min_value=1, max_value=10**7), st.integers(min_value=0, max_value=10**6))
def test_property_the_recorded_usage_is_sane_and_at_least_the_own_count(fields: dict[str, Any], sent: int,
                                                                        received: int) -> None:
    parsed = Usage(**{k: count_of(v) or 0 for k, v in fields.items()})
    usage = floored(parsed, sent=sent, received=received)
    assert sent <= usage.prompt_tokens <= MAX_TOKENS
    assert received <= usage.completion_tokens <= MAX_TOKENS
    assert usage.prompt_tokens + usage.completion_tokens <= usage.total_tokens <= 3 * MAX_TOKENS
    for key in ("prompt_tokens", "completion_tokens"):  # a sane report above the count is kept as it was said
        said = fields.get(key)
        if type(said) is int and max(sent, received) < said <= MAX_TOKENS:
            assert getattr(usage, key) == said


# usage fields as a server could send them and litellm would still parse as a chat completion (a string or a
# fraction makes litellm refuse the response, tested below): any int, integral floats, null, missing
PARSED = st.one_of(st.integers(min_value=-(10**12), max_value=10**12), st.none(),
                   st.integers(min_value=-(10**6), max_value=10**6).map(float))
SERVED = st.fixed_dictionaries({}, optional={k: PARSED for k in ("prompt_tokens", "completion_tokens",
                                                                 "total_tokens")})


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(SERVED)
def test_property_no_usage_a_server_sends_refills_the_budget(stub: StubOpenAI, usage: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        result, events = run(stub, Path(folder), usage, Budget(max_tokens=BUDGET))
        check_bound(result, events, BUDGET)


@pytest.mark.parametrize("usage", [{"prompt_tokens": "twelve", "completion_tokens": 3, "total_tokens": 15},
                                   {"prompt_tokens": 12.5, "completion_tokens": 3, "total_tokens": 15.5}],
                         ids=["string", "fraction"])
def test_usage_litellm_cannot_parse_fails_the_run_in_one_line_and_spends_nothing(
        stub: StubOpenAI, tmp_path: Path, usage: dict[str, Any]) -> None:
    result, events = run(stub, tmp_path, usage, Budget(max_tokens=BUDGET))
    assert result.status == RunStatus.FAILED
    assert not [e for e in events if e.type == "llm_called"]
    assert result.error is not None and "\n" not in result.error and "Traceback" not in result.error
    assert "the server's reply is not a chat completion litellm can read: its usage has" in result.error


def test_a_log_with_negative_usage_spends_nothing_and_refills_nothing(tmp_path: Path) -> None:
    """A run's state never subtracts: a log written by anything else, with negative usage and cost, is folded as
    no usage and no cost (state.py), so a resumed run's budget is not refilled by it."""
    from nbagent.events.model import LlmCalled

    store = Store(tmp_path / "agent.nbagent")
    try:
        session = store.create_session("s")
        run = store.create_run(session.id, "hello", model="openai/gpt-4o-mini", options={})
        for usage, cost in ((Usage(prompt_tokens=10, completion_tokens=2, total_tokens=12), 0.5),
                            (Usage(prompt_tokens=-10**7, completion_tokens=-1, total_tokens=-10**7 - 1), -3.0)):
            store.append(LlmCalled(model="openai/gpt-4o-mini", request={}, response={}, usage=usage, cost=cost),
                         run_id=run.id)
        state = store.run_state(run.id)
    finally:
        store.close()
    assert (state.tokens, state.usage.prompt_tokens, state.cost) == (12, 10, 0.5)
