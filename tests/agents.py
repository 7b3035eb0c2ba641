"""Tools and agent builders shared by the runtime tests."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from nbagent.gate.deciders import Decider, PauseDecider
from nbagent.runtime import Agent, RunResult
from nbagent.tools.base import tool

CALLS: list[tuple[str, dict[str, Any]]] = []  # every real tool execution, in order


@tool(risk="READ_ONLY")
def read_file(path: str) -> str:
    """Read a text file.

    Args:
        path: the file, relative to the notebook's folder
    """
    CALLS.append(("read_file", {"path": path}))
    return f"contents of {path}"


@tool(risk="WRITE_LOW_RISK")
def create_file(path: str, content: str) -> str:
    """Create a new file."""
    CALLS.append(("create_file", {"path": path, "content": content}))
    return f"created {path} ({len(content)} chars)"


@tool(risk="WRITE_HIGH_RISK")
def delete_file(path: str) -> str:
    """Delete a file."""
    CALLS.append(("delete_file", {"path": path}))
    return f"deleted {path}"


@tool(risk="READ_ONLY")
def add(a: int, b: int) -> int:
    """Add two integers."""
    CALLS.append(("add", {"a": a, "b": b}))
    return a + b


@tool(risk="READ_ONLY")
def explode(reason: str = "boom") -> str:
    """Always fails."""
    CALLS.append(("explode", {"reason": reason}))
    raise RuntimeError(reason)


TOOLS = [read_file, create_file, delete_file, add, explode]
RISKY = {"READ_ONLY": read_file, "WRITE_LOW_RISK": create_file, "WRITE_HIGH_RISK": delete_file}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def turns(*items: Any) -> dict[str, Any]:
    """A script: a list is one turn of tool calls, a str a final text turn, a dict a raw turn."""
    out = []
    for item in items:
        if isinstance(item, str):
            out.append({"content": item})
        elif isinstance(item, list):
            out.append({"tool_calls": item})
        else:
            out.append(item)
    return {"turns": out}


def agent(tmp: Path, script: Any = None, *, decider: Decider | None = None, **kw: Any) -> Agent:
    kw.setdefault("tools", TOOLS)
    kw.setdefault("retry_base", 0.001)
    kw.setdefault("retry_cap", 0.01)
    return Agent(script=script, decider=decider or PauseDecider(), store=tmp / "nb.ipynb", **kw)


def run(a: Agent, prompt: str = "do the task", **kw: Any) -> RunResult:
    return asyncio.run(a.run(prompt, **kw))


def types(a: Agent, run_id: str) -> list[str]:
    return [e.type for e in a.store.run_events(run_id)]


class InOrder(Decider):
    """A person who gives these decisions and answers in turn, whatever is asked (a test's stand-in; a recording
    is replayed by `RecordedDecider`, which answers only the calls each decision was about)."""

    def __init__(self, verdicts: list[Any], answers: list[Any] | None = None) -> None:
        self.verdicts, self.answers = list(verdicts), list(answers or [])

    async def decide(self, request: Any) -> Any:
        return self.verdicts.pop(0) if self.verdicts else None

    async def answer(self, request: Any) -> Any:
        return self.answers.pop(0) if self.answers else None
