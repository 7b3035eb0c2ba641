"""A server's answer as a tool result: text as is, structured content when given, images and audio as a
short summary the model is told about (never their bytes), an error result as a `ToolError`.
"""

from __future__ import annotations

import json
from typing import Any

from nbagent.tools.base import ToolError


def _summary(kind: str, mime: str | None, data: str | bytes | None) -> str:
    size = len(data or "") * 3 // 4 if isinstance(data, str) else len(data or b"")
    return f"[{kind} {mime or ''}, about {size:,} bytes: not shown to the model]".replace(" ,", ",")


def _part(part: Any) -> Any:
    """One content block as JSON-able data: text as is, images and audio as a short summary."""
    kind = getattr(part, "type", None)
    if kind == "text":
        return part.text
    if kind in ("image", "audio"):
        return _summary(kind, getattr(part, "mime_type", None), getattr(part, "data", None))
    if kind == "resource":
        res = part.resource
        text = getattr(res, "text", None)
        if text is not None:
            return {"resource": str(res.uri), "text": text}
        return {"resource": str(res.uri), "content": _summary("blob", getattr(res, "mime_type", None),
                                                              getattr(res, "blob", None))}
    if kind == "resource_link":
        return {"resource_link": str(part.uri), "name": getattr(part, "name", None)}
    try:
        return part.model_dump(mode="json", by_alias=True, exclude_none=True)
    except Exception:
        return repr(part)[:500]


def convert_result(server: str, tool: str, result: Any) -> Any:
    """An MCP CallToolResult as a tool result: the structured content when there is some, else the text (or a
    list of the parts when some are not text). An error result raises a ToolError with its text."""
    content = list(getattr(result, "content", None) or [])
    parts = [_part(p) for p in content]
    if getattr(result, "is_error", False):
        text = " ".join(p if isinstance(p, str) else json.dumps(p) for p in parts).strip() or "the tool failed"
        raise ToolError(f"MCP server {server!r}, tool {tool!r}: {text}")
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        return structured
    if all(isinstance(p, str) for p in parts):
        return "\n".join(parts)
    return parts
