"""Builders for hand-written event sequences."""

from __future__ import annotations

from typing import Any

from nbagent.events import model as E
from nbagent.store import Store


def response(content: str | None = None, calls: list[tuple[str, str, dict[str, Any]]] | None = None) -> dict:
    """An OpenAI-format chat completion as litellm returns it."""
    import json

    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for cid, name, args in calls
        ]
    return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def llm(content: str | None = None, calls=None, tokens=(10, 5), cost: float | None = 0.001) -> E.LlmCalled:
    return E.LlmCalled(
        model="scripted/test",
        response=response(content, calls),
        usage=E.Usage(prompt_tokens=tokens[0], completion_tokens=tokens[1], total_tokens=sum(tokens)),
        cost=cost,
        latency_ms=1.0,
    )


def new_run(store: Store, prompt: str = "do it", **kw: Any) -> str:
    session = store.session(notebook="analysis.ipynb")
    return store.create_run(session.id, prompt, model="scripted/test", **kw).id
