"""Prompt caching: what a request marks for the provider's cache.

OpenAI, DeepSeek, Gemini and others cache an unchanged prefix of a request by themselves; all nbagent does for
them is keep that prefix byte-identical from call to call (the system prompt, the tools, the settled history:
compaction.py changes them only when it records a compaction). Anthropic's models (also through Bedrock and
Vertex) cache only up to the blocks marked `cache_control`: here the system prompt, the end of the settled
history and the newest message are marked, three of the four breakpoints Anthropic allows. The marks are added
to what is sent, never to what is recorded, so the log and a replay are the same whatever the provider.
"""

from __future__ import annotations

from typing import Any

_MARKED_PROVIDERS = ("anthropic/", "bedrock/anthropic.", "bedrock/us.anthropic.", "bedrock/eu.anthropic.",
                     "vertex_ai/claude")


def marks_cache(model: str) -> bool:
    """Whether `model` caches only what is marked (Anthropic's models)."""
    return model.startswith(_MARKED_PROVIDERS) or model.startswith("claude-")


def cache_marked(model: str, messages: list[dict[str, Any]], settled: int) -> list[dict[str, Any]]:
    """`messages` with cache marks for a model that needs them (else as they are); `settled`: how many of them
    are the system prompt and the history, which stay the same for the rest of the run."""
    if not marks_cache(model) or not messages:
        return messages
    out = list(messages)
    for i in sorted({0, settled - 1, len(out) - 1}):
        if 0 <= i < len(out):
            out[i] = _marked(out[i])
    return out


def _marked(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    mark = {"type": "ephemeral"}
    if isinstance(content, str) and content:
        return {**message, "content": [{"type": "text", "text": content, "cache_control": mark}]}
    if isinstance(content, list) and content and isinstance(content[-1], dict):
        return {**message, "content": [*content[:-1], {**content[-1], "cache_control": mark}]}
    return message  # an assistant turn of tool calls only: nothing to mark
