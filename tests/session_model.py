"""A researcher's model, played by code: deterministic answers to a long session of "read this CSV" requests.

Served by the stub (`StubOpenAI(...).fallback = Respond(session_model.respond)`), it decides every reply from the
request alone, so two runs of the same session send and receive the same bytes (tests/test_long_session.py,
bench/context_bench.py):

- the last message is the person's request "Read data/part_NN.csv and tell me ..." -> a `read_file` call for it;
- the last message is a tool result -> a short answer naming the file and what the result showed (its first line
  and line count), or that the result was compacted to a handle; in every `PAGE_EVERY`-th cell, when the result
  says how to read on with `read_result` (a clipped result) and the model has that tool, it first reads page 2;
- the system prompt starts with "You summarise" -> a short summary built from the files the messages name.

Call ids come from the cell number and the turn (`call_NN_read`), never from a counter of the server's: nbagent
replaces them with its own (`nbagent/events/ids.py`), and a re-run must see the same replies anyway.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

from stub_openai import Reply

PAGE_EVERY = 7  # cells 7, 14, 21...: read page 2 of a clipped result
ROWS = 3_950  # ~200 KB a file
REQUEST = re.compile(r"Read (data/part_(\d+)\.csv)")
HANDLE = re.compile(r'read_result\(handle="([^"]+)", page=(\d+)\)')
STATIONS = ["Aberdeen", "Basel", "Cork", "Dundee", "Exeter", "Faro", "Girona", "Hull", "Innsbruck", "Jena"]
NOTES = ["clear sky", "light rain", "fog at dawn", "sensor recalibrated", "gusty afternoon", "overcast",
         "thunder nearby", "dry and calm", "drizzle", "frost overnight"]


# ------------------------------------------------------------------------------------------- the data


def csv_text(n: int, rows: int = ROWS) -> str:
    """The n-th file's text: a header and `rows` rows, the same on every machine (seeded by n)."""
    rng = random.Random(n)
    lines = ["date,station,temperature_c,humidity_pct,wind_kmh,pressure_hpa,note"]
    for i in range(rows):
        day = f"2026-{1 + (i // 28) % 12:02d}-{1 + i % 28:02d}"
        lines.append(f"{day},{rng.choice(STATIONS)},{rng.uniform(-8, 31):.2f},{rng.randint(20, 100)},"
                     f"{rng.uniform(0, 70):.1f},{rng.uniform(970, 1040):.1f},{rng.choice(NOTES)}")
    return "\n".join(lines) + "\n"


def write_data(folder: Path, cells: int) -> list[str]:
    """Write data/part_01.csv ... data/part_{cells}.csv under `folder`; their paths, relative to it."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    paths = []
    for n in range(1, cells + 1):
        rel = f"data/part_{n:02d}.csv"
        (folder / rel).write_text(csv_text(n))
        paths.append(rel)
    return paths


def prompt(n: int) -> str:
    """The n-th cell's request."""
    return f"Read data/part_{n:02d}.csv and tell me its first row and how many lines it has."


# ------------------------------------------------------------------------------------------- the model


def respond(body: dict[str, Any]) -> Reply:
    """The reply to one chat request (see the module's notes)."""
    messages: list[dict[str, Any]] = body.get("messages") or []
    system = _text(messages[0]) if messages and messages[0].get("role") == "system" else ""
    if system.startswith("You summarise"):
        return Reply(content=summary(messages))
    last = messages[-1] if messages else {}
    if last.get("role") == "user":
        asked = REQUEST.search(_text(last))
        if asked is None:
            return Reply(content="I only read the files I am asked about.")
        return Reply(tool_calls=[{"id": f"call_{asked.group(2)}_read", "name": "read_file",
                                  "arguments": {"path": asked.group(1)}}])
    if last.get("role") == "tool":
        return _after_tool(messages, body)
    return Reply(content="Nothing to do.")


def _after_tool(messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
    """The answer once the run's last call came back (or a read of page 2 first, in some cells)."""
    request = next((m for m in reversed(messages) if m.get("role") == "user" and REQUEST.search(_text(m))), None)
    asked = REQUEST.search(_text(request)) if request is not None else None
    path, cell = (asked.group(1), int(asked.group(2))) if asked else ("the file", 0)
    call = _last_call(messages)
    result = _text(messages[-1])
    handle = HANDLE.search(result)
    tools = {(t.get("function") or {}).get("name") for t in body.get("tools") or []}
    if call == "read_file" and handle and handle.group(2) == "2" and cell % PAGE_EVERY == 0 \
            and "read_result" in tools:
        return Reply(tool_calls=[{"id": f"call_{cell:02d}_page", "name": "read_result",
                                  "arguments": {"handle": handle.group(1), "page": 2}}])
    if call == "read_result":
        return Reply(content=f"{path}: page 2 of its result begins {json.dumps(_first_line(result))}.")
    first = _first_row(result)
    lines = re.search(r'"lines": "1-\d+ of (\d+)"', result)
    said = f"{path}: its first row is {json.dumps(first)}" if first else f"{path}: I could not see its first row"
    said += f" and it has {lines.group(1)} lines." if lines else "."
    if handle is not None and handle.group(2) == "1":
        said += f" (The result was compacted to a handle, {handle.group(1)}.)"
    elif handle is not None:
        said += " (Only the first page of the result was sent.)"
    return Reply(content=said)


def summary(messages: list[dict[str, Any]]) -> str:
    """A short summary of a transcript: which files were read, in order (what the next answers may need)."""
    text = "\n".join(_text(m) for m in messages[1:])
    files = list(dict.fromkeys(re.findall(r"data/part_\d+\.csv", text)))
    if not files:
        return "Nothing was read yet."
    shown = files if len(files) <= 12 else [*files[:3], "...", *files[-8:]]
    return f"The researcher asked for {len(files)} files to be read ({', '.join(shown)}); each answer gave the " \
           "file's first row and its number of lines."


def _last_call(messages: list[dict[str, Any]]) -> str | None:
    for m in reversed(messages):
        if m.get("role") == "assistant":
            calls = m.get("tool_calls") or []
            return str((calls[-1].get("function") or {}).get("name")) if calls else None
    return None


def _text(m: dict[str, Any] | None) -> str:
    content = (m or {}).get("content")
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return str(content or "")


def _first_row(result: str) -> str | None:
    """The first data row of a read_file result, whole (JSON) or cut (its head and a note)."""
    try:
        content = json.loads(result).get("content")
    except (ValueError, AttributeError):
        found = re.search(r'"content": "((?:[^"\\]|\\.)*?)\\n((?:[^"\\]|\\.)*?)\\n', result)
        return found.group(2) if found else None
    rows = str(content or "").split("\n")
    return rows[1] if len(rows) > 1 else None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:120]
