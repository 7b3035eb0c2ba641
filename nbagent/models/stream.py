"""One litellm call: streamed or not, held to its deadline, a stream cut short failing as a dropped connection, and
the reply kept as the log records it (`response_dict`) with its cost. Made in this process or in the kernel's model
process alike (nbagent/models/process.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from nbagent.models.reply import ModelTimeout

__all__ = ["IncompleteStream", "call", "cost_of", "deadline", "response_dict"]


def response_dict(resp: Any) -> dict[str, Any]:
    data = resp.model_dump() if hasattr(resp, "model_dump") else dict(resp)
    keep = {k: data.get(k) for k in ("id", "model", "created", "object", "system_fingerprint", "usage")}
    keep["choices"] = [
        {"index": c.get("index", 0), "finish_reason": c.get("finish_reason"),
         "message": {k: v for k, v in (c.get("message") or {}).items()
                     if k in ("role", "content", "tool_calls", "reasoning_content") and v is not None}}
        for c in data.get("choices") or []
    ]
    plain: dict[str, Any] = json.loads(json.dumps(keep, default=str))
    return plain


@contextlib.asynccontextmanager
async def deadline(seconds: float, setting: str) -> AsyncIterator[None]:
    """The whole of a model call within `seconds`: past them it is cancelled (its stream closed, `call`; in the
    model process, cancelled there) and fails as a ModelTimeout naming the deadline and `setting`. A read's own
    timeout cannot do this: a server that sends a piece every second never makes one read wait long."""
    scope = asyncio.timeout(seconds)
    try:
        async with scope:
            yield
    except TimeoutError:
        if not scope.expired():
            raise  # a timeout of the call's own (litellm's, on a read): retried as before
        raise ModelTimeout(f"no complete reply within {seconds:g} s, the model call's deadline; a slower model "
                           f"needs a longer one: {setting}") from None


async def call(litellm: Any, kwargs: dict[str, Any], messages: list[dict[str, Any]],
                on_token: Callable[[str], None] | None,
                rest: Callable[[Any], object] | None = None) -> Any:
    """One litellm call, streamed when there is `on_token`. `rest` (a long-lived loop's: the model process's) is
    handed a stream whose reply is whole (finish reason and usage in), to read to its end after the answer."""
    if on_token is None:
        return await litellm.acompletion(**kwargs)
    stream = await litellm.acompletion(**kwargs)
    chunks = []
    finished = False
    try:
        async for chunk in stream:
            chunks.append(chunk)
            choice = chunk.choices[0] if chunk.choices else None
            if choice is not None and choice.delta.content:
                on_token(choice.delta.content)
            finished = finished or bool(choice is not None and choice.finish_reason)
            if rest is not None and finished and getattr(chunk, "usage", None) is not None:
                rest(stream)  # litellm's end of stream (its logging, ~1 ms) no longer delays the answer
                break
    except BaseException:  # cancelled (the deadline, an interrupt) or failed: the connection is closed now, not
        with contextlib.suppress(Exception):  # whenever the stream is collected, so the server stops sending
            await stream.aclose()
        raise
    if getattr(stream, "received_finish_reason", "unknown") is None:
        # the body ended without a finish chunk: litellm would invent finish_reason "stop" and pass a cut reply
        # off as complete, so this is treated as a dropped connection (and retried)
        raise IncompleteStream(f"the stream ended after {len(chunks)} chunk(s) without a finish reason")
    return litellm.stream_chunk_builder(chunks, messages=messages)


class IncompleteStream(ConnectionError):
    """A streamed reply that stopped before its end (transient: retried)."""


def cost_of(litellm: Any, resp: Any, model: str) -> float | None:
    hidden = getattr(resp, "_hidden_params", None) or {}
    cost = hidden.get("response_cost")
    if isinstance(cost, int | float):
        return float(cost)
    try:
        return float(litellm.completion_cost(completion_response=resp, model=model))
    except Exception:
        return None  # a model without a known price: reported as unknown, never as free
