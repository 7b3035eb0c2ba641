"""Replay: answer model calls from a recording (the `llm_called` events of earlier runs), no network.

Requests are matched by fingerprint (a hash of the tools and every message, computed by `nbagent.models.llm`), so a
replayed run gets the recorded reply only if it asks exactly what the recorded run asked. When it asks
something else, the error names the first message that differs from the recorded request at the same
position, which is usually the place to look (a tool that now returns something else, an edited prompt).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict, deque
from typing import Any

from pydantic import BaseModel

from nbagent.models.base import LocalModel, ModelScriptError


class RecordedCall(BaseModel):
    fingerprint: str
    own_messages: list[dict[str, Any]]  # the run's own messages at that call (after the shared prefix)
    prefix_sha: str | None = None
    response: dict[str, Any]
    usage: dict[str, Any] = {}
    tools: list[str] = []
    tools_sha: str | None = None
    call_ids: list[str] | None = None  # None: recorded before nbagent named tool calls itself (approval.py)


    @property
    def response_calls(self) -> int:
        message = (self.response.get("choices") or [{}])[0].get("message") or {}
        return len(message.get("tool_calls") or [])


class ReplayDiverged(ModelScriptError):
    """The replayed run asked what the recording did not."""


def _clip(value: Any, width: int = 100) -> str:
    s = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)
    s = " ".join(s.split())
    return s if len(s) <= width else s[: width - 1] + "…"


def first_difference(recorded: list[dict[str, Any]], current: list[dict[str, Any]]) -> str:
    for i, (a, b) in enumerate(zip(recorded, current, strict=False)):
        if a != b:
            return (f"message {i + 1} ({b.get('role', '?')}) differs: recorded {_clip(a.get('content') or a)} "
                    f"but now {_clip(b.get('content') or b)}")
    if len(current) > len(recorded):
        extra = current[len(recorded)]
        return f"message {len(recorded) + 1} ({extra.get('role', '?')}) is new: {_clip(extra.get('content') or extra)}"
    return f"the request has {len(current)} messages where the recording had {len(recorded)}"


def same_messages(recorded: list[dict[str, Any]], current: list[dict[str, Any]]) -> bool:
    """The same messages, a tool result's JSON compared as data (its keys may have been in another order), and a
    kernel cell's result compared as what the cell did (`cell_identity_masked`)."""
    if len(recorded) != len(current):
        return False
    if all(a == b or _as_data(a) == _as_data(b) for a, b in zip(recorded, current, strict=True)):
        return True
    return cell_identity_masked(recorded) == cell_identity_masked(current)


# A reproduced run's cells are new cells: the kernel names them afresh (their id, the message their outputs go out
# under, the execution count), their first line names the new run, and their provenance its approval. What the code
# printed, showed, returned and raised is what must be as recorded; these names are not.
CELL_TOOLS = frozenset({"run_cell", "replace_cell", "list_cells", "run_python"})
_ASSIGNED = frozenset({"execution_count", "msg_id", "sent_to_frontend", "metadata", "old_metadata"})
_NAMING = frozenset({"cell_id", "after_cell_id", "source", "old_source", "diff", "images_note", "written_by",
                     "traceback"})
_IDS = re.compile(r"\b(?:[0-9a-f]{32}|[0-9A-HJKMNP-TV-Z]{26})\b")  # a cell's uuid hex, a run's or event's ULID
_COUNTS = re.compile(r"\b(In|Out)\[\d+\]")  # "Cell In[5], line 2" in a traceback, {Out[5]} in a note


def cell_identity_masked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with the results of the kernel's cell tools (run_cell, replace_cell, list_cells) reduced to what
    their cells did: the keys the kernel assigns per execution dropped, the ids and counts in nbagent's own text
    (the cell's first line, a diff's header, a traceback's "Cell In[n]") replaced by placeholders. Stdout, stderr,
    values, rich outputs and errors are compared as they are."""
    tools = {c.get("id"): (c.get("function") or {}).get("name") for m in messages if m.get("role") == "assistant"
             for c in m.get("tool_calls") or [] if isinstance(c, dict)}
    out = []
    for m in messages:
        content = m.get("content")
        if m.get("role") == "tool" and tools.get(m.get("tool_call_id")) in CELL_TOOLS and isinstance(content, str):
            try:
                data = json.loads(content)
            except ValueError:
                data = None
            if isinstance(data, dict):
                m = {**m, "content": _masked(data)}
        out.append(_as_data(m))
    return out


def _masked(value: Any, key: str | None = None) -> Any:
    if isinstance(value, dict):
        return {k: _masked(v, k) for k, v in value.items() if k not in _ASSIGNED}
    if isinstance(value, list):
        return [_masked(v, key) for v in value]
    if isinstance(value, str) and key in _NAMING:
        return _COUNTS.sub(r"\1[n]", _IDS.sub("<id>", value))
    return value


def _as_data(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if message.get("role") == "tool" and isinstance(content, str) and content[:1] in "{[":
        try:
            return {**message, "content": json.loads(content)}
        except ValueError:
            return message  # not JSON after all: compared as text
    return message


class ReplayModel(LocalModel):
    name = "replay"

    def __init__(self, calls: list[RecordedCall], source: str = "recording") -> None:
        self.calls = calls
        self.source = source
        self._by_fp: dict[str, deque[RecordedCall]] = defaultdict(deque)
        for c in calls:
            self._by_fp[c.fingerprint].append(c)
        self.used = 0

    @staticmethod
    def _answer(call: RecordedCall) -> dict[str, Any]:
        message = (call.response.get("choices") or [{}])[0].get("message") or {}
        tool_calls = [
            {"id": c.get("id"), "name": c["function"]["name"], "arguments": c["function"].get("arguments", "")}
            for c in message.get("tool_calls") or []
        ]
        return {"content": message.get("content"), "tool_calls": tool_calls, "usage": call.usage or None}

    async def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], turn: int,
                    *, fingerprint: str | None = None, prefix_len: int = 0,
                    prefix_sha: str | None = None) -> dict[str, Any]:
        queue = self._by_fp.get(fingerprint or "")
        if queue:
            call = queue.popleft()
            self.used += 1
            return self._answer(call)
        turn = self.used  # calls are replayed in order: the next recorded one is the one to compare with
        if turn >= len(self.calls):
            raise ReplayDiverged(
                f"replay diverged at model call {turn + 1}: the recording {self.source} has only "
                f"{len(self.calls)} model call(s)"
            )
        expected = self.calls[turn]
        if prefix_sha is not None and expected.prefix_sha not in (None, prefix_sha):
            raise ReplayDiverged(
                f"replay diverged at model call {turn + 1}: the conversation before this run differs from the "
                f"recording {self.source} (system prompt or earlier cells changed)"
            )
        from nbagent.models.reply import sha

        if expected.tools_sha is not None and sha(tools) != expected.tools_sha:
            now = [t.get("function", {}).get("name") for t in tools]
            what = (f"recorded {', '.join(expected.tools)}; now {', '.join(now)}" if now != expected.tools
                    else "same names, but a tool's description or parameters changed")
            raise ReplayDiverged(f"replay diverged at model call {turn + 1} of {self.source}: the tools differ "
                                 f"from the recording ({what})")
        if same_messages(expected.own_messages, messages[prefix_len:]):
            # recorded before tool results were sent with their keys sorted: the same request, other bytes
            self._by_fp[expected.fingerprint].remove(expected)
            self.used += 1
            return self._answer(expected)
        # (a cell's results compared as what it did: the first difference is one of substance, not a new cell id)
        where = first_difference(cell_identity_masked(expected.own_messages),
                                 cell_identity_masked(messages[prefix_len:]))
        raise ReplayDiverged(f"replay diverged at model call {turn + 1} of {self.source}: {where}")
