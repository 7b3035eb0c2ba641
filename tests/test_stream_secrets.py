"""Streaming to the bus, and secrets kept out of the log."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agents import agent, call, run, turns

from nbagent.secrets import REDACTED, Redactor
from nbagent.state import RunStatus


def test_tokens_stream_to_the_bus_and_events_follow(tmp_path: Path) -> None:
    a = agent(tmp_path, turns([call("read_file", path="a.csv")], "The top region is North."), stream=True)
    seen: list[tuple[str, Any]] = []
    a.bus.subscribe(lambda kind, data: seen.append((kind, data)))
    result = run(a)
    tokens = "".join(text for kind, (run_id, text) in ((k, d) for k, d in seen if k == "token"))
    assert tokens == "The top region is North."
    kinds = [d.type for k, d in seen if k == "event"]
    assert kinds == [e.type for e in a.store.run_events(result.run_id)]  # every event, in order, live
    last_token = max(i for i, (k, _) in enumerate(seen) if k == "token")
    answer = next(i for i, (k, d) in enumerate(seen) if k == "event" and d.type == "answer_ready")
    assert last_token < answer


def test_a_failing_listener_does_not_break_the_run(tmp_path: Path) -> None:
    a = agent(tmp_path, turns("fine"))
    a.bus.subscribe(lambda kind, data: 1 / 0)
    assert run(a).status == RunStatus.COMPLETED


def test_redactor_patterns_and_known_values() -> None:
    r = Redactor(["my-very-own-secret-value"])
    data = {
        "messages": [{"role": "user", "content": "key sk-proj-abcdefghijklmnopqrstuv and my-very-own-secret-value"}],
        "headers": {"Authorization": "Bearer abcdefghijklmnopqrstuvwxyz"},
        "api_key": "anything-here",
        "note": "ghp_" + "a" * 36 + " AKIAABCDEFGHIJKLMNOP",
        "count": 3,
    }
    out = r.redact(data)
    text = str(out)
    for secret in ("sk-proj-abcdefghijklmnopqrstuv", "my-very-own-secret-value", "abcdefghijklmnopqrstuvwxyz",
                   "anything-here", "ghp_", "AKIAABCDEFGHIJKLMNOP"):
        assert secret not in text
    assert out["count"] == 3 and out["api_key"] == REDACTED and REDACTED in out["messages"][0]["content"]


def test_secrets_never_reach_the_log(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-envsecret-0123456789abcdef")
    a = agent(tmp_path, turns([call("read_file", path="sk-envsecret-0123456789abcdef")],
                              "your key is sk-envsecret-0123456789abcdef"), api_key="sk-given-key-0123456789")
    result = asyncio.run(a.run("use my key sk-given-key-0123456789 and my-token"))
    assert result.status == RunStatus.COMPLETED
    blob = b"".join(p.read_bytes() for p in a.store.path.iterdir() if p.is_file())
    assert b"sk-envsecret" not in blob and b"sk-given-key" not in blob
    assert REDACTED.encode() in blob
