"""The model layer and the agent loop over litellm's real HTTP path, against a local OpenAI-compatible stub.

litellm ("openai/..." with an api_base) -> the openai SDK -> httpx -> `stub_openai` on 127.0.0.1. Nothing
leaves the machine; the stub's script decides every answer, so the tests are deterministic. Retries wait
`retry_base` (0.01 s) and deadlines are generous (a loaded machine never trips one; the tests of a deadline set
their own); no test asserts on wall-clock time.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stub_openai import Delay, HttpError, Reply, StubOpenAI, tool_call

from nbagent.events.state import RunStatus
from nbagent.gate.deciders import PolicyDecider
from nbagent.models.llm import complete
from nbagent.models.reply import ModelError, ModelReply, ModelSettings
from nbagent.runtime import Agent, RunResult
from nbagent.tools.base import tool

API_KEY = "sk-test-abcdefghijklmnop1234"
MODEL = "openai/stub-model"
MESSAGES = [{"role": "system", "content": "You are a test."}, {"role": "user", "content": "What is in data.csv?"}]
FILES = {"data.csv": "region,sales\nnorth,10\nsouth,32\n"}


@tool(risk="READ_ONLY")
def read_file(path: str) -> str:
    """Read a text file of the project.

    Args:
        path: the file to read, relative to the project
    """
    return FILES[path]


TOOLS = [read_file.schema()]


@pytest.fixture
def stub() -> Iterator[StubOpenAI]:
    """A fresh stub server per test; stopped (shutdown, socket closed, delays cut short) at teardown."""
    with StubOpenAI() as server:
        yield server


def settings(stub: StubOpenAI, **kw: Any) -> ModelSettings:
    base: dict[str, Any] = dict(model=MODEL, api_base=stub.base_url, api_key=API_KEY, retry_base=0.01,
                                retry_cap=0.05, max_retries=3, timeout=60.0)
    return ModelSettings(**{**base, **kw})


def call(stub: StubOpenAI, tools: list[dict[str, Any]] | None = None, on_token: Any = None, on_retry: Any = None,
         **kw: Any) -> ModelReply:
    return asyncio.run(complete(settings(stub, **kw), MESSAGES, TOOLS if tools is None else tools,
                                on_token=on_token, on_retry=on_retry))


def call_error(stub: StubOpenAI, **kw: Any) -> ModelError:
    with pytest.raises(ModelError) as info:
        call(stub, **kw)
    return info.value


def make_agent(stub: StubOpenAI, tmp_path: Path, **kw: Any) -> Agent:
    base: dict[str, Any] = dict(api_base=stub.base_url, api_key=API_KEY, tools=[read_file],
                                decider=PolicyDecider("all"), store=tmp_path / "nb.ipynb", retry_base=0.01,
                                retry_cap=0.05, max_retries=3, timeout=60.0)
    return Agent(MODEL, **{**base, **kw})


def run_agent(stub: StubOpenAI, tmp_path: Path, prompt: str = "What is in data.csv?", **kw: Any
              ) -> tuple[Agent, RunResult, list[Any]]:
    agent = make_agent(stub, tmp_path, **kw)
    try:
        result = asyncio.run(agent.run(prompt))
        events = agent.store.run_events(result.run_id)
    finally:
        agent.store.close()
    return agent, result, events


def of_type(events: list[Any], type_: str) -> list[Any]:
    return [e for e in events if e.type == type_]


# ------------------------------------------------------------------------------------------- tool calls


def test_tool_call_reply_parses_and_request_carries_our_tool_schemas(stub: StubOpenAI) -> None:
    stub.push(Reply(tool_calls=[tool_call("read_file", {"path": "data.csv"}, id="call_abc")],
                    usage={"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49}))
    reply = call(stub)

    assert reply.content is None
    assert [(c.id, c.name, c.arguments, c.parse_error) for c in reply.tool_calls] == [
        ("call_abc", "read_file", {"path": "data.csv"}, None)]
    assert reply.finish_reason == "tool_calls"
    assert reply.retry_count == 0
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (40, 9, 49)
    assert reply.response["id"] == "chatcmpl-stub-1"
    assert reply.cost is None  # no price known for the stub model: unknown, never reported as free

    [request] = stub.requests  # one HTTP request: litellm and the openai SDK did not retry on their own
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.body["model"] == "stub-model"  # the "openai/" provider prefix is stripped
    assert request.body["messages"] == MESSAGES
    assert request.body["tools"] == TOOLS
    assert request.body["tools"][0]["function"]["parameters"]["required"] == ["path"]
    assert "stream" not in request.body


def test_tool_call_with_invalid_json_arguments_is_parsed_with_an_error(stub: StubOpenAI) -> None:
    stub.push(Reply(tool_calls=[tool_call("read_file", '{"path": "data.csv"')]))
    [c] = call(stub).tool_calls
    assert c.name == "read_file"
    assert c.arguments is None
    assert c.arguments_raw == '{"path": "data.csv"'
    assert c.parse_error is not None and c.parse_error.startswith("arguments are not valid JSON")


def test_agent_runs_read_only_tool_then_answers(stub: StubOpenAI, tmp_path: Path) -> None:
    stub.push(
        Reply(content="Let me look.", tool_calls=[tool_call("read_file", {"path": "data.csv"}, id="call_1")],
              usage={"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}),
        Reply(content="South sold most (32).", usage={"prompt_tokens": 150, "completion_tokens": 8,
                                                      "total_tokens": 158}),
    )
    _, result, events = run_agent(stub, tmp_path)

    assert result.status == RunStatus.COMPLETED, result.error
    assert result.answer == "South sold most (32)."
    assert (result.model_calls, result.usage.total_tokens) == (2, 278)

    [done] = of_type(events, "tool_call_completed")
    assert (done.payload.call_id, done.payload.tool) == ("nb1_0", "read_file")
    assert done.payload.result == FILES["data.csv"]
    assert of_type(events, "thinking")[0].payload.text == "Let me look."

    first, second = of_type(events, "llm_called")
    assert (first.payload.usage.prompt_tokens, first.payload.usage.completion_tokens) == (100, 20)
    assert (second.payload.usage.total_tokens, second.payload.retry_count) == (158, 0)
    assert first.payload.response["id"] == "chatcmpl-stub-1"
    assert first.payload.response["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "read_file", "arguments": json.dumps({"path": "data.csv"})}
    assert second.payload.response["choices"][0]["message"]["content"] == "South sold most (32)."
    assert second.payload.request["api_base"] == stub.base_url
    assert "read_file" in second.payload.request["tools"]

    # what went over the wire: our tool schemas (with the control tools) and, the second time, the tool result
    r1, r2 = stub.requests
    names = [t["function"]["name"] for t in r1.body["tools"]]
    assert "read_file" in names and "respond_to_user" in names
    assert next(t for t in r1.body["tools"] if t["function"]["name"] == "read_file") == read_file.schema()
    assert r1.body["messages"][-1] == {"role": "user", "content": "What is in data.csv?"}
    assistant, tool_msg = r2.body["messages"][-2:]
    assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["id"] == "nb1_0"
    assert tool_msg["role"] == "tool" and tool_msg["tool_call_id"] == "nb1_0"
    assert "south,32" in tool_msg["content"]
    assert of_type(events, "completed") and events[-1].type == "completed"


# ------------------------------------------------------------------------------------------- streaming


def test_streaming_tokens_arrive_in_order_and_usage_comes_from_the_last_chunk(stub: StubOpenAI) -> None:
    pieces = ["The ", "south ", "region", " sold ", "most", "."]
    stub.push(Reply(content="".join(pieces), pieces=pieces,
                    usage={"prompt_tokens": 31, "completion_tokens": 6, "total_tokens": 37}))
    tokens: list[str] = []
    reply = call(stub, on_token=tokens.append)

    assert tokens == pieces
    assert reply.content == "".join(tokens)
    assert reply.tool_calls == []
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (31, 6, 37)
    assert reply.finish_reason == "stop"
    [request] = stub.requests
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}


def test_streaming_tool_call_deltas_build_parsed_tool_calls(stub: StubOpenAI) -> None:
    args_a = {"path": "data.csv"}
    args_b = {"path": "sub dir/notes, with \"quotes\".txt"}
    stub.push(Reply(content="Reading both.", arg_chunk=3, tool_calls=[
        tool_call("read_file", args_a, id="call_a"), tool_call("read_file", args_b, id="call_b")],
        usage={"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42}))
    tokens: list[str] = []
    reply = call(stub, on_token=tokens.append)

    assert "".join(tokens) == reply.content == "Reading both."
    assert [(c.id, c.name, c.arguments, c.parse_error) for c in reply.tool_calls] == [
        ("call_a", "read_file", args_a, None), ("call_b", "read_file", args_b, None)]
    assert reply.usage.total_tokens == 42
    assert reply.finish_reason == "tool_calls"


def test_agent_streams_tokens_and_records_streamed_usage(stub: StubOpenAI, tmp_path: Path) -> None:
    stub.push(
        Reply(tool_calls=[tool_call("read_file", {"path": "data.csv"}, id="call_s")], arg_chunk=4,
              usage={"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}),
        Reply(content="South sold most.", usage={"prompt_tokens": 70, "completion_tokens": 4, "total_tokens": 74}),
    )
    agent = make_agent(stub, tmp_path, stream=True)
    tokens: list[tuple[str, str]] = []
    agent.bus.subscribe(lambda kind, data: tokens.append(data) if kind == "token" else None)
    try:
        result = asyncio.run(agent.run("Which region sold most?"))
        events = agent.store.run_events(result.run_id)
    finally:
        agent.store.close()

    assert result.status == RunStatus.COMPLETED, result.error
    assert result.answer == "South sold most."
    assert "".join(t for _, t in tokens) == "South sold most."
    assert {rid for rid, _ in tokens} == {result.run_id}
    assert of_type(events, "tool_call_completed")[0].payload.result == FILES["data.csv"]
    assert [e.payload.usage.total_tokens for e in of_type(events, "llm_called")] == [60, 74]
    assert all(r.body["stream"] is True for r in stub.requests)


def test_dropped_stream_is_retried_and_on_retry_separates_the_attempts(stub: StubOpenAI) -> None:
    # the connection drops mid-body (unfinished chunked encoding): transient, so retried. The pieces streamed
    # before the drop were already delivered to on_token; on_retry is what tells a consumer to discard them.
    stub.push(Reply(content="one two three four", cut_after=2), Reply(content="fresh answer"))
    seen: list[str] = []
    reply = call(stub, on_token=lambda t: seen.append(f"token:{t}"),
                 on_retry=lambda n, exc: seen.append(f"retry:{n}:{type(exc).__name__}"))

    assert reply.content == "fresh answer"
    assert reply.retry_count == 1
    assert seen == ["token:one", "token: two", "retry:1:MidStreamFallbackError", "token:fresh", "token: answer"]


def test_agent_streamed_tokens_match_the_answer_after_a_dropped_stream(stub: StubOpenAI, tmp_path: Path) -> None:
    """The bus says `token_reset` when a dropped stream is retried, so a live view can drop what it showed."""
    stub.push(Reply(content="one two three", cut_after=2), Reply(content="South sold most."))
    agent = make_agent(stub, tmp_path, stream=True)
    tokens: list[str] = []

    def listen(kind: str, data: Any) -> None:
        if kind == "token":
            tokens.append(data[1])
        elif kind == "token_reset":
            tokens.clear()

    agent.bus.subscribe(listen)
    try:
        result = asyncio.run(agent.run("Which region sold most?"))
    finally:
        agent.store.close()
    assert result.answer == "South sold most."
    assert "".join(tokens) == result.answer


def test_stream_that_ends_early_is_not_taken_as_a_complete_reply(stub: StubOpenAI) -> None:
    # the body ends properly but without a finish chunk or [DONE] (a proxy that gave up politely)
    stub.push(Reply(content="one two three four", cut_after=2, cut="clean"), Reply(content="one two three four"))
    reply = call(stub, on_token=lambda t: None)
    assert reply.content == "one two three four"


# ------------------------------------------------------------------------------------------- transient errors


@pytest.mark.parametrize("error", [HttpError(429, "slow down", headers={"Retry-After": "0"}), HttpError(500),
                                   HttpError(503, "overloaded")], ids=["429", "500", "503"])
def test_transient_error_then_success_is_retried_once(stub: StubOpenAI, error: HttpError) -> None:
    stub.push(error, Reply(content="fine now"))
    retries: list[tuple[int, str]] = []
    reply = call(stub, on_retry=lambda n, exc: retries.append((n, type(exc).__name__)))

    assert reply.content == "fine now"
    assert reply.retry_count == 1
    assert len(stub.requests) == 2  # our one retry, none hidden inside litellm or the openai SDK
    expected = {429: "RateLimitError", 500: "InternalServerError", 503: "ServiceUnavailableError"}[error.status]
    assert retries == [(1, expected)]


def test_agent_records_the_retry_of_a_429(stub: StubOpenAI, tmp_path: Path) -> None:
    stub.push(HttpError(429, headers={"Retry-After": "0"}), Reply(content="All good."))
    _, result, events = run_agent(stub, tmp_path)

    assert result.status == RunStatus.COMPLETED, result.error
    assert result.answer == "All good."
    [llm] = of_type(events, "llm_called")
    assert llm.payload.retry_count == 1
    assert len(stub.requests) == 2


def test_500_storm_gives_up_after_max_retries(stub: StubOpenAI) -> None:
    stub.fallback = HttpError(500, "storm")
    exc = call_error(stub, max_retries=3)

    assert exc.transient is True
    assert exc.retry_count == 3
    assert exc.error_type == "InternalServerError"
    assert "failed after 3 retries" in str(exc)
    assert len(stub.requests) == 4


def test_agent_fails_after_a_500_storm(stub: StubOpenAI, tmp_path: Path) -> None:
    stub.fallback = HttpError(500, "storm")
    _, result, events = run_agent(stub, tmp_path, max_retries=2)

    assert result.status == RunStatus.FAILED
    last = events[-1]
    assert last.type == "error"
    assert "failed after 2 retries" in last.payload.message
    assert last.payload.retry_count == 2
    assert last.payload.error_type == "InternalServerError"
    assert result.error is not None and "after 2 retries" in result.error
    assert of_type(events, "llm_called") == []
    assert len(stub.requests) == 3


def test_a_silent_server_is_cut_off_at_the_deadline_and_not_retried(stub: StubOpenAI) -> None:
    """`timeout` is the deadline of the whole call (tests/test_bounded_waits.py): a server that says nothing for that
    long has used it up, and a retry would wait as long again."""
    stub.push(Delay(2.0, then=Reply(content="too late")), Reply(content="on time"))
    exc = call_error(stub, timeout=0.3)

    assert exc.transient is False and exc.retry_count == 0 and exc.error_type == "ModelTimeout"
    assert "failed (not retried): ModelTimeout: no complete reply within 0.3 s" in str(exc)
    assert len(stub.requests) == 1


def test_a_retry_after_a_quick_failure_has_a_deadline_of_its_own(stub: StubOpenAI) -> None:
    stub.push(HttpError(503), Delay(2.0, then=Reply(content="too late")))
    exc = call_error(stub, timeout=0.3, max_retries=1)

    assert exc.transient is False
    assert exc.retry_count == 1
    assert exc.error_type == "ModelTimeout"
    assert "failed after 1 retry: ModelTimeout:" in str(exc)
    assert len(stub.requests) == 2


# ------------------------------------------------------------------------------------------- permanent errors


@pytest.mark.parametrize("status,error_type", [(400, "BadRequestError"), (401, "AuthenticationError")])
def test_non_transient_error_is_not_retried(stub: StubOpenAI, status: int, error_type: str) -> None:
    stub.push(HttpError(status, "no"), Reply(content="never reached"))
    exc = call_error(stub)

    assert exc.transient is False
    assert exc.retry_count == 0
    assert exc.error_type == error_type
    assert "(not retried)" in str(exc)
    assert len(stub.requests) == 1


@pytest.mark.parametrize("status", [400, 401])
def test_agent_fails_at_once_on_a_non_transient_error(stub: StubOpenAI, tmp_path: Path, status: int) -> None:
    stub.push(HttpError(status, "rejected"), Reply(content="never reached"))
    _, result, events = run_agent(stub, tmp_path)

    assert result.status == RunStatus.FAILED
    assert events[-1].type == "error"
    assert events[-1].payload.retry_count == 0
    assert "(not retried)" in events[-1].payload.message
    assert len(stub.requests) == 1


@pytest.mark.parametrize("status,error_type", [(400, "BadRequestError"), (401, "AuthenticationError"),
                                               (429, "RateLimitError")])
def test_an_error_keeps_the_providers_message_and_drops_litellms_wrapping(stub: StubOpenAI, status: int,
                                                                          error_type: str) -> None:
    """litellm wraps a provider's message as `litellm.X: X: OpenAIException - message`: the class named once, then
    the message, so a line cut for width still says what is wrong."""
    stub.fallback = HttpError(status, "the model 'stub-model' does not exist or you do not have access to it")
    exc = call_error(stub, max_retries=1)

    assert exc.error_type == error_type
    assert str(exc).endswith(f": {error_type}: the model 'stub-model' does not exist or you do not have access to it")
    assert "litellm." not in str(exc) and "Exception - " not in str(exc) and str(exc).count(error_type) == 1


# ------------------------------------------------------------------------------------------- a missing key


@pytest.fixture
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_BASE"):
        monkeypatch.delenv(name, raising=False)


def test_a_missing_key_is_an_authentication_error_at_once_naming_the_variable(stub: StubOpenAI, no_key: None) -> None:
    """No OPENAI_API_KEY: litellm reports the openai client's refusal as an InternalServerError, which was retried
    4 times (12.8 s) and then said nothing of the key. Now: not retried, AuthenticationError, the variable named."""
    exc = call_error(stub, api_key=None, max_retries=4)

    assert (exc.error_type, exc.retry_count, exc.transient) == ("AuthenticationError", 0, False)
    assert str(exc) == ("model call to openai/stub-model failed (not retried): AuthenticationError: no API key: "
                        "OPENAI_API_KEY is not set; set it where the kernel (or `nbagent run`) starts, or pass "
                        "Agent(api_key=...)")
    assert stub.requests == []  # refused before any request


@pytest.mark.parametrize("model,variable", [("openai/gpt-4o-mini", "OPENAI_API_KEY"),
                                            ("anthropic/claude-3-5-haiku-latest", "ANTHROPIC_API_KEY")])
def test_an_agent_without_its_key_fails_at_once_with_no_server(tmp_path: Path, no_key: None, model: str,
                                                               variable: str) -> None:
    """Through the Python API, with no server at all (nothing listens, nothing is sent)."""
    agent = Agent(model, tools=[read_file], decider=PolicyDecider("all"), store=tmp_path / "nb.ipynb",
                  retry_base=0.01, retry_cap=0.05, timeout=1.0)
    try:
        result = asyncio.run(agent.run("What is in data.csv?"))
        events = agent.store.run_events(result.run_id)
    finally:
        agent.store.close()

    assert result.status == RunStatus.FAILED
    assert result.error is not None and f"AuthenticationError: no API key: {variable} is not set" in result.error
    assert (events[-1].type, events[-1].payload.retry_count) == ("error", 0)
    assert events[-1].payload.error_type == "AuthenticationError"


def test_a_key_passed_to_the_agent_needs_no_variable(stub: StubOpenAI, tmp_path: Path, no_key: None) -> None:
    stub.push(Reply(content="All good."))
    _, result, _ = run_agent(stub, tmp_path)

    assert result.status == RunStatus.COMPLETED, result.error
    assert stub.requests[0].headers["authorization"] == f"Bearer {API_KEY}"


# ------------------------------------------------------------------------------------------- secrets


def _store_bytes(agent: Agent) -> dict[str, bytes]:
    files = {str(p): p.read_bytes() for p in sorted(Path(agent.store.path).rglob("*")) if p.is_file()}
    assert files, "the store wrote no files"
    return files


def test_api_key_reaches_the_server_but_never_the_store(stub: StubOpenAI, tmp_path: Path) -> None:
    stub.push(
        Reply(content="Reading.", tool_calls=[tool_call("read_file", {"path": "data.csv"})]),
        Reply(content="Done reading."),
    )
    agent, result, _ = run_agent(stub, tmp_path, stream=True)

    assert result.status == RunStatus.COMPLETED, result.error
    assert [r.headers["authorization"] for r in stub.requests] == [f"Bearer {API_KEY}"] * 2
    leaks = [name for name, data in _store_bytes(agent).items() if API_KEY.encode() in data]
    assert leaks == []


def test_model_error_message_does_not_carry_an_echoed_api_key(stub: StubOpenAI) -> None:
    key = "local-vllm-token-0123456789"  # not shaped like a known credential: only the known value can catch it
    stub.push(HttpError(401, f"Incorrect API key provided: {key}."))
    exc = call_error(stub, api_key=key)

    assert stub.requests[0].headers["authorization"] == f"Bearer {key}"
    assert key not in str(exc)
    assert "Incorrect API key provided: [REDACTED]" in str(exc)


def test_api_key_echoed_in_a_provider_error_never_reaches_the_store(stub: StubOpenAI, tmp_path: Path) -> None:
    # some OpenAI-compatible servers echo the key they rejected in the error message
    stub.push(HttpError(401, f"Incorrect API key provided: {API_KEY}."))
    agent, result, events = run_agent(stub, tmp_path)

    assert result.status == RunStatus.FAILED
    assert stub.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert "Incorrect API key provided" in events[-1].payload.message
    leaks = [name for name, data in _store_bytes(agent).items() if API_KEY.encode() in data]
    assert leaks == []
    assert API_KEY not in (result.error or "")


FRESH_CALL = """
import asyncio, os, sys
sys.path.insert(0, {tests!r})
from stub_openai import Reply, StubOpenAI
from nbagent.models.llm import ModelSettings, complete
os.environ["MAX_BASE64_LENGTH_FOR_LOGGING"] = "7"  # the person's own value
before = dict(os.environ)
tools = [{{"type": "function", "function": {{"name": "f", "description": "d",
                                            "parameters": {{"type": "object", "properties": {{}}}}}}}}]
with StubOpenAI() as stub:
    stub.fallback = Reply(content="hi")
    settings = ModelSettings(model="openai/gpt-4o-mini", api_base=stub.base_url, api_key="sk-x", max_retries=0)
    reply = asyncio.run(complete(settings, [{{"role": "user", "content": "go"}}], tools))
    body = stub.completion_requests[0].body
import litellm.constants
print(reply.content, dict(os.environ) == before, litellm.constants.MAX_BASE64_LENGTH_FOR_LOGGING,
      sorted(m for m in ("mcp.server", "starlette", "uvicorn") if m in sys.modules), "drop_params" in body,
      litellm.drop_params)
"""


@pytest.mark.slow
def test_a_first_call_with_tools_loads_no_mcp_gateway_and_leaves_the_environment_as_it_was(tmp_path: Path) -> None:
    """litellm's MCP gateway (mcp's server, starlette, uvicorn) is never imported for nbagent's tools; the
    variables litellm reads at import are set only for the import (a person's own value kept), and litellm's
    global `drop_params` is left alone (nbagent passes it per call, and it is not sent to the provider)."""
    import subprocess
    import sys

    code = FRESH_CALL.format(tests=str(Path(__file__).resolve().parent))
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["hi", "True", "7", "[]", "False", "False"], out.stdout


# ------------------------------------------------------------------------------------------- the stream's end


def _streamed(stub: StubOpenAI, rest: Any) -> Any:
    """One streamed call through `stream.call`, as the model process makes it (`rest`: what takes the stream's
    end)."""
    from nbagent.models.library import import_litellm
    from nbagent.models.stream import call, response_dict

    kwargs = {"model": MODEL, "messages": MESSAGES, "tools": TOOLS, "api_base": stub.base_url, "api_key": API_KEY,
              "stream": True, "stream_options": {"include_usage": True}, "num_retries": 0}

    async def go() -> Any:
        tails: list[Any] = []
        tokens: list[str] = []
        try:
            reply = await call(import_litellm(), dict(kwargs), MESSAGES, tokens.append,
                               rest=tails.append if rest else None)
        finally:
            for tail in tails:  # litellm's end of the stream, after the answer: no text of the reply is left in it
                assert not [c for c in [_ async for _ in tail] if c.choices and c.choices[0].delta.content]
        return response_dict(reply), tokens, len(tails)

    return asyncio.run(go())


@pytest.mark.parametrize("reply", [
    Reply(content="The south sold most.", usage={"prompt_tokens": 31, "completion_tokens": 6, "total_tokens": 37}),
    Reply(content="Reading it.", tool_calls=[tool_call("read_file", {"path": "data.csv"}, id="c1")]),
    Reply(tool_calls=[tool_call("read_file", {"path": "a.csv"}, id="c1"),
                      tool_call("read_file", {"path": "b.csv"}, id="c2")]),
], ids=["text", "text-and-call", "two-calls"])
def test_a_stream_handed_over_before_litellms_end_gives_the_same_answer(stub: StubOpenAI, reply: Reply) -> None:
    stub.push(reply, reply)
    early, tokens_early, tails = _streamed(stub, rest=True)
    whole, tokens_whole, none = _streamed(stub, rest=False)
    assert (tails, none) == (1, 0)  # the end was handed over once the finish reason and the usage were in
    assert tokens_early == tokens_whole
    for d in (early, whole):
        d.pop("id", None), d.pop("created", None)
    assert early["choices"] == whole["choices"] and early["usage"] == whole["usage"]
    assert early["choices"][0]["finish_reason"] == ("tool_calls" if reply.tool_calls else "stop")


def test_a_stream_cut_before_its_finish_is_never_handed_over_as_whole(stub: StubOpenAI) -> None:
    from nbagent.models.stream import IncompleteStream

    stub.push(Reply(content="one two three four", cut_after=2, cut="clean"))
    with pytest.raises(IncompleteStream):
        _streamed(stub, rest=True)
