"""The context budget (runtime/window.py, compaction.py, fitting.py, results.py; docs/context-budget.md): every request
fits the window, what was compacted is recorded, the log keeps every result whole, `read_result` pages through it
within the run's own conversation only, the same events give byte-identical requests, a provider's refusal leads
to one compaction and one retry, and a budget stops a run before the call that would pass it.

Offline models count four bytes as a token (window.Counter), so these tests know exactly what fits; the HTTP ones
go through litellm to tests/stub_openai.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stub_openai import HttpError, Reply, Respond, StubOpenAI, tool_call

from nbagent.events.state import RunStatus
from nbagent.gate.policy import Budget
from nbagent.runtime import Agent
from nbagent.runtime.caching import cache_marked
from nbagent.runtime.window import Counter
from nbagent.store import Store

WINDOW = 4_000
LINE = "x" * 60


def files(folder: Path, n: int, lines: int = 400) -> None:
    for k in range(n):
        (folder / f"f{k}.txt").write_text("\n".join(f"line {i} of file {k}: {LINE}" for i in range(lines)))


class Reader:
    """A model that reads the file a request names, reads a compacted result again when `reread`, and answers."""

    def __init__(self, reread: bool = False) -> None:
        self.requests: list[list[dict[str, Any]]] = []
        self.tools: list[list[str]] = []
        self.reread = reread

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        self.requests.append(json.loads(json.dumps(messages)))
        self.tools.append([t["function"]["name"] for t in tools])
        last = messages[-1]
        if last["role"] == "user":
            return {"tool_calls": [{"name": "read_file", "arguments": {"path": f"f{last['content'].split()[-1]}.txt"}}]}
        text = str(last["content"])
        if self.reread and "read_result(handle=\"" in text and not text.startswith("[r"):
            handle = text.split("read_result(handle=\"", 1)[1].split("\"", 1)[0]
            return {"tool_calls": [{"name": "read_result", "arguments": {"handle": handle, "page": 2}}]}
        return {"content": "read: " + text[:30]}


def session(folder: Path, model: Reader, n: int, **kw: Any) -> tuple[Agent, list[Any]]:
    agent = Agent(function=model, store=folder / "agent.nbagent", context_window=WINDOW, autonomy="L3", **kw)

    async def go() -> list[Any]:
        return [await agent.run(f"read file {k}") for k in range(n)]
    return agent, asyncio.run(go())


def events(folder: Path, type_: str) -> list[Any]:
    store = Store(folder / "agent.nbagent", readonly=True)
    return [e for run in store.list_runs() for e in store.run_events(run.id) if e.type == type_]


def test_every_request_fits_the_window_and_the_log_keeps_every_result_whole(tmp_path: Path) -> None:
    files(tmp_path, 8)
    model = Reader()
    _, results = session(tmp_path, model, 8)
    assert all(r.status == RunStatus.COMPLETED for r in results), [r.error for r in results]
    counter = Counter("nbagent/function", offline=True)
    sizes = [counter.request(m, []) for m in model.requests]
    assert max(sizes) <= WINDOW, sizes
    compacted = events(tmp_path, "context_compacted")
    assert compacted and all(c.payload.tokens_after < c.payload.tokens_before for c in compacted)
    assert all(c.payload.reason == "budget" and c.payload.window == WINDOW for c in compacted)
    # what the model was sent is a reference or a first page; the log has what the tool returned, whole
    done = events(tmp_path, "tool_call_completed")
    assert len(done) == 8 and all(len(e.payload.result["content"]) > 30_000 for e in done)
    assert all(len(m["content"]) < 20_000 for r in model.requests for m in r if m["role"] == "tool")
    assert "read_result" in model.tools[0]


def test_a_long_session_stays_flat(tmp_path: Path) -> None:
    files(tmp_path, 30, lines=40)
    model = Reader()
    session(tmp_path, model, 30)
    counter = Counter("nbagent/function", offline=True)
    per_run = [counter.request(m, []) for m in model.requests]
    assert max(per_run[-10:]) <= WINDOW * 0.75 + 10
    assert max(per_run[-10:]) <= 1.3 * max(per_run[10:20]) + 200


def test_the_same_events_give_byte_identical_requests(tmp_path: Path) -> None:
    sent = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        files(tmp_path / name, 6)
        model = Reader(reread=True)
        session(tmp_path / name, model, 6)
        sent.append(json.dumps(model.requests, sort_keys=True))
    assert sent[0] == sent[1]


def test_read_result_pages_through_the_whole_result(tmp_path: Path) -> None:
    files(tmp_path, 3)
    model = Reader(reread=True)
    session(tmp_path, model, 3)
    read = [e for e in events(tmp_path, "tool_call_completed") if e.payload.tool == "read_result"]
    assert read, "the model never read a result again"
    full = json.dumps(next(e.payload.result for e in events(tmp_path, "tool_call_completed")
                           if e.payload.tool == "read_file"), ensure_ascii=False, sort_keys=True)
    page = read[0].payload.result
    assert page.startswith("[r1/nb1_0, page 2 of ")
    body = page.split("\n", 1)[1]
    assert body and body in full and not full.startswith(body)


@pytest.mark.parametrize(("handle", "said"), [
    ("r9/nb1_0", "no run r9 in this conversation"),
    ("r1/nb7_0", "no result r1/nb7_0"),
    ("../../etc/passwd", "outside the notebook's folder"),  # the scope guard reads it as a path first
    ("01M88CVJXVA4AY1TPFXACABTRG/nb1_0", "is not a result handle"),  # a run id: handles never name one
])
def test_read_result_resolves_only_within_the_runs_own_conversation(tmp_path: Path, handle: str, said: str) -> None:
    files(tmp_path, 1)
    asked: list[str] = []

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        if messages[-1]["role"] == "user" and "other" in messages[-1]["content"]:
            return {"tool_calls": [{"name": "read_file", "arguments": {"path": "f0.txt"}}]}
        if messages[-1]["role"] == "user":
            return {"tool_calls": [{"name": "read_result", "arguments": {"handle": handle}}]}
        asked.append(messages[-1]["content"])
        return {"content": "ok"}

    async def go() -> None:
        other = Agent(function=model, store=tmp_path / "agent.nbagent", context_window=WINDOW, autonomy="L3",
                      session="other")
        await other.run("read the other file")  # a result in another session: r1/nb1_0 there, not here
        mine = Agent(function=model, store=tmp_path / "agent.nbagent", context_window=WINDOW, autonomy="L3")
        await mine.run("read it again")
    asyncio.run(go())
    assert said in asked[-1]


def test_a_single_result_bigger_than_the_whole_window_is_sent_as_its_first_page(tmp_path: Path) -> None:
    (tmp_path / "f0.txt").write_text("y" * 39_000)  # ~9,750 tokens offline: over twice the window
    model = Reader()
    _, (result,) = session(tmp_path, model, 1)
    assert result.status == RunStatus.COMPLETED
    tool_msg = model.requests[-1][-1]
    assert tool_msg["role"] == "tool" and "read_result(handle=\"r1/nb1_0\", page=2)" in tool_msg["content"]
    assert Counter("x", offline=True).request(model.requests[-1], []) <= WINDOW


def test_without_a_window_a_huge_result_is_kept_in_the_log_and_capped_in_requests(tmp_path: Path) -> None:
    from nbagent.tools.base import tool

    @tool(risk="READ_ONLY")
    def dump() -> str:
        """Say a lot."""
        return "z" * 3_000_000

    seen: list[list[dict[str, Any]]] = []

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        seen.append(messages)
        return {"tool_calls": [{"name": "dump", "arguments": {}}]} if len(seen) == 1 else {"content": "done"}
    agent = Agent(function=model, tools=[dump], store=tmp_path / "agent.nbagent", autonomy="L3")
    asyncio.run(agent.run("say a lot"))
    (done,) = events(tmp_path, "tool_call_completed")
    assert 1_000_000 <= len(done.payload.result) < 1_010_000 and "truncated" in done.payload.result
    assert all(len(json.dumps(m)) < 60_000 for m in seen[-1])


def test_a_context_window_below_1000_is_refused_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 1,000 tokens"):
        Agent(function=Reader(), store=tmp_path / "agent.nbagent", context_window=10)


def test_offline_models_without_a_window_send_what_they_always_sent(tmp_path: Path) -> None:
    files(tmp_path, 2)
    model = Reader()
    agent = Agent(function=model, store=tmp_path / "agent.nbagent", autonomy="L3")

    async def go() -> None:
        for k in range(2):
            await agent.run(f"read file {k}")
    asyncio.run(go())
    assert "read_result" not in model.tools[0]
    assert not events(tmp_path, "context_compacted")
    assert any(len(m["content"]) > 20_000 for m in model.requests[-1] if m["role"] == "tool")


# ------------------------------------------------------------------------------------------ real HTTP (litellm)

API_KEY = "sk-test-context-0123456789"


@pytest.fixture
def stub() -> Iterator[StubOpenAI]:
    with StubOpenAI() as server:
        yield server


def http_agent(stub: StubOpenAI, folder: Path, model: str = "openai/nbagent-unknown-model", **kw: Any) -> Agent:
    return Agent(model=model, api_base=stub.base_url, api_key=API_KEY, store=folder / "agent.nbagent",
                 autonomy="L3", max_retries=0, retry_base=0.01, **kw)


REFUSAL = ("This model's maximum context length is 3000 tokens. However, your messages resulted in 9120 tokens. "
           "Please reduce the length of the messages.")


def test_a_providers_refusal_leads_to_one_compaction_and_one_retry(stub: StubOpenAI, tmp_path: Path) -> None:
    files(tmp_path, 1)
    stub.push(Reply(tool_calls=[tool_call("read_file", {"path": "f0.txt"})]),
              HttpError(400, REFUSAL), Reply(content="Read it."))
    agent = http_agent(stub, tmp_path)  # a model litellm does not know: no limit until the provider names one
    result = asyncio.run(agent.run("read f0.txt"))
    assert result.status == RunStatus.COMPLETED, result.error
    (compacted,) = events(tmp_path, "context_compacted")
    p = compacted.payload
    assert (p.reason, p.window, p.window_source) == ("refused", 3000, "refused")
    assert "maximum context length is 3000" in p.provider_message and p.tokens_after <= 3000 < p.tokens_before
    retried = stub.completion_requests[-1].body["messages"]
    assert "read_result(handle=\\\"r1/nb1_0\\\"" in json.dumps(retried) or \
        "read_result(handle=\"r1/nb1_0\"" in retried[-1]["content"]
    assert len(stub.completion_requests) == 3


def test_a_second_refusal_ends_the_run_saying_what_was_too_big(stub: StubOpenAI, tmp_path: Path) -> None:
    files(tmp_path, 1)
    stub.push(Reply(tool_calls=[tool_call("read_file", {"path": "f0.txt"})]), HttpError(400, REFUSAL),
              HttpError(400, REFUSAL))
    result = asyncio.run(http_agent(stub, tmp_path).run("read f0.txt"))
    assert result.status == RunStatus.FAILED
    assert "maximum context length" in (result.error or "") and "refused again after one compaction" in result.error
    assert len(events(tmp_path, "context_compacted")) == 1 and len(stub.completion_requests) == 3


def reader(summary: Reply | HttpError) -> Respond:
    """A model over HTTP: reads the file a request names, answers from a result, and summarises with `summary`."""
    def answer(body: dict[str, Any]) -> Reply | HttpError:
        messages = body["messages"]
        if str(messages[0].get("content")).startswith("You summarise"):
            return summary
        last = messages[-1]
        if last["role"] == "user":
            return Reply(tool_calls=[tool_call("read_file", {"path": str(last["content"]).split()[-1]})])
        return Reply(content="Read " + str(last["content"])[:20])
    return Respond(answer)


def test_a_failing_summary_request_is_recorded_and_an_extract_stands_in(stub: StubOpenAI, tmp_path: Path) -> None:
    files(tmp_path, 4)
    stub.fallback = reader(HttpError(400, "summaries are not allowed here"))
    agent = http_agent(stub, tmp_path, context_window=4_000)

    async def go() -> list[Any]:
        return [await agent.run(f"read f{k}.txt") for k in range(4)]
    assert all(r.status == RunStatus.COMPLETED for r in asyncio.run(go()))
    with_summary = [e.payload for e in events(tmp_path, "context_compacted") if e.payload.summary]
    assert with_summary and with_summary[0].summary_by == "extract"
    assert "summaries are not allowed here" in with_summary[0].summary_error
    assert "Asked: read f0.txt" in with_summary[0].summary


def test_the_cost_budget_stops_a_run_before_the_call_that_would_pass_it(stub: StubOpenAI, tmp_path: Path) -> None:
    files(tmp_path, 1, lines=4_000)
    stub.push(Reply(tool_calls=[tool_call("read_file", {"path": "f0.txt"})],
                    usage={"prompt_tokens": 300, "completion_tokens": 10, "total_tokens": 310}))
    # gpt-4o-mini: $0.15 per million input tokens; the second call would send ~8,000 tokens, ~$0.0012
    agent = http_agent(stub, tmp_path, model="openai/gpt-4o-mini", budget=Budget(max_cost=0.0008))
    result = asyncio.run(agent.run("read f0.txt"))
    assert len(stub.completion_requests) == 1
    (denied,) = [e.payload for e in events(tmp_path, "authorization_denied")]
    assert denied.rule == "budget.max_cost" and "the next model call would cost about $" in denied.reason
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS


def test_cached_tokens_and_the_estimate_are_recorded_and_no_usage_is_not_an_error(stub: StubOpenAI,
                                                                                  tmp_path: Path) -> None:
    stub.push(Reply(content="hi", usage={"prompt_tokens": 2_000, "completion_tokens": 5, "total_tokens": 2_005,
                                         "prompt_tokens_details": {"cached_tokens": 1_024}}),  # type: ignore[dict-item]
              Reply(content="again", usage={}))
    agent = http_agent(stub, tmp_path, model="openai/gpt-4o-mini")

    async def go() -> list[Any]:
        return [await agent.run("hello"), await agent.run("and again")]
    first, second = asyncio.run(go())
    assert first.ok and second.ok
    called = [e.payload for e in events(tmp_path, "llm_called")]
    assert getattr(called[0].usage, "cached_tokens", 0) == 1_024
    assert all(c.request["input_tokens"]["input_tokens"] > 0 for c in called)  # counted before each call
    # the provider said nothing: nbagent's own count of the request is recorded (usage.py), the run went on
    assert called[1].usage.prompt_tokens == called[1].usage.counted["prompt_tokens"] > 0


def test_anthropic_requests_mark_the_settled_prefix_for_the_cache() -> None:
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "earlier"},
                {"role": "assistant", "content": "answer"}, {"role": "user", "content": "now"}]
    marked = cache_marked("anthropic/claude-sonnet-4-5", messages, settled=3)
    assert [isinstance(m["content"], list) for m in marked] == [True, False, True, True]
    assert marked[2]["content"][0] == {"type": "text", "text": "answer", "cache_control": {"type": "ephemeral"}}
    assert cache_marked("openai/gpt-4o-mini", messages, settled=3) is messages  # OpenAI caches by itself
    assert messages[0]["content"] == "sys"  # what is recorded is never changed


def test_a_replay_of_a_compacted_run_sends_the_recorded_summary_and_references(stub: StubOpenAI,
                                                                              tmp_path: Path) -> None:
    files(tmp_path, 4)
    stub.fallback = reader(Reply(content="The researcher read f0.txt; it has 400 lines."))
    agent = http_agent(stub, tmp_path, context_window=4_000)

    async def go() -> list[Any]:
        return [await agent.run(f"read f{k}.txt") for k in range(4)]
    runs = asyncio.run(go())
    store = Store(tmp_path / "agent.nbagent", readonly=True)
    summarised = next(r for r in runs if any(e.type == "context_compacted" and e.payload.summary
                                             for e in store.run_events(r.run_id)))
    recorded = [e.payload for e in store.run_events(summarised.run_id) if e.type == "context_compacted"]
    assert any(c.summary_by == "model" and c.summary == "The researcher read f0.txt; it has 400 lines."
               for c in recorded)
    n = len(stub.completion_requests)
    replayer = Agent(replay=summarised.run_id, store=tmp_path / "agent.nbagent", autonomy="L3")
    replayed = asyncio.run(replayer.run(store.run_state(summarised.run_id).prompt))
    assert replayed.status == RunStatus.COMPLETED, replayed.error
    assert len(stub.completion_requests) == n  # offline: nothing went to the provider, the summary included
    again = [e.payload for e in Store(tmp_path / "agent.nbagent", readonly=True).run_events(replayed.run_id)
             if e.type == "context_compacted"]
    assert [(c.summary, [r.call_id for r in c.results]) for c in again] == \
        [(c.summary, [r.call_id for r in c.results]) for c in recorded]


# ------------------------------------------------------------------------------------------ the property

from examples import examples  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(window=st.integers(3_000, 9_000), sizes=st.lists(st.integers(0, 3_000), min_size=1, max_size=9),
       reread=st.booleans())
def test_property_every_request_fits_and_nothing_recorded_is_lost(tmp_path_factory: pytest.TempPathFactory,
                                                                  window: int, sizes: list[int],
                                                                  reread: bool) -> None:
    """Any window, any run of file sizes (a line is ~80 bytes, 3,000 lines ~60,000 tokens): every request the model
    gets fits the window, every tool result is in the log whole, and the same run again sends the same bytes."""
    sent = []
    for _ in range(2):
        folder = tmp_path_factory.mktemp("s")
        for k, lines in enumerate(sizes):
            (folder / f"f{k}.txt").write_text("\n".join(f"line {i} of file {k}: {LINE}" for i in range(lines)))
        model = Reader(reread=reread)
        agent = Agent(function=model, store=folder / "agent.nbagent", context_window=window, autonomy="L3")

        async def go(agent: Agent = agent) -> list[Any]:
            return [await agent.run(f"read file {k}") for k in range(len(sizes))]
        results = asyncio.run(go())
        counter = Counter("nbagent/function", offline=True)
        tools = [t.schema() for t in agent.tools.values()]
        assert all(r.ok for r in results), [r.error for r in results]
        assert all(counter.request(m, tools) <= window for m in model.requests)
        done = [e.payload for e in events(folder, "tool_call_completed") if e.payload.tool == "read_file"]
        assert [len(d.result["content"]) for d in done] == \
            [min(len((folder / f"f{k}.txt").read_text()), 40_000) for k in range(len(sizes))]
        sent.append(json.dumps(model.requests, sort_keys=True))
    assert sent[0] == sent[1]


def test_the_live_view_shows_the_next_calls_tokens_and_cost_before_it_is_made() -> None:
    from nbagent.events.bus import EventBus
    from nbagent.ui.widget import RunView

    bus = EventBus()
    view = RunView(interval=0)
    view.attach(bus, lambda run_id: {"run_id": run_id}, run_id="r")
    bus.next_call("r", {"input_tokens": 12_345, "exact": True, "cost": 0.00185})
    view.flush()
    assert view.streaming == "sending 12,345 tokens (≈ $0.0019)…"
    bus.token("r", "The ")  # the reply's first token takes the line's place
    view.flush()
    assert view.streaming == "The "
    bus.next_call("other run", {"input_tokens": 1, "exact": False})
    view.flush()
    assert view.streaming == "The "
    bus.next_call("r", {"input_tokens": 900, "exact": False})
    view.flush()
    assert view.streaming == "sending about 900 tokens…"


def test_the_record_says_when_the_context_was_compacted_and_what_each_call_sent(tmp_path: Path,
                                                                               stub: StubOpenAI) -> None:
    from nbagent.ui.record_words import step_summary
    from nbagent.ui.viewstate import run_view

    files(tmp_path, 3)
    model = Reader()
    _, results = session(tmp_path, model, 3)
    store = Store(tmp_path / "agent.nbagent", readonly=True)
    lines = [step_summary(s) for r in results for s in run_view(store, r.run_id)["steps"]]
    compacted = [line for line in lines if line.startswith("context compacted")]
    assert compacted and "(window 4,000): " in compacted[0] and " sent as " in compacted[0]
    assert any("sent " in line and " tokens" in line for line in lines if line.startswith("model "))
    # a model litellm does not know: the record says its limit is unknown, and what to set
    stub.push(Reply(content="hi"))
    (tmp_path / "u").mkdir()
    unknown = asyncio.run(http_agent(stub, tmp_path / "u").run("hi"))
    view = run_view(Store(tmp_path / "u" / "agent.nbagent", readonly=True), unknown.run_id)
    (model_step,) = [s for s in view["steps"] if s["kind"] == "model"]
    assert "input limit is unknown to litellm: set context_window" in step_summary(model_step)


def test_agent_config_context_window_takes_a_limit_and_refuses_a_nonsense_one_saying_what_to_set() -> None:
    from nbagent.ipython.options import UsageError, set_override

    overrides: dict[str, Any] = {}
    assert set_override(overrides, "context_window=16000") == "context_window = 16000"
    with pytest.raises(UsageError, match="1000 or more"):
        set_override(overrides, "context_window=500")
    assert overrides == {"context_window": 16000}  # the bad value did not replace the good one
    with pytest.raises(UsageError, match="must be a whole number"):
        set_override(overrides, "context_window=lots")
    set_override(overrides, "autonomy=L2")
    with pytest.raises(UsageError, match="L0, L1, L2 or L3"):  # was: stored first, then refused
        set_override(overrides, "autonomy=L9")
    with pytest.raises(UsageError, match="all, none, low or recorded"):
        set_override(overrides, "approve=everything")
    assert overrides == {"context_window": 16000, "autonomy": "L2"}


def test_a_recording_made_before_results_were_sent_sorted_still_replays() -> None:
    """Recorded requests hold a dict result as the tool ordered it; a replay now sends its keys sorted."""
    from nbagent.models.replay import RecordedCall, ReplayDiverged, ReplayModel

    asked = {"role": "user", "content": "read it"}
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "nb1_0", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}
    then = {"role": "tool", "tool_call_id": "nb1_0", "content": '{"path": "a.csv", "content": "x"}'}
    recorded = RecordedCall(fingerprint="old", own_messages=[asked, call, then], response={
        "choices": [{"message": {"role": "assistant", "content": "Read."}}]})
    model = ReplayModel([recorded])
    now = {**then, "content": '{"content": "x", "path": "a.csv"}'}
    reply = asyncio.run(model.reply([asked, call, now], [], 0, fingerprint="new"))
    assert reply["content"] == "Read."
    other = {**then, "content": '{"content": "y", "path": "a.csv"}'}  # other data is still a divergence
    with pytest.raises(ReplayDiverged, match="message 3"):
        asyncio.run(ReplayModel([recorded]).reply([asked, call, other], [], 0, fingerprint="new"))


def test_without_a_window_every_request_starts_with_the_system_prompt_and_the_history(tmp_path: Path) -> None:
    files(tmp_path, 2, lines=3)
    model = Reader()
    agent = Agent(function=model, store=tmp_path / "agent.nbagent", autonomy="L3", system_prompt="You help.")

    async def go() -> None:
        for k in range(2):
            await agent.run(f"read file {k}")
    asyncio.run(go())
    assert all(r[0] == {"role": "system", "content": "You help."} for r in model.requests)
    assert [m["content"] for m in model.requests[-1] if m["role"] == "user"] == ["read file 0", "read file 1"]
    assert all(len(b) == len(a) + 2 for a, b in zip(model.requests, model.requests[1:], strict=False)
               if b[-1]["role"] == "tool")  # each step adds its call and its result, nothing is lost or repeated


@pytest.mark.parametrize(("error_type", "message", "refusal", "limit"), [
    ("ContextWindowExceededError", "This model's maximum context length is 16000 tokens. However, your messages "
                                   "resulted in 17234 tokens.", True, 16_000),
    ("BadRequestError", "prompt is too long: 200500 tokens > 200000 maximum", True, 200_000),  # Anthropic's
    ("BadRequestError", "Error code: 400 - {'code': 'context_length_exceeded'}", True, None),
    ("RateLimitError", "Rate limit reached: too many tokens per min (TPM): Limit 30000", False, None),
    ("BadRequestError", "Invalid value for 'temperature'", False, None),
])
def test_a_refusal_for_length_is_told_from_other_errors(error_type: str, message: str, refusal: bool,
                                                        limit: int | None) -> None:
    from nbagent.models.reply import ModelError
    from nbagent.runtime.fitting import is_context_refusal, limit_said

    assert is_context_refusal(ModelError(message, error_type=error_type)) is refusal
    assert limit_said(message) == limit


def test_input_read_from_the_providers_cache_is_priced_at_the_cached_rate(stub: StubOpenAI, tmp_path: Path) -> None:
    million = {"prompt_tokens": 1_000_000, "completion_tokens": 0, "total_tokens": 1_000_000}
    stub.push(Reply(content="hi", usage={**million, "prompt_tokens_details": {"cached_tokens": 1_000_000}}),  # type: ignore[dict-item]
              Reply(content="hi", usage=million))
    agent = http_agent(stub, tmp_path, model="openai/gpt-4o-mini")

    async def go() -> list[Any]:
        return [await agent.run("hello"), await agent.run("again")]
    cached, full = asyncio.run(go())
    # gpt-4o-mini: $0.075 per million cached input tokens, $0.15 uncached (litellm's table)
    assert cached.cost == pytest.approx(0.075) and full.cost == pytest.approx(0.15)
