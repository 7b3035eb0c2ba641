"""The `nbagent` litellm provider: routes `nbagent/<name>` calls to local models.

litellm's `CustomLLM` interface is the documented way to add a provider; registering it in
`litellm.custom_provider_map` makes `litellm.acompletion(model="nbagent/scripted", ...)` work with tools,
streaming and cost tracking (prices are registered too, so runs show a cost, as with a paid model).

Which local model answers comes from `metadata["nbagent_model"]`, a key into a process-wide registry, so
several agents with different scripts can run side by side.
"""

from __future__ import annotations

import json
import uuid
import weakref
from collections.abc import AsyncIterator
from typing import Any

from .base import LocalModel, ModelScriptError, estimate_tokens
from .replay import ReplayModel

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
    kw = {"llm_provider": PROVIDER, "model": model}
    if kind == "rate_limit":
        return litellm.RateLimitError(msg, **kw)
    if kind == "timeout":
        return litellm.Timeout(msg, **kw)
    if kind == "connection":
        return litellm.APIConnectionError(msg, **kw)
    if kind == "bad_request":
        return litellm.BadRequestError(msg, **kw)
    return litellm.InternalServerError(msg, **kw)


def _tool_calls(reply: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"id": c["id"], "type": "function", "function": {
            "name": c["name"],
            "arguments": c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"]),
        }}
        for c in reply.get("tool_calls") or []
    ]


def _prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """About 4 characters a token, from the text alone (serialising the whole conversation cost ms a call)."""
    chars = 0
    for m in messages:
        content = m.get("content")
        chars += len(content) if isinstance(content, str) else 0
        for call in m.get("tool_calls") or ():
            chars += len(str((call.get("function") or {}).get("arguments", ""))) + 20
    return max(1, chars // 4 + 4 * len(messages))


def _usage(reply: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, int]:
    given = reply.get("usage") or {}
    prompt = int(given.get("prompt_tokens", _prompt_tokens(messages)))
    completion = int(given.get("completion_tokens",
                               estimate_tokens([reply.get("content") or "", _tool_calls(reply)])))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def ensure_registered() -> None:
    """Register the provider and its prices with litellm (idempotent; imports litellm)."""
    global _registered
    if _registered:
        return
    from ..llm import import_litellm

    litellm = import_litellm()
    from litellm import CustomLLM, ModelResponse

    class NbagentProvider(CustomLLM):
        async def _reply(self, model: str, messages: list[dict[str, Any]], optional_params: dict[str, Any],
                         litellm_params: dict[str, Any] | None) -> dict[str, Any]:
            meta = (litellm_params or {}).get("metadata") or {}
            local = _registry.get(meta.get("nbagent_model", ""))
            if local is None:
                raise ModelScriptError(
                    f"model 'nbagent/{model}' is an offline model and needs its script or function: use "
                    "Agent(model='nbagent/scripted', script=PATH) or %%agent --script PATH"
                )
            tools = optional_params.get("tools") or []
            turn = int(meta.get("nbagent_turn", 0))
            if isinstance(local, ReplayModel):
                reply = await local.reply(messages, tools, turn, fingerprint=meta.get("nbagent_fingerprint"),
                                          prefix_len=int(meta.get("nbagent_prefix_len", 0)),
                                          prefix_sha=meta.get("nbagent_prefix_sha"))
            else:
                reply = await local.reply(messages, tools, turn)
            if reply.get("error") is not None:
                raise _error(reply["error"], f"{PROVIDER}/{model}")
            return reply

        async def acompletion(self, model: str, messages: list[Any], api_base: str, custom_prompt_dict: dict,
                              model_response: Any, print_verbose: Any, encoding: Any, api_key: Any,
                              logging_obj: Any, optional_params: dict, acompletion: Any = None,
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

        async def astreaming(self, model: str, messages: list[Any], api_base: str, custom_prompt_dict: dict,
                             model_response: Any, print_verbose: Any, encoding: Any, api_key: Any,
                             logging_obj: Any, optional_params: dict, acompletion: Any = None,
                             litellm_params: Any = None, logger_fn: Any = None, headers: Any = None,
                             timeout: Any = None, client: Any = None) -> AsyncIterator[Any]:
            reply = await self._reply(model, messages, optional_params, litellm_params)
            text = reply.get("content") or ""
            pieces = [w + " " for w in text.split(" ")] if text else []
            if pieces:
                pieces[-1] = pieces[-1][:-1]
            for piece in pieces:
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
