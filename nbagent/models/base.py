"""Offline models: Python objects that answer chat requests, served to litellm as the `nbagent` provider.

They go through litellm like any provider (`litellm.acompletion(model="nbagent/scripted", ...)`), so the
code path a run takes offline is the one it takes with a real model: the same request building, response
parsing, streaming, usage and cost accounting.

A model's reply is an OpenAI-style assistant message as a plain dict:
    {"content": "text" | None, "tool_calls": [{"id": ..., "name": ..., "arguments": dict | str}], "usage": {...}}
`arguments` may be a string on purpose: that is how a script reproduces a model emitting invalid JSON.
A reply may instead be {"error": {"type": "rate_limit" | "server" | "timeout" | "connection" | "bad_request",
"message": ...}} to reproduce a provider failure.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class ModelScriptError(Exception):
    """A local model cannot answer (script exhausted, bad script, replay diverged): not transient."""


class LocalModel(ABC):
    name: str = "local"

    @abstractmethod
    async def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], turn: int) -> dict[str, Any]:
        """The assistant message for this request. `turn` counts this run tree's earlier model calls."""


def estimate_tokens(obj: Any) -> int:
    """A rough token count (4 characters a token) for models that have no tokenizer."""
    import json

    text = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, default=str)
    return max(1, len(text) // 4)
