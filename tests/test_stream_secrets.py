"""Streaming to the bus, and secrets kept out of the log."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from agents import agent, call, run, turns

from nbagent.events.state import RunStatus
from nbagent.secrets.redactor import REDACTED, Redactor


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


# ---------------------------------------------------------------------------- streamed text and the saved notebook

OPENAI_KEY = "sk-envsecret-0123456789abcdefXYZ"
HF_TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"


def test_streamed_tokens_never_carry_a_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the bus carries is what the live view shows and the notebook saves: redacted at the source."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)
    a = agent(tmp_path, turns(f"Your key is {OPENAI_KEY} and your token {HF_TOKEN}, keep them safe."), stream=True)
    shown = [""]

    def listen(kind: str, data: Any) -> None:
        if kind == "token":
            shown[0] += data[1]
            assert OPENAI_KEY[:8] not in shown[0] and HF_TOKEN[:8] not in shown[0], shown[0]
        elif kind == "token_reset":
            shown[0] = ""

    a.bus.subscribe(listen)
    result = run(a)
    assert result.status == RunStatus.COMPLETED
    assert shown[0] == f"Your key is {REDACTED} and your token {REDACTED}, keep them safe."


@pytest.mark.kernel
def test_nbagent_run_keeps_env_secrets_out_of_the_notebook_the_log_and_the_output(tmp_path: Path) -> None:
    """The model streams the API key back and reads a file holding the HF token: neither value is saved."""
    import os
    import subprocess
    import sys

    import nbformat

    (tmp_path / "notes.txt").write_text(f"my token is {HF_TOKEN}\n")
    (tmp_path / "s.json").write_text(json.dumps({"turns": [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
        {"tool_calls": [{"name": "pause", "arguments": {}}]},
        {"content": f"Your key is {OPENAI_KEY} and the note says {HF_TOKEN} ok"},
    ]}))
    # the run lasts past LIVE_AFTER_S (a tool that waits), so it has a live view, whose widget state is saved
    pause = "import time\nfrom nbagent import tool\n@tool(risk='READ_ONLY')\ndef pause() -> str:\n" \
            "    \"\"\"Waits a moment.\"\"\"\n    time.sleep(0.5)\n    return 'ok'"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in ["%load_ext nbagent", pause,
                                                           "%%agent --script s.json\nsummarise notes.txt"]]
    nbformat.write(nb, tmp_path / "a.ipynb")
    env = {**os.environ, "OPENAI_API_KEY": OPENAI_KEY, "HF_TOKEN": HF_TOKEN}
    exe = Path(sys.executable).with_name("nbagent")
    done = subprocess.run([str(exe), "run", "a.ipynb", "-o", "out.ipynb"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    saved = (tmp_path / "out.ipynb").read_text()
    assert "streaming" in saved and REDACTED in saved  # the widget state was saved, redacted
    log = b"".join(p.read_bytes() for p in (tmp_path / "a.nbagent").iterdir() if p.is_file()).decode()
    for secret in (OPENAI_KEY, HF_TOKEN):
        for where, text in {"notebook": saved, "log": log, "stdout": done.stdout, "stderr": done.stderr}.items():
            assert secret[:12] not in text, where
