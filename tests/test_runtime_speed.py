"""The shortcuts taken for the loop's speed and memory (issue 16) give exactly what the plain code gave.

- The runtime hands the store the payload it already dumped, redacted and validated: that dict is what dumping
  the validated payload again gives, and the event returned (and published) is what parsing the written line
  gives.
- `Redactor.redact` walks a structure in one function: the result is the plain recursion's, secrets included.
- What a run tree with sub-agents has spent (`Agent.tree_usage`, what budgets are checked against) is what
  `TreeUsage.of` sums over its runs' states, and a sub-agent's spending counts against its root's budget.
- When the store's cache of parsed events is full (bounded by bytes), reads past it parse from the file and give
  what was kept while appending (the cache's bound itself: tests/test_store_reopen.py).
- `EventTable.chain_len` is the number of events `docs_for_chain` returns, also after a damaged line.

Never timed here: the speed itself is measured by bench/runtime_bench.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents import CALLS, agent, call, run, turns
from examples import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from nbagent.events.model import PAYLOADS, parse_event
from nbagent.events.state import RunStatus
from nbagent.gate.deciders import PolicyDecider, Verdict
from nbagent.gate.policy import Budget, TreeUsage
from nbagent.secrets.redactor import REDACTED, Redactor, secret_key
from nbagent.store import Store
from nbagent.store.eventlog import EventLog


def _varied_runs(tmp_path: Path) -> Any:
    """A store with tool calls, a plan that waits and is approved, failures, denials, thinking and a sub-agent."""
    CALLS.clear()
    a = agent(tmp_path, turns(
        {"content": "let me look", "tool_calls": [call("read_file", path="a.csv")]},
        [call("read_file", path="b"), call("explode", reason="disk on fire"), call("read_file", path="../x")],
        [call("create_file", path="r.md", content="api_key = sk-abcdefghijklmnopqrstuvwxyz123456")],
        [call("spawn_agent", prompt="add 2 and 3", tools=["add"])],
        [call("add", a=2, b=3)],
        "the sum is 5",
        [call("nope")],
        "done: token=ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    ), decider=PolicyDecider("low"), autonomy="L1")
    result = run(a, "go, my password: hunter2hunter2")
    if result.pending:
        result = run_resume(a, result.run_id)
    return a, result


def run_resume(a: Any, run_id: str) -> Any:
    import asyncio

    return asyncio.run(a.resume(run_id, verdict=Verdict(action="approve")))


def test_recorded_payloads_round_trip_and_events_are_what_parsing_gives(tmp_path: Path) -> None:
    a, result = _varied_runs(tmp_path)
    assert result.children, "the script should have run a sub-agent"
    raws = a.store.query_events()
    kinds = {e.type for e in raws}
    assert {"llm_called", "tool_call_started", "tool_call_completed", "tool_call_failed", "thinking",
            "authorization_denied", "child_run_started"} <= kinds
    for doc in a.store.events.all():
        payload_cls = PAYLOADS[doc["type"]]
        again = payload_cls.model_validate(doc["payload"]).model_dump(mode="json", fallback=repr)
        assert again == doc["payload"], doc["type"]
    # what the store returned from append (and published) equals what parsing the written line gives
    CALLS.clear()
    b = agent(tmp_path, turns([call("read_file", path="d"), call("read_file", path="../up")], "fine"),
              decider=PolicyDecider("all"))
    published: list[Any] = []
    b.bus.subscribe(lambda kind, data: published.append(data) if kind == "event" else None)
    again = run(b, "again, token=abcdefghijklmnop1234")
    raw = {d["id"]: d for d in b.store.raw_events(again.run_id)}
    mine = [e for e in published if e.run_id == again.run_id]
    assert len(mine) == len(raw) > 5
    for event in mine:
        assert event == parse_event(raw[event.id])
        assert type(event.payload) is PAYLOADS[event.type]


def _plain_redact(r: Redactor, obj: Any) -> Any:
    """The recursion `Redactor.redact` was before it was made one walk (the reference)."""
    if isinstance(obj, str):
        return r.text(obj)
    if isinstance(obj, dict):
        return {k: (REDACTED if isinstance(v, str) and v and isinstance(k, str) and secret_key(k)
                    else _plain_redact(r, v)) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain_redact(r, v) for v in obj]
    return obj


TEXTS = st.sampled_from([
    "", "ok", "short", "a plain sentence of some length", "sk-abcdefghijklmnopqrstuvwxyz123456",
    "password = hunter2hunter2", "Bearer abcdefghijklmnopqrstuvwxyz", "my-known-secret-value", "x" * 600,
    "key: 0123456789abcdef0123456789abcdef", '{"i": 181}', "nb12_0", "AKIAABCDEFGHIJKLMNOP and more",
]) | st.text(max_size=40)
KEYS = st.sampled_from(["api_key", "Authorization", "content", "token", "name", "x_token", "args"]) \
    | st.text(max_size=8)
LEAVES = TEXTS | st.integers() | st.floats(allow_nan=False) | st.none() | st.booleans()
TREES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4)
                     | st.tuples(inner, inner), max_leaves=25)


@settings(max_examples=examples(300), deadline=None)
@given(tree=TREES)
def test_redact_walks_as_the_plain_recursion_did(tree: Any) -> None:
    r = Redactor(["my-known-secret-value"])
    expected = _plain_redact(Redactor(["my-known-secret-value"]), tree)
    assert r.redact(tree) == expected
    assert r.redact(tree) == expected  # again, answered from the cache of short strings
    assert json.dumps(r.redact(tree), sort_keys=True, default=repr) == json.dumps(expected, sort_keys=True,
                                                                                    default=repr)


def _tree_states(store: Store, root: str) -> list[Any]:
    states, todo = [], [root]
    while todo:
        state = store.run_state(todo.pop())
        states.append(state)
        todo.extend(state.children)
    return states


def test_a_trees_usage_sums_its_runs_and_budgets_count_the_whole_tree(tmp_path: Path) -> None:
    a, result = _varied_runs(tmp_path)
    root = result.run_id
    totals = TreeUsage.of(_tree_states(a.store, root))
    assert a.tree_usage(root) == totals == a.tree_usage(result.children[0])
    assert totals.model_calls >= 2 and totals.tool_steps >= 2 and set(totals.runs) == {root, *result.children}
    # the parent makes 2 model calls before its answer, its sub-agent 2: the tree's 4th call is the last allowed
    CALLS.clear()
    b = agent(tmp_path, turns([call("spawn_agent", prompt="add 2 and 3", tools=["add"])], [call("add", a=2, b=3)],
                              "the sum is 5", [call("read_file", path="a.csv")], "never reached"),
              decider=PolicyDecider("all"), budget=Budget(max_model_calls=4))
    stopped = run(b)
    assert stopped.status == RunStatus.COMPLETED_WITH_ERRORS
    denial = next(e for e in b.store.run_events(stopped.run_id) if e.type == "authorization_denied").payload
    assert denial.rule == "budget.max_model_calls"
    usage = b.tree_usage(stopped.run_id)
    assert usage.model_calls == 4 and usage.runs[stopped.run_id]["model_calls"] == 2


def test_reads_past_a_full_parse_cache_give_what_was_kept(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(EventLog, "KEEP_BYTES", 4096)  # a few events: most of the run's are read from the file
    CALLS.clear()
    a = agent(tmp_path, turns(*[[call("read_file", path=f"f{i}.txt")] for i in range(30)], "done"),
              decider=PolicyDecider("all"))
    result = run(a)
    assert result.status == RunStatus.COMPLETED and len(a.store.raw_events(result.run_id)) > 60
    # every event can still be read, and a fresh fold from the file is the state kept while appending
    fresh = Store(a.store.path, readonly=True)
    assert fresh.run_state(result.run_id).model_dump() == a.store.run_state(result.run_id).model_dump()
    assert [e.id for e in fresh.run_events(result.run_id)] == [e.id for e in a.store.run_events(result.run_id)]


def test_chain_len_counts_what_docs_for_chain_returns(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.nbagent")
    session = store.session("default")
    key = f"session:{session.id}"
    assert store.events.chain_len(key) == len(store.events.docs_for_chain(key)) == 1
    from nbagent.events.model import SessionResumed

    for pid in range(3):
        store.append(SessionResumed(pid=pid), session_id=session.id)
    assert store.events.chain_len(key) == len(store.events.docs_for_chain(key)) == 4
    # a canonical-looking line damaged inside: it leaves the chain when first read
    path = store.events_path
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"pid":1', b'"pid":1x')
    path.write_bytes(b"".join(lines))
    other = Store(store.path, readonly=True)
    docs = other.events.docs_for_chain(key)
    assert other.events.chain_len(key) == len(docs) == 3


SECRETISH = st.sampled_from([
    "sk-abcdefghijklmnopqrstuvwxyz123456", "password = hunter2hunter2", "Bearer abcdefghijklmnopqrstuvwxyz",
    "PASSWORD: Hunter2Hunter2", "Api_Key=0123456789abcdef0123456789", "key: 0123456789abcdef0123456789abcdef",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "AKIAABCDEFGHIJKLMNOP", "-----BEGIN RSA PRIVATE KEY-----\nabc\n",
    "machine h login me password xyz", "eyJabcdefghij.eyJabcdefghij.sig",
    "hooks.slack.com/services/T0/B0/abcdefghijklmnopqrst", "Tökén=abcdefghijklmnop1234",
    "pa\u017fsword=abcdefgh1234", " ", ":", "=", "é", "chatcmpl-1234-5678-90ab-cdef",
])


@settings(max_examples=examples(400), deadline=None)
@given(parts=st.lists(SECRETISH | st.text(max_size=20), max_size=6))
def test_the_quick_tests_in_spans_never_skip_a_secret(parts: list[str]) -> None:
    """`spans` skips the per-anchor and per-trigger loops when one regular expression finds no anchor or trigger:
    with those tests made to always pass, the spans are the same."""
    import re

    import nbagent.secrets.redactor as secrets_mod

    text = " ".join(parts)
    r = Redactor(["my-known-secret-value"])
    quick = [r.spans(text, pos, None) for pos in (0, len(text) // 2)]
    always = re.compile("")
    old = secrets_mod._ANY_ANCHOR, secrets_mod._ANY_TRIGGER
    secrets_mod._ANY_ANCHOR = secrets_mod._ANY_TRIGGER = always
    try:
        slow = [r.spans(text, pos, None) for pos in (0, len(text) // 2)]
    finally:
        secrets_mod._ANY_ANCHOR, secrets_mod._ANY_TRIGGER = old
    assert quick == slow


@settings(max_examples=examples(300), deadline=None)
@given(text=st.text() | st.sampled_from(["a" * 8333, "\x01" * 8333, "\x01" * 8334, "é" * 49_000, "x" * 50_001]))
def test_a_plain_string_result_is_what_the_json_round_trip_gave(text: str) -> None:
    from nbagent.runtime import MAX_RESULT_CHARS, jsonable

    dumped = json.dumps(text, ensure_ascii=False, default=str)
    if len(dumped) > MAX_RESULT_CHARS:
        expected: Any = (dumped[:MAX_RESULT_CHARS]
                         + f"… [truncated: the result had {len(dumped):,} characters; ask for less]")
    else:
        expected = json.loads(dumped)
    assert jsonable(text) == expected
