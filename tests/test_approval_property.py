"""The approval guarantee as a property, over generated hostile runs.

Hypothesis writes the model's replies (any tool, any arguments, any number of calls, ids that are reused,
duplicated, missing, or shaped like nbagent's own), the autonomy level, and the person's decisions in order
(approve, deny, refine, answer, or nobody there). Sub-agents come from `spawn_agent` calls in the replies. After
each run the log is checked against an oracle written here, independent of nbagent's code:

1. every effect (a tool really executing) has exactly one `tool_call_started` event, in the same order;
2. a call whose risk (oracle: the tool's risk, raised to high for a write of a `.py` file) is above what the
   run's autonomy runs without asking executed only after a `plan_approved` event, in its run, of a plan that
   lists exactly this call: the nbagent id the call was given in its `llm_called` event, the same tool and the
   same arguments as the model's reply at that position;
3. the reason each `tool_call_started` gives is true (the autonomy rule, or that very approval);
4. no call id executes twice, and every decision the person gave is recorded once;
5. grants (a decision "for this run" or "for the session", with or without path patterns): a call above the
   autonomy with no approval of its own ran only under an allow grant given earlier in the log, by a recorded
   decision on a plan that had a step of that tool at a risk at least the call's, for this run's tree or its
   session, of the same tool, whose patterns (oracle's own matcher) cover every path of the call, never a write
   Python would run (a `.py` or `__init__.py` path here).
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from examples import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbagent.gate.deciders import Answer, ApprovalRequest, Decider, QuestionRequest, Verdict
from nbagent.gate.grants import GrantSpec
from nbagent.gate.policy import Budget
from nbagent.runtime import Agent
from nbagent.tools.base import tool

pytestmark = pytest.mark.slow

EFFECTS: list[tuple[str, dict[str, Any]]] = []

# the oracle's own table (docs/architecture.md, "The approval table"), not nbagent's
ASKS = {
    "L0": {"READ_ONLY", "WRITE_LOW_RISK", "WRITE_HIGH_RISK"},
    "L1": {"WRITE_LOW_RISK", "WRITE_HIGH_RISK"},
    "L2": {"WRITE_HIGH_RISK"},
    "L3": set(),
}
DECLARED = {"look": "READ_ONLY", "make": "WRITE_LOW_RISK", "remove": "WRITE_HIGH_RISK"}


@tool(risk="READ_ONLY")
def look(path: str) -> str:
    """Look at a file."""
    EFFECTS.append(("look", {"path": path}))
    return f"saw {path}"


@tool(risk="WRITE_LOW_RISK")
def make(path: str, content: str = "") -> str:
    """Make a new file."""
    EFFECTS.append(("make", {"path": path, "content": content}))
    return f"made {path}"


@tool(risk="WRITE_HIGH_RISK")
def remove(path: str) -> str:
    """Remove a file."""
    EFFECTS.append(("remove", {"path": path}))
    return f"removed {path}"


def oracle_risk(name: str, arguments: dict[str, Any]) -> str:
    risk = DECLARED[name]
    if risk != "READ_ONLY" and str(arguments.get("path", "")).lower().endswith(".py"):
        return "WRITE_HIGH_RISK"
    return risk


class Scripted(Decider):
    """The person: decisions in a fixed order; None (nobody there) when they run out."""

    def __init__(self, decisions: list[tuple[Any, ...]]) -> None:
        self.decisions = list(decisions)
        self.given = 0

    def _next(self) -> tuple[Any, ...] | None:
        if not self.decisions:
            return None
        self.given += 1
        return self.decisions.pop(0)

    async def decide(self, request: ApprovalRequest) -> Verdict | None:
        d = self._next()
        if d is None:
            return None
        action, text, *reach = d
        grant = GrantSpec(scope=reach[0], paths=reach[1]) if reach and reach[0] else None
        if action == "approve" or action == "answer":
            return Verdict.approve(grant=grant)
        return Verdict.deny(text, grant=grant) if action == "deny" else Verdict.refine(text or "try again")

    async def answer(self, request: QuestionRequest) -> Answer | None:
        d = self._next()
        return None if d is None else Answer(text=d[1] or "yes")


IDS = st.one_of(st.none(), st.sampled_from(["X", "call_0", "call_1", "", "nb1_0", "nb2_0", "nb1_1", "toolu_1"]),
                st.text(min_size=1, max_size=6))
PATHS = st.sampled_from(["a.txt", "b.csv", "mod.py", "pkg/__init__.py", "notes.md"])


@st.composite
def tool_call(draw: Any) -> dict[str, Any]:
    name = draw(st.sampled_from(["look", "make", "remove", "look", "make", "remove", "ask_human", "spawn_agent"]))
    if name == "ask_human":
        args: dict[str, Any] = {"question": "which one?"}
    elif name == "spawn_agent":
        args = {"prompt": "sub-task"}
    elif name == "make":
        args = {"path": draw(PATHS), "content": draw(st.sampled_from(["", "x", "import os"]))}
    else:
        args = {"path": draw(PATHS)}
    out: dict[str, Any] = {"name": name, "arguments": args}
    call_id = draw(IDS)
    if call_id is not None:
        out["id"] = call_id
    return out


TURN = st.one_of(st.lists(tool_call(), min_size=1, max_size=5).map(lambda calls: {"tool_calls": calls}),
                 st.just({"content": "finished"}))
DECISION = st.tuples(st.sampled_from(["approve", "deny", "refine", "answer"]), st.sampled_from(["", "no", "smaller"]),
                     st.sampled_from([None, None, "run", "session"]),
                     st.sampled_from([None, None, ["*"], ["*.txt"], ["*.py"], ["a.txt"], ["pkg/*"]]))


def oracle_covers(pattern: str, path: str) -> bool:
    """The oracle's own reading of a grant's path pattern, for the names this test uses (docs/grants.md): anchored
    at the folder, matched segment by segment, `*` never crossing a `/`, and a `**` segment standing for any number
    of whole folders (none too)."""
    pats, parts = pattern.split("/"), path.split("/")

    def match(i: int, j: int) -> bool:
        if i == len(pats):
            return j == len(parts)
        if pats[i] == "**":
            return any(match(i + 1, k) for k in range(j, len(parts) + 1))
        return j < len(parts) and fnmatch.fnmatchcase(parts[j], pats[i]) and match(i + 1, j + 1)

    return match(0, 0)


def check(agent: Agent, decider: Scripted, autonomy: str) -> None:
    store = agent.store
    runs = [r.id for r in store.list_runs()]
    everything = store.query_events()
    order = {e.id: i for i, e in enumerate(everything)}  # the log's global order: effects interleave runs
    parent_of = {r: store.run_state(r).parent_run_id for r in runs}

    def root(run: str) -> str:
        while parent_of.get(run):
            run = parent_of[run]  # type: ignore[assignment]
        return run

    given = {e.payload.grant_id: e for e in everything if e.type == "grant_given"}
    assert not [e for e in everything if e.type == "grant_revoked"]
    approvals = {(e.run_id, e.payload.plan_id): e for e in everything if e.type in ("plan_approved", "plan_rejected")}
    proposals = {(e.run_id, e.payload.plan_id): e.payload for e in everything if e.type == "plan_proposed"}
    for gid, g in given.items():  # 5: every grant came from a recorded decision on a plan the person saw
        p = g.payload
        decision = approvals[(p.run_id, p.plan_id)]
        assert gid in [x["grant_id"] for x in decision.payload.grants] and decision.payload.by == p.by
        assert order[decision.id] < order[g.id]
        assert (p.effect == "allow") == (decision.type == "plan_approved")
        shown = [s for s in proposals[(p.run_id, p.plan_id)].steps if s.tool == p.tool]
        assert shown, f"grant {gid} for {p.tool}, which its plan did not list"
        if p.effect == "allow":
            assert p.max_risk.value in {oracle_risk(s.tool, s.arguments) for s in shown}
    executed: list[tuple[int, str, dict[str, Any]]] = []
    decisions = 0
    for run_id in runs:
        events = store.run_events(run_id)
        by_id = {e.id: e for e in events}
        seen_calls: set[str] = set()
        calls_by_id: dict[str, tuple[str, dict[str, Any]]] = {}  # nbagent id -> the model's request there
        plans: dict[str, Any] = {}
        for e in events:
            p: Any = e.payload
            if e.type == "llm_called":
                message = p.response["choices"][0]["message"]
                for i, c in enumerate(message.get("tool_calls") or []):
                    raw = c["function"].get("arguments") or "{}"
                    calls_by_id[p.call_ids[i]] = (c["function"]["name"], json.loads(raw) if raw.strip() else {})
            elif e.type == "plan_proposed":
                plans[p.plan_id] = p
            elif e.type in ("plan_approved", "plan_rejected", "plan_refined", "human_input_received"):
                decisions += 1
            elif e.type == "tool_call_started" and p.tool in DECLARED:
                assert p.call_id not in seen_calls, f"{p.call_id} executed twice"
                seen_calls.add(p.call_id)
                executed.append((order[e.id], p.tool, p.arguments))
                requested = calls_by_id.get(p.call_id)
                assert requested == (p.tool, p.arguments), f"executed {p.tool} {p.arguments}, model asked {requested}"
                risk = oracle_risk(p.tool, p.arguments)
                assert p.risk.value == risk, (p.tool, p.arguments, p.risk)
                if risk in ASKS[autonomy] and p.grant_id:
                    g = given[p.grant_id]
                    gp = g.payload
                    assert order[g.id] < order[e.id] and gp.effect == "allow" and gp.tool == p.tool
                    assert ["READ_ONLY", "WRITE_LOW_RISK", "WRITE_HIGH_RISK"].index(risk) <= \
                        ["READ_ONLY", "WRITE_LOW_RISK", "WRITE_HIGH_RISK"].index(gp.max_risk.value)
                    path = str(p.arguments.get("path", ""))
                    assert DECLARED[p.tool] == "READ_ONLY" or not path.endswith(".py"), f"a grant let {path} be written"
                    assert any(oracle_covers(pat, path) for pat in gp.paths), (gp.paths, path)
                    assert gp.scope == "session" or gp.root_run_id == root(run_id)
                    assert p.reason.startswith(f"allowed by grant {p.grant_id}, given ")
                elif risk in ASKS[autonomy]:
                    approval = by_id.get(p.approval_event_id or "")
                    assert approval is not None and approval.type == "plan_approved", f"unapproved {p.tool}: {p}"
                    assert approval.seq < e.seq
                    plan = plans[approval.payload.plan_id]
                    step = next(s for s in plan.steps if s.call_id == p.call_id)
                    assert (step.tool, step.arguments) == (p.tool, p.arguments)
                    assert p.reason == f"approved by {approval.payload.by} (plan {plan.plan_id})"
                else:
                    assert p.reason == f"{risk} runs without asking at autonomy {autonomy}"
    assert [(tool, args) for _, tool, args in sorted(executed, key=lambda x: x[0])] == EFFECTS
    assert decisions == decider.given


RUNS = {"autonomy": st.sampled_from(["L0", "L1", "L2", "L3"]), "script": st.lists(TURN, min_size=1, max_size=7),
        "decisions": st.lists(DECISION, max_size=8), "resume_with": st.lists(DECISION, max_size=3)}


def one_run(autonomy: str, script: list[dict[str, Any]], decisions: list[tuple[str, str]],
            resume_with: list[tuple[str, str]]) -> None:
    EFFECTS.clear()
    with tempfile.TemporaryDirectory() as tmp:
        decider = Scripted(decisions)
        agent = Agent(script={"turns": script}, tools=[look, make, remove], autonomy=autonomy, decider=decider,
                      store=Path(tmp) / "nb.ipynb", budget=Budget(max_tool_calls_per_turn=4, max_steps=30),
                      retry_base=0.0, retry_cap=0.0)
        result = asyncio.run(agent.run("do the task"))
        if result.status.value == "waiting" and resume_with:  # the person comes back later, in a new Agent
            decider.decisions.extend(resume_with)
            asyncio.run(agent.resume(result.run_id))
        try:
            check(agent, decider, autonomy)
        finally:
            agent.store.close()


@settings(max_examples=examples(520), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(**RUNS)
def test_no_call_above_autonomy_runs_without_its_own_approval(autonomy: str, script: list[dict[str, Any]],
                                                              decisions: list[tuple[str, str]],
                                                              resume_with: list[tuple[str, str]]) -> None:
    one_run(autonomy, script, decisions, resume_with)


# Runs shaped to exercise grants: few names, repeated calls, and decisions that mostly give one.
NARROW_PATHS = st.sampled_from(["a.txt", "a.txt", "a.txt", "b.txt", "mod.py", "pkg/x.txt", "pkg/__init__.py"])


@st.composite
def narrow_call(draw: Any) -> dict[str, Any]:
    name = draw(st.sampled_from(["look", "make", "make", "make", "remove", "spawn_agent"]))
    args: dict[str, Any] = {"prompt": "sub-task"} if name == "spawn_agent" else {"path": draw(NARROW_PATHS)}
    if name == "make":
        args["content"] = draw(st.sampled_from(["", "x"]))
    out: dict[str, Any] = {"name": name, "arguments": args}
    call_id = draw(IDS)
    if call_id is not None:
        out["id"] = call_id
    return out


NARROW_TURN = st.one_of(st.lists(narrow_call(), min_size=1, max_size=2).map(lambda calls: {"tool_calls": calls}),
                        st.lists(narrow_call(), min_size=1, max_size=2).map(lambda calls: {"tool_calls": calls}),
                        st.just({"content": "finished"}))
GRANTING = st.tuples(st.sampled_from(["approve", "approve", "approve", "deny", "refine"]), st.sampled_from(["", "no"]),
                     st.sampled_from(["run", "session", "run", None]),
                     st.sampled_from([None, None, ["*"], ["*.txt"], ["*.py"], ["pkg/*"], ["**"]]))


@settings(max_examples=examples(300), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(autonomy=st.sampled_from(["L0", "L1", "L2"]), script=st.lists(NARROW_TURN, min_size=2, max_size=8),
       decisions=st.lists(GRANTING, max_size=5), resume_with=st.lists(GRANTING, max_size=2))
def test_grants_never_cover_more_than_the_person_approved(autonomy: str, script: list[dict[str, Any]],
                                                          decisions: list[tuple[Any, ...]],
                                                          resume_with: list[tuple[Any, ...]]) -> None:
    one_run(autonomy, script, decisions, resume_with)
