"""The offline models' provider: `nbagent/<name>` calls answered by local models, directly or through litellm.

`nbagent.models.llm.complete` calls `local_completion` here for the offline models: no litellm import (2.5 s and
~190 MB) and none of its per-call work (it walks the whole conversation on every call). What it returns is what
litellm returned with our provider, field by field (response dict, usage, nominal cost, streamed pieces, and the
exceptions with litellm's names, status codes and first lines), so records are the same whichever way a call
went; tests/test_offline_path.py compares the two. `NBAGENT_LOCAL_VIA_LITELLM=1` sends them through litellm.

Through litellm: its `CustomLLM` interface is the documented way to add a provider; registering it in
`litellm.custom_provider_map` makes `litellm.acompletion(model="nbagent/scripted", ...)` work with tools,
streaming and cost tracking (prices are registered too, so runs show a cost, as with a paid model).

Which local model answers comes from `metadata["nbagent_model"]`, a key into a process-wide registry, so
several agents with different scripts can run side by side.
"""

from __future__ import annotations

import json
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any

from nbagent.models.base import LocalModel, ModelScriptError, estimate_tokens
from nbagent.models.replay import ReplayModel

PROVIDER = "nbagent"
# Nominal prices for the offline models, so cost tracking runs end to end (USD per token).
PRICES = {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}
LOCAL_NAMES = ("scripted", "function", "replay")

_registry: weakref.WeakValueDictionary[str, LocalModel] = weakref.WeakValueDictionary()
_registered = False


def register_local(model: LocalModel) -> str:
    key = uuid.uuid4().hex
    _registry[key] = model
    return key


def _error(spec: dict[str, Any], model: str) -> Exception:
    import litellm

    kind = spec.get("type", "server")
    msg = spec.get("message") or f"scripted {kind} error"
    if kind == "rate_limit":
        return litellm.RateLimitError(msg, llm_provider=PROVIDER, model=model)
    if kind == "timeout":
        return litellm.Timeout(msg, llm_provider=PROVIDER, model=model)
    if kind == "connection":
        return litellm.APIConnectionError(msg, llm_provider=PROVIDER, model=model)
    if kind == "bad_request":
        return litellm.BadRequestError(msg, llm_provider=PROVIDER, model=model)
    return litellm.InternalServerError(msg, llm_provider=PROVIDER, model=model)


def _tool_calls(reply: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"id": c["id"], "type": "function", "function": {
            "name": c["name"],
            "arguments": c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"]),
        }}
        for c in reply.get("tool_calls") or []
    ]


def _message_chars(m: dict[str, Any]) -> int:
    content = m.get("content")
    chars = len(content) if isinstance(content, str) else 0
    for call in m.get("tool_calls") or ():
        chars += len(str((call.get("function") or {}).get("arguments", ""))) + 20
    return chars


class _PromptChars:
    """The characters of a request's messages, counted incrementally: O(new messages) per call.

    A run's requests grow by appending, and the runtime passes the same message objects every time (its run
    state's turns). So the count up to a message object seen at the same position before is reused: the last
    message of each request is remembered (a strong reference, so its id is not reused), and the next request
    looks for one of those among its last few messages. A request that shares none (the first, another run, a
    copy made by litellm) is counted in full; the result is always the full count's.
    """

    LOOK_BACK = 16
    KEEP = 64

    def __init__(self) -> None:
        # id(message) -> (message, its index, chars up to it, the first message's content)
        self._seen: OrderedDict[int, tuple[dict[str, Any], int, int, Any]] = OrderedDict()

    def __call__(self, messages: list[dict[str, Any]]) -> int:
        n = len(messages)
        start, chars = 0, 0
        first = messages[0].get("content") if n else None
        for i in range(n - 1, max(-1, n - 1 - self.LOOK_BACK), -1):
            hit = self._seen.get(id(messages[i]))
            # the same message object at the same place, after the same first message (the system prompt): a
            # request continuing the one that was counted
            if hit is not None and hit[0] is messages[i] and hit[1] == i and hit[3] == first:
                start, chars = i + 1, hit[2]
                break
        for m in messages[start:]:
            chars += _message_chars(m)
        if n:
            self._seen[id(messages[-1])] = (messages[-1], n - 1, chars, first)
            self._seen.move_to_end(id(messages[-1]))
            while len(self._seen) > self.KEEP:
                self._seen.popitem(last=False)
        return chars


_prompt_chars = _PromptChars()


def _prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """About 4 characters a token, from the text alone (serialising the whole conversation cost ms a call)."""
    return max(1, _prompt_chars(messages) // 4 + 4 * len(messages))


def _usage(reply: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, int]:
    given = reply.get("usage") or {}
    prompt = int(given.get("prompt_tokens", _prompt_tokens(messages)))
    completion = int(given.get("completion_tokens",
                               estimate_tokens([reply.get("content") or "", _tool_calls(reply)])))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


# ------------------------------------------------------------------------------------------- the direct path
# litellm's exceptions as our provider's callers saw them: class name, status code and message (litellm prefixes
# "litellm.<Class>: "). `nbagent.models.llm.is_transient` and the recorded error text depend on exactly these.


class LocalProviderError(Exception):
    status_code = 500

    def __init__(self, message: str, original_exception: BaseException | None = None) -> None:
        self.message = f"litellm.{type(self).__name__}: {message}"
        self.original_exception = original_exception
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


class RateLimitError(LocalProviderError):
    status_code = 429


class Timeout(LocalProviderError):
    status_code = 408


class APIConnectionError(LocalProviderError):
    status_code = 500


class BadRequestError(LocalProviderError):
    status_code = 400


class InternalServerError(LocalProviderError):
    status_code = 500


class MidStreamFallbackError(LocalProviderError):
    """What litellm's stream wrapper raises for a retriable error in a stream (all but 4xx other than 429)."""

    def __init__(self, original: LocalProviderError) -> None:
        super().__init__(str(original), original)
        self.status_code = original.status_code

    def __str__(self) -> str:
        return f"{self.message} Original exception: {type(self.original_exception).__name__}: {self.original_exception}"


_ERRORS: dict[str, type[LocalProviderError]] = {
    "rate_limit": RateLimitError, "timeout": Timeout, "connection": APIConnectionError,
    "bad_request": BadRequestError,
}


def _local_error(spec: dict[str, Any]) -> LocalProviderError:
    kind = spec.get("type", "server")
    return _ERRORS.get(kind, InternalServerError)(spec.get("message") or f"scripted {kind} error")


async def _local_reply(name: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                       meta: dict[str, Any]) -> dict[str, Any]:
    local = _registry.get(meta.get("nbagent_model", ""))
    if local is None:
        raise ModelScriptError(
            f"model 'nbagent/{name}' is an offline model and needs its script or function: use "
            "Agent(model='nbagent/scripted', script=PATH) or %%agent --script PATH"
        )
    turn = int(meta.get("nbagent_turn", 0))
    if isinstance(local, ReplayModel):
        return await local.reply(messages, tools, turn, fingerprint=meta.get("nbagent_fingerprint"),
                                 prefix_len=int(meta.get("nbagent_prefix_len", 0)),
                                 prefix_sha=meta.get("nbagent_prefix_sha"))
    return await local.reply(messages, tools, turn)


def _cost(usage: dict[str, int]) -> float:
    """litellm's completion_cost with the nominal PRICES registered (same float operations, same result)."""
    return usage["prompt_tokens"] * PRICES["input_cost_per_token"] + \
        usage["completion_tokens"] * PRICES["output_cost_per_token"]


def _pieces(text: str) -> list[str]:
    pieces = [w + " " for w in text.split(" ")] if text else []
    if pieces:
        pieces[-1] = pieces[-1][:-1]
    return pieces


async def local_completion(model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                           meta: dict[str, Any], on_token: Callable[[str], None] | None = None
                           ) -> tuple[dict[str, Any], float]:
    """One offline model call without litellm: (the response as `nbagent.models.llm` records it, its nominal cost).

    The response is what `stream.response_dict` made of litellm's `ModelResponse` for our provider: without a
    stream `model` is "nbagent/<name>" and a missing text is left out; streamed (`on_token`), the text goes out
    in the same pieces, and the rebuilt response has `model` "<name>", text "" when there is none, the cost in
    `usage`, and for a text-only reply the completion token details litellm's stream builder adds.
    """
    name = model.split("/", 1)[1]
    stream = on_token is not None
    try:
        reply = await _local_reply(name, messages, tools, meta)
        if reply.get("error") is not None:
            raise _local_error(reply["error"])
    except (ModelScriptError, LocalProviderError) as exc:
        if stream and isinstance(exc, LocalProviderError) and (exc.status_code == 429 or
                                                               not 400 <= exc.status_code < 500):
            raise MidStreamFallbackError(exc) from exc
        raise
    except Exception as exc:  # litellm turned any other failure of a provider into an APIConnectionError
        error = APIConnectionError(f"{exc}\n")
        if stream:  # ... which its stream wrapper wraps again
            raise MidStreamFallbackError(error) from exc
        raise error from exc
    calls = _tool_calls(reply)
    usage: dict[str, Any] = {**_usage(reply, messages), "completion_tokens_details": None,
                             "prompt_tokens_details": None}
    cost = _cost(usage)
    content = reply.get("content")
    if stream:
        assert on_token is not None
        for piece in _pieces(content or ""):
            if piece:
                on_token(piece)
        content = content or ""
        usage["cost"] = cost
        if not calls:
            usage["completion_tokens_details"] = {
                "accepted_prediction_tokens": None, "audio_tokens": None, "image_tokens": None,
                "reasoning_tokens": 0, "rejected_prediction_tokens": None,
                "text_tokens": usage["completion_tokens"], "video_tokens": None}
    message: dict[str, Any] = {"role": "assistant"}
    if content is not None:
        message["content"] = content
    if calls:
        message["tool_calls"] = calls
    response = {
        "id": f"chatcmpl-{uuid.uuid4()}", "model": name if stream else model, "created": int(time.time()),
        "object": "chat.completion", "system_fingerprint": None, "usage": usage,
        "choices": [{"index": 0, "finish_reason": "tool_calls" if calls else "stop", "message": message}],
    }
    return response, cost


def ensure_registered() -> None:
    """Register the provider and its prices with litellm (idempotent; imports litellm)."""
    global _registered
    if _registered:
        return
    from nbagent.models.library import import_litellm

    import_litellm()  # sets the environment litellm reads when imported, and checks for `mcp`
    import litellm
    from litellm import CustomLLM, ModelResponse

    class NbagentProvider(CustomLLM):
        async def _reply(self, model: str, messages: list[dict[str, Any]], optional_params: dict[str, Any],
                         litellm_params: dict[str, Any] | None) -> dict[str, Any]:
            meta = (litellm_params or {}).get("metadata") or {}
            reply = await _local_reply(model, messages, optional_params.get("tools") or [], meta)
            if reply.get("error") is not None:
                raise _error(reply["error"], f"{PROVIDER}/{model}")
            return reply

        async def acompletion(self, model: str, messages: list[Any], api_base: str, custom_prompt_dict: dict[str, Any],
                              model_response: Any, print_verbose: Any, encoding: Any, api_key: Any,
                              logging_obj: Any, optional_params: dict[str, Any], acompletion: Any = None,
                              litellm_params: Any = None, logger_fn: Any = None, headers: Any = None,
                              timeout: Any = None, client: Any = None) -> Any:
            reply = await self._reply(model, messages, optional_params, litellm_params)
            calls = _tool_calls(reply)
            message = {"role": "assistant", "content": reply.get("content")}
            if calls:
                message["tool_calls"] = calls
            return ModelResponse(
                choices=[{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
                usage=_usage(reply, messages), model=f"{PROVIDER}/{model}",
            )

        # litellm annotates astreaming as a coroutine returning an iterator; it iterates what it returns
        async def astreaming(  # type: ignore[override]
                self, model: str, messages: list[Any], api_base: str, custom_prompt_dict: dict[str, Any],
                model_response: Any, print_verbose: Any, encoding: Any, api_key: Any,
                logging_obj: Any, optional_params: dict[str, Any], acompletion: Any = None,
                litellm_params: Any = None, logger_fn: Any = None, headers: Any = None,
                timeout: Any = None, client: Any = None) -> AsyncIterator[Any]:
            reply = await self._reply(model, messages, optional_params, litellm_params)
            for piece in _pieces(reply.get("content") or ""):
                yield {"text": piece, "is_finished": False, "finish_reason": None, "usage": None, "index": 0,
                       "tool_use": None}
            calls = _tool_calls(reply)
            for i, call in enumerate(calls):
                yield {"text": "", "is_finished": False, "finish_reason": None, "usage": None, "index": 0,
                       "tool_use": {**call, "index": i}}
            yield {"text": "", "is_finished": True, "finish_reason": "tool_calls" if calls else "stop",
                   "usage": _usage(reply, messages), "index": 0, "tool_use": None}

    handler = NbagentProvider()
    litellm.custom_provider_map = [
        *[p for p in (litellm.custom_provider_map or []) if p.get("provider") != PROVIDER],
        {"provider": PROVIDER, "custom_handler": handler},
    ]
    from litellm.utils import custom_llm_setup

    custom_llm_setup()
    import logging

    quiet = logging.getLogger("LiteLLM")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # it warns that our made-up prices have no cache-token prices
    litellm.register_model({
        f"{PROVIDER}/{name}": {**PRICES, "litellm_provider": PROVIDER, "mode": "chat", "max_tokens": 128_000,
                               "max_input_tokens": 128_000, "max_output_tokens": 16_000}
        for name in LOCAL_NAMES
    })
    quiet.setLevel(level)
    _registered = True
