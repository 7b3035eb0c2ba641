"""A secret in a tool call's arguments is redacted where the call is recorded, and the call stays a call.

A model's tool-call arguments are a JSON text (`{"code": "print(\\"password: ...\\")"}`), recorded in the model's
reply and read back from the log to run (the run is a fold of its events). Redacting that text as prose took the
backslash of `\\"` into the password's value, and the call failed as `InvalidToolCall: arguments are not valid
JSON`. A JSON text is redacted as the values it holds: what the card shows, what runs and what the log keeps are
the same arguments, each secret in them `[REDACTED]`.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from examples import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from nbagent.gate.deciders import PolicyDecider
from nbagent.runtime import Agent
from nbagent.secrets.redactor import REDACTED, Redactor

PASSWORD = "hunter2-not-in-the-environment"


def run(agent: Agent) -> Any:
    return asyncio.run(asyncio.wait_for(agent.run("go"), 60))


def test_a_quoted_password_in_a_call_s_arguments_leaves_the_call_valid_and_runs_redacted(tmp_path: Path) -> None:
    content = f'say "password: {PASSWORD}" now\n'
    script = {"turns": [{"tool_calls": [{"name": "create_file",
                                         "arguments": {"path": "notes.txt", "content": content}}]},
                        {"content": "done"}]}
    agent = Agent(script=script, autonomy="L1", decider=PolicyDecider("all"), store=tmp_path / "nb.ipynb")
    result = run(agent)
    events = agent.store.run_events(result.run_id)
    # Was: tool_call_failed InvalidToolCall "arguments are not valid JSON (Expecting ',' delimiter at position 62)"
    assert [e.payload.error_type for e in events if e.type == "tool_call_failed"] == []
    [plan] = [e.payload for e in events if e.type == "plan_proposed"]
    shown = plan.steps[0].arguments["content"]
    assert shown == f'say "password: {REDACTED}" now\n'  # the card shows what runs
    assert (tmp_path / "notes.txt").read_text() == shown  # what ran is what was approved
    assert PASSWORD not in (tmp_path / "nb.nbagent" / "events.jsonl").read_text()


_ALPHABET = st.sampled_from(['"', "\\", "'", " ", ":", "=", "\n", "{", "}", "[", "]", ",", "a", "é", "\u2028",
                             "password", "token", "api_key", PASSWORD, "sk-test0123456789abcdefABCDEF"])


@settings(max_examples=examples(200), deadline=None)
@given(st.dictionaries(st.sampled_from(["code", "content", "password", "path", "nested"]),
                       st.one_of(st.lists(_ALPHABET, max_size=12).map("".join),
                                 st.lists(st.lists(_ALPHABET, max_size=6).map("".join), max_size=3)),
                       max_size=4),
       st.booleans())
def test_a_json_text_redacted_is_the_same_json_with_its_secrets_redacted(value: dict[str, Any], compact: bool
                                                                          ) -> None:
    """Any arguments, in either spacing, alone or inside a payload: the result parses, to the arguments with each
    value redacted as the log redacts values wherever redacting the text finds a secret; else to the arguments,
    as they were or so redacted."""
    text = json.dumps(value, separators=(",", ":") if compact else None)
    r = Redactor(["sk-test0123456789abcdefABCDEF"])
    for done in (r.redact(text), r.redact({"arguments": text})["arguments"], r.redact([text])[0]):
        back = json.loads(done)
        assert back == r.redact(value) if r.text(text) != text else back in (value, r.redact(value))
        assert "sk-test0123456789abcdefABCDEF" not in done


def test_a_secret_hidden_behind_json_escapes_is_redacted_and_a_clean_text_is_kept_as_written() -> None:
    """`\\u0073k-...` is `sk-...` once the arguments are parsed (for the card, for the call): the text shows no
    pattern, its values do. A document with escapes and no secret is kept byte for byte."""
    key = "s3cr3t-value-0123456789abcdef"
    r = Redactor([key])
    escaped = '{"code": "print(\\"' + "".join(f"\\u{ord(c):04x}" for c in key[:3]) + key[3:] + '\\")"}'
    assert json.loads(escaped) == {"code": f'print("{key}")'}
    done = r.redact({"arguments": escaped})["arguments"]
    # Was: kept as written, the key readable by anyone who parses it
    assert json.loads(done) == {"code": f'print("{REDACTED}")'}
    clean = '{"name": "caf\\u00e9", "n": 1}'
    assert r.redact({"arguments": clean})["arguments"] == clean and r.redact([clean])[0] == clean
    assert r.redact(clean) == clean
