"""`nbagent/scripted`: a model that plays a script of turns, for offline notebooks, demos, CI and tests.

Script file (JSON):

    {"turns": [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "data.csv"}}]},
        {"content": "The top region is North."}
    ]}

Each model call takes the next turn, counted across the run and the child runs it spawns, and recorded, so a
run resumed in another process continues where it stopped. Running out of turns is a clear error. A turn may
also be `{"error": {"type": "rate_limit"}}` (or server, timeout, connection, bad_request) to rehearse failures,
and `"usage": {"prompt_tokens": .., "completion_tokens": ..}` to set token counts (estimated otherwise).

`"images": true` beside `turns` makes it a model that takes images (cells' figures reach it as image parts); it
counts the image parts of each request, and `{images_received}` in a turn's content says that count (so a script
shows what it was sent).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nbagent.models.base import LocalModel, ModelScriptError


class ScriptedCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    id: str | None = None


class ScriptedTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str | None = None
    tool_calls: list[ScriptedCall] = Field(default_factory=list)
    error: dict[str, Any] | None = None
    usage: dict[str, int] | None = None


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turns: list[ScriptedTurn]
    # the model takes images, as a vision model does: the runtime sends it the images cells showed (image parts)
    images: bool = False

    @classmethod
    def load(cls, source: str | Path | dict[str, Any] | Script) -> Script:
        if isinstance(source, Script):
            return source
        if isinstance(source, dict):
            return cls.model_validate(source)
        path = Path(source)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ModelScriptError(f"{path}: script file not found") from None
        except ValueError as exc:
            raise ModelScriptError(f"{path}: not valid JSON ({exc})") from None
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            raise ModelScriptError(
                f"{path}: not a valid script at {loc}: {first['msg']}; expected "
                '{"turns": [{"content": ...} | {"tool_calls": [{"name": ..., "arguments": {...}}]}]}'
            ) from None


class ScriptedModel(LocalModel):
    name = "scripted"

    def __init__(self, script: str | Path | dict[str, Any] | Script, *, label: str | None = None) -> None:
        self.script = Script.load(script)
        self.label = label or (str(script) if isinstance(script, str | Path) else "inline script")
        self.received_images: list[int] = []  # image parts in each request it answered

    @property
    def accepts_images(self) -> bool:
        return self.script.images

    async def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], turn: int) -> dict[str, Any]:
        turns = self.script.turns
        if turn >= len(turns):
            raise ModelScriptError(
                f"scripted model: the script ({self.label}) has {len(turns)} turn(s) and all were used; this is "
                f"model call {turn + 1}. Add a turn (e.g. {{\"content\": \"final answer\"}}) to the script"
            )
        t = turns[turn]
        seen = sum(1 for m in messages if isinstance(m.get("content"), list)
                   for p in m["content"] if isinstance(p, dict) and p.get("type") == "image_url")
        self.received_images.append(seen)
        if t.error is not None:
            return {"error": t.error}
        calls = [
            {"id": c.id or f"call_{turn}_{i}", "name": c.name, "arguments": c.arguments}
            for i, c in enumerate(t.tool_calls)
        ]
        content = t.content.replace("{images_received}", str(seen)) if t.content is not None else None
        return {"content": content, "tool_calls": calls, "usage": t.usage}
