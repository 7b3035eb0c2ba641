"""The offline models are called without litellm (nbagent/models/provider.py `local_completion`), and what a run
records is what it recorded when their calls went through litellm: the same events, field by field, apart from
ids, timestamps, hashes and latencies. `NBAGENT_LOCAL_VIA_LITELLM=1` is the old path, so both are recorded here
side by side: plain and streamed runs, retried and fatal scripted errors, a failing function model, sub-agents,
a run continuing another, replay. Logs recorded through litellm (tests/fixtures/legacy-v0) replay on the new path.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import TOOLS, call, turns

from nbagent.events.state import RunStatus
from nbagent.gate.deciders import PolicyDecider
from nbagent.models.function import FunctionModel
from nbagent.models.llm import complete
from nbagent.models.provider import register_local
from nbagent.models.reply import ModelError, ModelSettings
from nbagent.models.scripted import ScriptedModel
from nbagent.runtime import Agent

ULID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")
TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
CHATCMPL = re.compile(r"chatcmpl-[0-9a-f-]{36}")
DROP = {"hash", "prev_hash", "latency_ms", "duration_ms", "created"}
LEGACY = Path(__file__).parent / "fixtures" / "legacy-v0"


def normalised(store: Path) -> list[Any]:
    """The log's events without what differs between any two recordings (ids by order of appearance)."""
    ids: dict[str, str] = {}

    def strip(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k not in DROP}
        if isinstance(v, list):
            return [strip(x) for x in v]
        if isinstance(v, str):
            v = ULID.sub(lambda m: ids.setdefault(m.group(0), f"<id{len(ids)}>"), v)
            return CHATCMPL.sub("chatcmpl-<id>", TS.sub("<ts>", v))
        return v

    out = []
    for line in (store / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["type"] == "llm_called" and ULID.search(json.dumps(event["payload"]["request"])):
            del event["payload"]["fingerprint"]  # a hash over messages that hold ids (a sub-agent's run id)
        out.append(strip(event))
    return out


def record(folder: Path, via_litellm: bool, monkeypatch: pytest.MonkeyPatch, build: Any) -> list[Any]:
    if via_litellm:
        monkeypatch.setenv("NBAGENT_LOCAL_VIA_LITELLM", "1")
    else:
        monkeypatch.delenv("NBAGENT_LOCAL_VIA_LITELLM", raising=False)
    folder.mkdir()
    build(folder)
    events = normalised(folder / "nb.nbagent")
    monkeypatch.delenv("NBAGENT_LOCAL_VIA_LITELLM", raising=False)
    return events


def agent(folder: Path, script: Any = None, **kw: Any) -> Agent:
    kw.setdefault("tools", TOOLS)
    return Agent(script=script, decider=PolicyDecider("all"), store=folder / "nb.ipynb", autonomy="L3",
                 retry_base=0.001, retry_cap=0.002, **kw)


BUSY = turns(
    {"content": "Looking first.", "tool_calls": [call("read_file", path="a.txt"), call("add", a=1, b=2)]},
    {"error": {"type": "rate_limit"}},
    {"tool_calls": [{"name": "add", "arguments": "{not json"}], "usage": {"prompt_tokens": 7, "completion_tokens": 3}},
    {"error": {"type": "server", "message": "overloaded\nsecond line"}},
    [call("explode", reason="no"), call("read_file", path="é.txt"), call("add", a=2, b=3), call("add", a=4, b=5)],
    "All done:  two  spaces and a trailing one ",
)


def busy(folder: Path, *, stream: bool = False) -> None:
    a = agent(folder, BUSY, stream=stream)
    result = asyncio.run(a.run("do things"))
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS, result.error  # the tool that explodes
    then = agent(folder, turns([call("spawn_agent", prompt="look")], "child says hi", "and again"))
    result = asyncio.run(then.run("continue"))  # continues the first run: its conversation is the prefix
    assert result.status == RunStatus.COMPLETED, result.error


def fatal(folder: Path) -> None:
    a = agent(folder, turns({"error": {"type": "bad_request", "message": "no such parameter"}}))
    assert asyncio.run(a.run("fail")).status == RunStatus.FAILED
    b = agent(folder, turns({"error": {"type": "timeout"}}, {"error": {"type": "connection"}}, "late answer"),
              max_retries=1)
    assert asyncio.run(b.run("fail after a retry")).status == RunStatus.FAILED
    c = agent(folder, turns(), stream=True)
    assert asyncio.run(c.run("no turns left")).status == RunStatus.FAILED


def broken_function(folder: Path) -> None:
    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        raise KeyError("the function model has a bug")

    for stream in (False, True):
        a = Agent(function=model, decider=PolicyDecider("all"), store=folder / "nb.ipynb", max_retries=1,
                  retry_base=0.001, stream=stream)
        assert asyncio.run(a.run("call the function")).status == RunStatus.FAILED


def replayed(folder: Path, *, stream: bool = False) -> None:
    busy(folder, stream=stream)
    a = agent(folder, BUSY)
    first = next(r.id for r in a.store.list_runs() if r.prompt == "do things")
    for again in range(2):
        r = agent(folder, replay=first, session=f"replay-{again}", stream=stream)
        result = asyncio.run(r.run("do things"))
        assert result.status == RunStatus.COMPLETED_WITH_ERRORS, result.error


@pytest.mark.parametrize("build", [busy, lambda f: busy(f, stream=True), fatal, broken_function, replayed,
                                   lambda f: replayed(f, stream=True)],
                         ids=["tools-and-retries", "streamed", "fatal-errors", "broken-function", "replay",
                              "replay-streamed"])
def test_the_offline_path_records_what_the_litellm_path_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 build: Any) -> None:
    old = record(tmp_path / "litellm", True, monkeypatch, build)
    new = record(tmp_path / "direct", False, monkeypatch, build)
    assert len(new) == len(old)
    for a, b in zip(old, new, strict=True):
        assert b == a
    assert {e["type"] for e in new} & {"llm_called", "error"}


CASES: list[tuple[str, Any]] = [
    ("text", {"content": "hi there you"}),
    ("empty text", {"content": ""}),
    ("no text", {}),
    ("spaces", {"content": "a  b "}),
    ("calls", {"tool_calls": [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": [1, "é"]}}]}),
    ("text and bad call", {"content": "x", "tool_calls": [{"name": "b", "arguments": "{bad"}],
                           "usage": {"prompt_tokens": 5, "completion_tokens": 7}}),
    *[(kind, {"error": {"type": kind, "message": "boom"}})
      for kind in ("rate_limit", "server", "timeout", "connection", "bad_request")],
]


async def _one(model: Any, name: str, stream: bool) -> dict[str, Any]:
    key = register_local(model)
    settings = ModelSettings(model=f"nbagent/{name}", max_retries=1, retry_base=0.001)
    tokens: list[str] = []
    tools = [{"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties": {}}}}]
    try:
        reply = await complete(settings, [{"role": "user", "content": "hello there"}], tools,
                               metadata={"nbagent_model": key, "nbagent_turn": 0},
                               on_token=tokens.append if stream else None)
    except ModelError as exc:
        return {"error": str(exc), "retries": exc.retry_count, "transient": exc.transient, "type": exc.error_type}
    out = reply.model_dump()
    out.pop("latency_ms")
    out["response"].pop("id")
    out["response"].pop("created")
    return {**out, "tokens": tokens}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_each_reply_and_error_is_the_same_as_through_litellm(monkeypatch: pytest.MonkeyPatch, stream: bool) -> None:
    def bad(messages: Any, tools: Any) -> Any:
        raise TypeError("oops\nmore")

    def both(make: Any, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        monkeypatch.setenv("NBAGENT_LOCAL_VIA_LITELLM", "1")
        old = asyncio.run(_one(make(), name, stream))
        monkeypatch.delenv("NBAGENT_LOCAL_VIA_LITELLM")
        return old, asyncio.run(_one(make(), name, stream))

    for label, turn in CASES:
        old, new = both(lambda t=turn: ScriptedModel({"turns": [t, t]}), "scripted")
        assert new == old, label
    for make, label in ((lambda: FunctionModel(bad), "raises"), (lambda: FunctionModel(lambda m, t: 42), "returns 42"),
                        (lambda: ScriptedModel({"turns": []}), "no turns")):
        old, new = both(make, "scripted" if label == "no turns" else "function")
        assert new == old, label


def test_once_litellm_is_loaded_an_offline_run_records_the_same(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel with a real model configured loads litellm; offline runs after it still take the direct path, and
    record what the litellm path records."""
    from nbagent.ipython import loading

    old = record(tmp_path / "litellm", True, monkeypatch, busy)
    loading._load()  # what the loading thread does (here in this thread)
    assert record(tmp_path / "direct", False, monkeypatch, busy) == old


def test_an_offline_run_imports_no_litellm(tmp_path: Path) -> None:
    code = ("import asyncio, sys\nfrom nbagent.runtime import Agent\nfrom nbagent.gate.deciders import PolicyDecider\n"
            "a = Agent(script={'turns': [{'content': 'hi'}]}, store='nb.ipynb', decider=PolicyDecider('all'))\n"
            "r = asyncio.run(a.run('go'))\nprint(r.answer, 'litellm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["hi", "False"], out.stderr


def test_a_log_recorded_through_litellm_replays_on_the_offline_path(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from test_approval import legacy_delete, legacy_read

    folder = tmp_path / "legacy"
    shutil.copytree(LEGACY, folder)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("NBAGENT_LOCAL_VIA_LITELLM", raising=False)
    (folder / "old.txt").write_text("old\n")
    probe = Agent(script=folder / "s1.json", store=folder / "nb.ipynb")
    recorded = next(r.id for r in probe.store.list_runs() if r.prompt == "tidy up")
    a = Agent(replay=recorded, tools=[legacy_read, legacy_delete], store=folder / "nb.ipynb", session="replayme")
    result = asyncio.run(a.run("tidy up"))
    assert result.status == RunStatus.COMPLETED, result.error
    assert result.answer == "done: read data.txt, deleted old.txt" and not (folder / "old.txt").exists()
    old = [e for e in a.store.run_events(recorded) if e.type == "llm_called"]
    new = [e for e in a.store.run_events(result.run_id) if e.type == "llm_called"]
    assert [e.payload.usage for e in new] == [e.payload.usage for e in old]
    assert [e.payload.cost for e in new] == [e.payload.cost for e in old]
    assert [e.payload.fingerprint for e in new] == [e.payload.fingerprint for e in old]


def test_the_incremental_prompt_token_estimate_equals_the_full_count() -> None:
    import random

    from nbagent.models.provider import _message_chars, _prompt_tokens

    def full(messages: list[dict[str, Any]]) -> int:
        return max(1, sum(_message_chars(m) for m in messages) // 4 + 4 * len(messages))

    rng = random.Random(16)
    for _ in range(200):
        conv: list[dict[str, Any]] = [{"role": "system", "content": rng.choice(["a" * 10, "b" * 50])},
                                      {"role": "user", "content": "x" * rng.randint(0, 30)}]
        for _ in range(rng.randint(1, 20)):
            conv.append({"role": "assistant", "content": None,
                         "tool_calls": [{"function": {"arguments": "{}" * rng.randint(0, 5)}}]})
            conv.append({"role": "tool", "content": "r" * rng.randint(0, 40)})
            request = list(conv)
            if rng.random() < 0.2:  # another run's request sharing these message objects after another start
                request[0] = {"role": "system", "content": rng.choice(["a" * 10, "b" * 50, "c"])}
            if rng.random() < 0.1:
                request = [dict(m) for m in request]  # copies (as litellm makes)
            assert _prompt_tokens(request) == full(request)
