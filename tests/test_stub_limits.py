"""The stub's context limit and prompt cache (tests/stub_openai.py, issue 28): it counts a request's tokens as OpenAI
does (the numbers OpenAI's cookbook got from the API), refuses a request over the limit with OpenAI's very answer
(which litellm, and so nbagent, knows as ContextWindowExceededError), reports cached tokens as OpenAI's automatic
prompt caching would, and a `Respond` behaviour answers from the request."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from stub_openai import (
    CACHE_MIN_TOKENS,
    CACHE_STEP,
    HttpError,
    Reply,
    Respond,
    StubOpenAI,
    count_input_tokens,
    encoding_name,
)

from nbagent.models.llm import complete
from nbagent.models.reply import ModelError, ModelSettings

# OpenAI cookbook, "How to count tokens with tiktoken": these messages are 124 prompt tokens for gpt-4o-mini and 129
# for gpt-4 as counted by the API; with the weather tool, 101 (gpt-4o-mini) and 105 (gpt-4)
COOKBOOK = [
    {"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon "
                                  "into plain English."},
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
    {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch "
                                                          "base on opportunities for increased leverage."},
    {"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to "
                                                               "do better."},
    {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client "
                                "deliverable."},
]
WEATHER_TOOLS = [{"type": "function", "function": {
    "name": "get_current_weather", "description": "Get the current weather in a given location",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
        "unit": {"type": "string", "description": "The unit of temperature to return",
                 "enum": ["celsius", "fahrenheit"]}},
        "required": ["location"]}}}]
WEATHER = [{"role": "system", "content": "You are a helpful assistant that can answer to questions about the weather."},
           {"role": "user", "content": "What's the weather like in San Francisco?"}]


def post(stub: StubOpenAI, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(f"{stub.base_url}/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def chat(text: str, *more: dict[str, Any], model: str = "gpt-4o-mini") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}, *more]}


def test_the_count_is_what_openais_api_counted_for_the_cookbooks_examples() -> None:
    assert encoding_name("gpt-4o-mini") == encoding_name("openai/gpt-4o") == "o200k_base"
    assert encoding_name("gpt-4") == encoding_name("gpt-3.5-turbo") == "cl100k_base"
    assert count_input_tokens({"model": "gpt-4o-mini", "messages": COOKBOOK}) == 124
    assert count_input_tokens({"model": "gpt-4", "messages": COOKBOOK}) == 129
    assert count_input_tokens({"model": "gpt-4o-mini", "messages": WEATHER, "tools": WEATHER_TOOLS}) == 101
    assert count_input_tokens({"model": "gpt-4", "messages": WEATHER, "tools": WEATHER_TOOLS}) == 105
    # an assistant's tool call and the tool's result count too: 3 + name + arguments, 3 + role + content
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "nb1_0", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.csv"}'}}]}
    result = {"role": "tool", "tool_call_id": "nb1_0", "content": "x,y\n1,2\n"}
    base = count_input_tokens(chat("hi"))
    assert count_input_tokens(chat("hi", call)) > base + 3 + 6
    assert count_input_tokens(chat("hi", call, result)) > count_input_tokens(chat("hi", call)) + 3


def test_over_the_limit_it_answers_as_openai_does_and_keeps_its_script() -> None:
    with StubOpenAI(max_input_tokens=100) as stub:
        stub.push(Reply(content="the scripted reply"))
        long = chat("word " * 200)
        status, body = post(stub, long)
        n = count_input_tokens(long)
        assert status == 400 and n > 100
        assert body == {"error": {
            "message": f"This model's maximum context length is 100 tokens. However, your messages resulted in {n} "
                       "tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}
        # the refusal took nothing from the queue: the next request that fits gets the scripted reply
        status, body = post(stub, chat("short"))
        assert status == 200 and body["choices"][0]["message"]["content"] == "the scripted reply"
        assert body["usage"]["prompt_tokens"] == count_input_tokens(chat("short"))
        assert [(r.input_tokens, r.refused) for r in stub.requests] == [(n, True), (body["usage"]["prompt_tokens"],
                                                                                    False)]
        assert stub.refusals == [stub.requests[0]] and stub.completions == 1
        # exactly at the limit is allowed
        at = count_input_tokens(chat("short"))
        with StubOpenAI(max_input_tokens=at) as edge:
            edge.fallback = Reply(content="ok")
            assert post(edge, chat("short"))[0] == 200


def test_prompt_caching_counts_the_shared_prefix_in_128_token_steps_from_1024() -> None:
    with StubOpenAI(cache=True) as stub:
        stub.fallback = Reply(content="ok")
        small = chat("tiny " * 100)
        first = chat("hello " * 1500)
        longer = chat("hello " * 1500, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"})
        for body in (small, small, first, first, longer):
            status, _ = post(stub, body)
            assert status == 200
        got = [(r.input_tokens, r.cached_tokens) for r in stub.requests]
        n_small, n_first, n_longer = (count_input_tokens(b) for b in (small, first, longer))
        assert n_small < CACHE_MIN_TOKENS < n_first
        steps = (n_first - CACHE_MIN_TOKENS) // CACHE_STEP
        # the same request again: all of it in 128-token steps; a longer one: what it shares (all but the priming)
        shared = CACHE_MIN_TOKENS + (n_first - 3 - CACHE_MIN_TOKENS) // CACHE_STEP * CACHE_STEP
        assert got == [(n_small, 0), (n_small, 0), (n_first, 0),
                       (n_first, CACHE_MIN_TOKENS + steps * CACHE_STEP), (n_longer, shared)]
        assert n_first == 1508 and shared == 1408  # "hello " * 1500 is 1,501 tokens: 3 + 1 + 1,501 + 3 around it
        # a request that differs early shares nothing
        status, body = post(stub, chat("bonjour " + "hello " * 1500))
        assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_litellm_and_nbagent_see_the_refusal_as_a_context_window_error_and_the_usage_as_counted() -> None:
    with StubOpenAI(max_input_tokens=1200, cache=True) as stub:
        stub.fallback = Reply(content="fine")
        settings = ModelSettings(model="openai/gpt-4o-mini", api_base=stub.base_url, api_key="sk-test-limits",
                                 retry_base=0.01)
        too_long = [{"role": "user", "content": "word " * 2000}]
        with pytest.raises(ModelError) as raised:
            asyncio.run(complete(settings, too_long, []))
        assert raised.value.error_type == "ContextWindowExceededError"
        assert not raised.value.transient and raised.value.retry_count == 0
        assert "maximum context length is 1200 tokens" in str(raised.value)
        assert len(stub.requests) == 1  # not retried

        import litellm

        with pytest.raises(litellm.ContextWindowExceededError):
            litellm.completion(model="openai/gpt-4o-mini", messages=too_long, api_base=stub.base_url,
                               api_key="sk-test-limits", max_retries=0)

        fits = [{"role": "user", "content": "hello " * 1100}]
        for stream in (False, True):
            reply = asyncio.run(complete(settings, fits, [], on_token=(lambda _t: None) if stream else None))
            assert reply.usage.prompt_tokens == count_input_tokens({"model": "gpt-4o-mini", "messages": fits})
            cached = reply.response["usage"]["prompt_tokens_details"]["cached_tokens"]
            assert cached == (0 if not stream else CACHE_MIN_TOKENS)  # the second time, its first 1,024 are cached
            assert reply.usage.completion_tokens == 1  # "fine"


def test_respond_answers_from_the_request() -> None:
    def model(body: dict[str, Any]) -> Reply | HttpError:
        text = body["messages"][-1]["content"]
        return HttpError(503, "busy") if text == "fail" else Reply(content=f"you said {len(text)} characters")

    with StubOpenAI() as stub:
        stub.push(Reply(content="scripted first"), Respond(model))
        stub.fallback = Respond(model)
        assert post(stub, chat("abc"))[1]["choices"][0]["message"]["content"] == "scripted first"
        assert post(stub, chat("abcd"))[1]["choices"][0]["message"]["content"] == "you said 4 characters"
        assert post(stub, chat("abcde"))[1]["choices"][0]["message"]["content"] == "you said 5 characters"
        assert post(stub, chat("fail"))[0] == 503
        assert post(stub, chat("x"))[1]["usage"] == {"prompt_tokens": 11, "completion_tokens": 7,
                                                     "total_tokens": 18}  # not counting: the old fixed usage
        assert all(r.input_tokens is None and not r.refused for r in stub.requests)
