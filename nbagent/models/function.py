"""A model that is a Python function: for tests and experiments (like pydantic-ai's FunctionModel).

    def model(messages, tools):          # or async def; may also take `turn`
        if messages[-1]["role"] == "user":
            return {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.csv"}}]}
        return "The answer."                # a plain string is the final text

Registered with the `nbagent` litellm provider, so calls go through litellm like any other model.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from nbagent.models.base import LocalModel, ModelScriptError


class FunctionModel(LocalModel):
    name = "function"

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self._wants_turn = "turn" in inspect.signature(fn).parameters

    async def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], turn: int) -> dict[str, Any]:
        result = self.fn(messages, tools, turn=turn) if self._wants_turn else self.fn(messages, tools)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, str):
            return {"content": result, "tool_calls": []}
        if not isinstance(result, dict):
            # the function's own mistake, the same on every try: not retried (a TypeError reached litellm as a
            # connection error, retried with backoff four times)
            raise ModelScriptError(f"a function model must return a str or a dict, not {type(result).__name__}")
        calls = [
            {"id": c.get("id") or f"call_{turn}_{i}", "name": c["name"], "arguments": c.get("arguments", {})}
            for i, c in enumerate(result.get("tool_calls") or [])
        ]
        return {**result, "tool_calls": calls}
