"""Only run_cell's and replace_cell's results may send images to the model: another tool's result (an MCP server's,
a user tool's, a file the agent read) that names `images_for_model` never gets a blob of the store sent."""

from __future__ import annotations

import json
from typing import Any

from nbagent.runtime.cell_images import with_images

BLOB = b"\x89PNG\r\n\x1a\n old contents undo keeps"


def conversation(tool: str) -> list[dict[str, Any]]:
    named = {"images_for_model": [{"sha256": "ab" * 32, "mime": "image/png", "about": "a figure"}], "ran": True}
    return [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "nb1_0", "type": "function", "function": {"name": tool, "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "nb1_0", "content": json.dumps(named)},
    ]


def test_a_cell_tools_images_are_sent() -> None:
    for tool in ("run_cell", "replace_cell"):
        out, sent = with_images(conversation(tool), lambda sha: BLOB)
        assert [s["call_id"] for s in sent] == ["nb1_0"] and out[-1]["role"] == "user"
        assert "image_url" in json.dumps(out[-1])


def test_another_tools_result_naming_images_sends_nothing() -> None:
    for tool in ("mcp__files__read", "my_tool", "read_file", "run_python", ""):
        messages = conversation(tool)
        out, sent = with_images(messages, lambda sha: BLOB)
        assert sent == [] and out == messages
