"""The model's tool calls as nbagent reads them: each call's id, name and arguments, or why they cannot be used.

A reply's arguments are data from the model: text that may not be JSON, JSON that is not an object, nesting
thousands deep, surrogates, NaN. Each becomes a `parse_error` the model reads back (runtime/calls.py), never an
exception, so no reply can stop a run by its shape.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

__all__ = ["MAX_ARGUMENT_DEPTH", "ToolCallRequest", "parse_tool_calls"]


class ToolCallRequest(BaseModel):
    id: str
    name: str
    arguments_raw: str
    arguments: dict[str, Any] | None = None
    parse_error: str | None = None


def parse_tool_calls(message: dict[str, Any]) -> list[ToolCallRequest]:
    out = []
    for i, c in enumerate(message.get("tool_calls") or []):
        fn = c.get("function") or {}
        raw = fn.get("arguments")
        raw_s = raw if isinstance(raw, str) else json.dumps(raw if raw is not None else {})
        req = ToolCallRequest(id=c.get("id") or f"call_{i}", name=fn.get("name") or "", arguments_raw=raw_s)
        try:
            parsed = json.loads(raw_s) if raw_s.strip() else {}
        except ValueError as exc:
            req.parse_error = (f"arguments are not valid JSON ({getattr(exc, 'msg', exc)} at position "
                               f"{getattr(exc, 'pos', '?')}); send them as a JSON object")
        except RecursionError:
            req.parse_error = "arguments are nested too deeply to read; send a flat JSON object"
        else:
            if not isinstance(parsed, dict):
                req.parse_error = f"arguments must be a JSON object, got {type(parsed).__name__}"
            else:
                req.parse_error = _unusable(parsed)
                if req.parse_error is None:
                    req.arguments = parsed
        out.append(req)
    return out


MAX_ARGUMENT_DEPTH = 64


def _unusable(value: Any) -> str | None:
    """Why parsed arguments cannot be used as they are (valid JSON, but no tool could take them), or None.

    Iterative, so a reply nested thousands deep is an answer, not a RecursionError.
    """
    todo: list[tuple[Any, int]] = [(value, 0)]
    while todo:
        v, depth = todo.pop()
        if depth > MAX_ARGUMENT_DEPTH:
            return f"arguments are nested more than {MAX_ARGUMENT_DEPTH} levels deep; send a flatter JSON object"
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as exc:
                return (f"arguments contain an unpaired UTF-16 surrogate (\\u{ord(v[exc.start]):04x}), which is not "
                        "text; send the characters themselves")
        elif isinstance(v, dict):
            todo.extend((x, depth + 1) for kv in v.items() for x in kv)
        elif isinstance(v, list):
            todo.extend((x, depth + 1) for x in v)
        elif isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
            return "arguments contain NaN or Infinity, which JSON does not allow; send numbers or strings"
    return None
