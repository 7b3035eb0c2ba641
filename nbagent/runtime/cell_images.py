"""The images a cell the agent ran showed, sent to a model that takes images.

`run_cell` and `replace_cell` results describe each image, and name the ones a model could be sent in
`images_for_model` ({sha256, mime, about}: the bytes are in the store's blobs, never in the log's result). Before
each model call, for a model that takes images, every tool result naming such images is followed (after the block
of tool results it is in: tool results must follow their assistant message) by a user message holding them as
image parts, the newest MAX_SENT of the run's own messages; older images, and every image for a model that takes
none, stay described in the result. The messages in the state and in the log's `llm_called` stay as they were (the
request records `images_sent`: which images went with it).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

MAX_SENT = 4  # image parts added to one request
CELL_TOOLS = ("run_cell", "replace_cell")  # only their results name images: another tool's result (an MCP server's,
# a user tool's) that says `images_for_model` could name any blob of the store (old contents undo keeps)


def _tools_by_call(messages: list[dict[str, Any]]) -> dict[str, str]:
    """Each tool call id of the conversation -> the tool the assistant called (its own messages say which)."""
    out: dict[str, str] = {}
    for m in messages:
        for c in (m.get("tool_calls") or []) if m.get("role") == "assistant" else []:
            if isinstance(c, dict) and isinstance(c.get("id"), str):
                out[c["id"]] = str((c.get("function") or {}).get("name") or "")
    return out


def _named(message: dict[str, Any], tools: dict[str, str]) -> list[dict[str, Any]]:
    content = message.get("content")
    if message.get("role") != "tool" or not isinstance(content, str) or '"images_for_model"' not in content:
        return []
    if tools.get(str(message.get("tool_call_id"))) not in CELL_TOOLS:
        return []
    try:
        result = json.loads(content)
    except ValueError:
        return []
    images = result.get("images_for_model") if isinstance(result, dict) else None
    return [i for i in images if isinstance(i, dict) and isinstance(i.get("sha256"), str)] if isinstance(
        images, list) else []


def with_images(messages: list[dict[str, Any]], get: Callable[[str], bytes]) -> tuple[list[dict[str, Any]],
                                                                                      list[dict[str, Any]]]:
    """`messages` with the newest MAX_SENT images tool results name added as image parts; and what was sent."""
    tools = _tools_by_call(messages)
    wanted = [(i, image) for i, m in enumerate(messages) for image in _named(m, tools)]
    if not wanted:
        return messages, []
    chosen = wanted[-MAX_SENT:]
    by_block: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    sent: list[dict[str, Any]] = []
    for i, image in chosen:
        try:
            data = get(image["sha256"])
        except Exception:  # the blob is gone (another machine, cleaned): the description stands
            continue
        end = i
        while end + 1 < len(messages) and messages[end + 1].get("role") == "tool":
            end += 1
        url = f"data:{image.get('mime') or 'image/png'};base64," + base64.b64encode(data).decode()
        by_block.setdefault(end, []).append((str(messages[i].get("tool_call_id") or ""), {**image, "url": url}))
        sent.append({"call_id": messages[i].get("tool_call_id"), "sha256": image["sha256"]})
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        out.append(m)
        if i in by_block:
            parts: list[dict[str, Any]] = []
            for call_id, image in by_block[i]:
                parts.append({"type": "text", "text": f"The image tool call {call_id} showed ({image.get('about')}):"})
                parts.append({"type": "image_url", "image_url": {"url": image["url"]}})
            out.append({"role": "user", "content": parts})
    return out, sent


__all__ = ["MAX_SENT", "with_images"]
