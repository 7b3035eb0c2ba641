"""Grants: a decision that also answers later calls of the same kind; what each scope covers and what it never does."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from nbagent.gate import grants
from nbagent.gate.deciders import (
    Answer,
    ApprovalRequest,
    Decider,
    PolicyDecider,
    QuestionRequest,
    RecordedDecider,
    Verdict,
)
from nbagent.gate.grants import GrantError, GrantSpec
from nbagent.gate.policy import Budget
from nbagent.runtime import Agent
from nbagent.runtime.recording import recorded_events
from nbagent.store import Store
from nbagent.store.verify import verify_store
from nbagent.tools.base import tool

EFFECTS: list[tuple[str, dict[str, Any]]] = []


@tool(risk="WRITE_LOW_RISK")
def make(path: str, content: str = "") -> str:
    """Make a file."""
    EFFECTS.append(("make", {"path": path}))
    return f"made {path}"


@tool(risk="WRITE_LOW_RISK")
def touch(path: str) -> str:
    """Touch a file (another tool of the same risk)."""
    EFFECTS.append(("touch", {"path": path}))
    return f"touched {path}"


@tool(risk="WRITE_HIGH_RISK")
def remove(path: str) -> str:
    """Remove a file."""
    EFFECTS.append(("remove", {"path": path}))
    return f"removed {path}"


@tool(risk="WRITE_LOW_RISK")
def note(text: str, mode: str = "a") -> str:
    """A tool with no path."""
    EFFECTS.append(("note", {"text": text, "mode": mode}))
    return "noted"


TOOLS = [make, touch, remove, note]


class Person(Decider):
    """Decisions in order; None (nobody there) when they run out. Counts what it was asked."""

    def __init__(self, *verdicts: Verdict) -> None:
        self.verdicts = list(verdicts)
        self.asked: list[list[str]] = []

    async def decide(self, request: ApprovalRequest) -> Verdict | None:
        self.asked.append([f"{s.tool} {s.arguments.get('path', '')}".strip() for s in request.steps])
        return self.verdicts.pop(0) if self.verdicts else None

    async def answer(self, request: QuestionRequest) -> Answer | None:
        return None


def one(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def script(*turns: dict[str, Any]) -> dict[str, Any]:
    return {"turns": [*turns, {"content": "done"}]}


def agent(tmp: Path, turns: dict[str, Any], decider: Decider, **kw: Any) -> Agent:
    return Agent(script=turns, tools=TOOLS, autonomy="L1", decider=decider, store=kw.pop("store", tmp / "nb.ipynb"),
                 plan_threshold=3, retry_base=0.0, retry_cap=0.0, budget=Budget(max_steps=40), **kw)


def started(store: Store, run_id: str) -> list[Any]:
    return [e.payload for e in store.run_events(run_id) if e.type == "tool_call_started"]


def denied(store: Store, run_id: str) -> list[Any]:
    return [e.payload for e in store.run_events(run_id) if e.type == "authorization_denied"]


@pytest.fixture(autouse=True)
def _clear() -> None:
    EFFECTS.clear()


FOR_RUN = GrantSpec(scope="run")


def test_approve_for_the_run_covers_the_same_tool_and_path_without_asking(tmp_path: Path) -> None:
    person = Person(Verdict.approve(grant=FOR_RUN))
    a = agent(tmp_path, script(one("make", path="report.md", content="1"), one("make", path="./report.md", content="2"),
                               one("make", path="report.md", content="3")), person)
    result = asyncio.run(a.run("write the report three times"))
    assert result.status.value == "completed", result
    assert len(person.asked) == 1  # asked once; the grant answered the next two
    calls = started(a.store, result.run_id)
    assert [c.grant_id is None for c in calls] == [True, False, False]
    given = a.store.query_events(types="grant_given")
    assert len(given) == 1 and given[0].run_id is None  # in the session's chain
    g = given[0].payload
    assert (g.effect, g.scope, g.tool, g.paths, g.max_risk.value) == ("allow", "run", "make", ["report.md"],
                                                                        "WRITE_LOW_RISK")
    assert calls[1].grant_id == g.grant_id and calls[1].reason.startswith(f"allowed by grant {g.grant_id}, given ")
    assert "by user (for this run: make path=report.md up to WRITE_LOW_RISK)" in calls[1].reason
    approved = next(e for e in a.store.run_events(result.run_id) if e.type == "plan_approved")
    assert approved.payload.grants[0]["grant_id"] == g.grant_id
    assert verify_store(a.store).ok


@pytest.mark.parametrize(("second", "why"), [
    (one("touch", path="report.md"), "another tool"),
    (one("make", path="other.md"), "another path"),
    (one("make", path="sub/report.md"), "the same name in another folder"),
    (one("remove", path="report.md"), "another tool, higher risk"),
    ({"tool_calls": [{"name": "make", "arguments": {"path": "report.md"}},
                     {"name": "make", "arguments": {"path": "secret.md"}}]}, "a call that also names another path"),
])
def test_a_run_grant_refuses_what_it_does_not_cover(tmp_path: Path, second: dict[str, Any], why: str) -> None:
    person = Person(Verdict.approve(grant=FOR_RUN))  # then nobody: anything uncovered leaves the run waiting
    a = agent(tmp_path, script(one("make", path="report.md"), second), person)
    result = asyncio.run(a.run("x"))
    assert result.status.value == "waiting", why
    assert len(person.asked) == 2, why
    uncovered = [c for c in second["tool_calls"] if not (c["name"] == "make" and c["arguments"]["path"] == "report.md")]
    assert all(e[1]["path"] != c["arguments"]["path"] or e[0] != c["name"] for e in EFFECTS[1:] for c in uncovered)


def test_no_grant_covers_a_higher_risk_or_a_write_python_would_run(tmp_path: Path) -> None:
    # a pattern wide enough to name mod.py: the call is WRITE_HIGH_RISK (it plants code), above the grant
    person = Person(Verdict.approve(grant=GrantSpec(scope="run", paths=["*"])))
    a = agent(tmp_path, script(one("make", path="a.md"), one("make", path="b.md"), one("make", path="mod.py")),
              person)
    result = asyncio.run(a.run("x"))
    assert result.status.value == "waiting"
    assert [e[1]["path"] for e in EFFECTS] == ["a.md", "b.md"]  # b.md by the grant; mod.py waits for a person
    assert person.asked[-1] == ["make mod.py"]
    # and a plan of code-planting writes offers no grant at all
    state = a.store.run_state(result.run_id)
    assert state.plans[state.pending.plan_id].grant_offer == []


def test_a_code_planting_step_is_approved_once_only(tmp_path: Path) -> None:
    steps_plan = {"tool_calls": [{"name": "make", "arguments": {"path": "mod.py"}},
                                 {"name": "make", "arguments": {"path": "a.md"}}]}
    person = Person(Verdict.approve(grant=FOR_RUN))
    a = agent(tmp_path, script(steps_plan, one("make", path="mod.py"), one("make", path="a.md")), person)
    result = asyncio.run(a.run("x"))
    assert result.status.value == "waiting"
    g = [e.payload for e in a.store.query_events(types="grant_given")]
    assert [(x.tool, x.paths) for x in g] == [("make", ["a.md"])]  # mod.py got no grant
    assert person.asked[-1] == ["make mod.py"]


def test_revoke_and_expiry_end_a_grant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    person = Person(Verdict.approve(grant=GrantSpec(scope="session", expires_in=3600)))
    a = agent(tmp_path, script(one("make", path="r.md")), person)
    first = asyncio.run(a.run("x"))
    (g,) = grants.all_grants(a.store)
    assert g.expires_at is not None and g.active(grants.now())
    # another run of the session: covered, no question
    b = agent(tmp_path, script(one("make", path="r.md")), Person(), store=a.store)
    second = asyncio.run(b.run("again", previous_run_id=first.run_id))
    assert second.status.value == "completed" and started(a.store, second.run_id)[0].grant_id == g.grant_id
    # an hour later it has expired: the next run asks
    later = grants.now() + timedelta(hours=1, seconds=1)
    monkeypatch.setattr(grants, "now", lambda: later)
    asker = Person()
    c = agent(tmp_path, script(one("make", path="r.md")), asker, store=a.store)
    assert asyncio.run(c.run("again")).status.value == "waiting" and asker.asked == [["make r.md"]]
    with pytest.raises(GrantError, match="expired"):
        grants.revoke(a.store, g.grant_id)
    monkeypatch.undo()
    # revoked: asks again; revoking twice is one clear error and records nothing
    line = grants.revoke(a.store, g.grant_id[:12], by="tester", reason="enough")
    assert line.startswith(f"revoked grant {g.grant_id}")
    n = len(a.store.query_events(types="grant_revoked"))
    with pytest.raises(GrantError, match=r'already revoked .* by tester: "enough"; nothing changed'):
        grants.revoke(a.store, g.grant_id)
    # the reason is shown where revocations are listed (issue 46: it was recorded and never shown)
    table = grants.grants_table(a.store, everything=True)
    assert 'by tester: "enough"' in table, table
    assert len(a.store.query_events(types="grant_revoked")) == n == 1
    asker = Person()
    d = agent(tmp_path, script(one("make", path="r.md")), asker, store=a.store)
    assert asyncio.run(d.run("again")).status.value == "waiting" and asker.asked == [["make r.md"]]
    with pytest.raises(GrantError, match="no grant"):
        grants.revoke(a.store, "NOSUCHGRANT")


def test_a_run_grant_ends_with_its_run(tmp_path: Path) -> None:
    a = agent(tmp_path, script(one("make", path="r.md")), Person(Verdict.approve(grant=FOR_RUN)))
    first = asyncio.run(a.run("x"))
    asker = Person()
    b = agent(tmp_path, script(one("make", path="r.md")), asker, store=a.store)
    assert asyncio.run(b.run("again", previous_run_id=first.run_id)).status.value == "waiting"
    assert asker.asked == [["make r.md"]]
    assert "ended with its run" in grants.grants_table(a.store, everything=True)
    assert grants.grants_table(a.store).startswith("no grants in force")


def test_headless_policies_ignore_session_grants(tmp_path: Path) -> None:
    a = agent(tmp_path, script(one("make", path="r.md")), Person(Verdict.approve(grant=GrantSpec(scope="session"))))
    asyncio.run(a.run("x"))
    EFFECTS.clear()
    b = agent(tmp_path, script(one("make", path="r.md")), PolicyDecider("none"), store=a.store)
    result = asyncio.run(b.run("again"))
    assert EFFECTS == [] and started(a.store, result.run_id) == []
    (rejected,) = [e.payload for e in a.store.run_events(result.run_id) if e.type == "plan_rejected"]
    assert rejected.by == "policy:none"  # asked, and the policy answered as its flag says


def test_deny_for_the_run_rejects_matching_calls_without_asking(tmp_path: Path) -> None:
    person = Person(Verdict.deny("not that file", grant=FOR_RUN))
    a = agent(tmp_path, script(one("remove", path="data.csv"), one("remove", path="data.csv"),
                               one("remove", path="other.csv")), person)
    result = asyncio.run(a.run("x"))
    assert result.status.value == "waiting"  # other.csv is not covered: asked
    assert person.asked == [["remove data.csv"], ["remove other.csv"]]
    (d,) = denied(a.store, result.run_id)
    assert d.rule == "grant.reject" and d.grant_id and d.reason.startswith(f"rejected by grant {d.grant_id}")
    assert EFFECTS == []


def test_a_standing_no_holds_when_a_card_lists_the_call_next_to_others(tmp_path: Path) -> None:
    # Was: a yes to a plan listing the exact call won over a reject grant, so one Approve click on a card that also
    # held other calls overrode the person's earlier "no, for this run" (and --approve recorded, which matches only
    # the calls a plan asked about, approved it too). A decision covers the calls it asked about; the card says so.
    both = {"tool_calls": [{"name": "remove", "arguments": {"path": "a.csv"}},
                           {"name": "make", "arguments": {"path": "n.md"}}]}
    person = Person(Verdict.deny(grant=FOR_RUN), Verdict.approve())
    a = agent(tmp_path, script(one("remove", path="a.csv"), both), person)
    result = asyncio.run(a.run("x"))
    assert ("remove", {"path": "a.csv"}) not in EFFECTS and ("make", {"path": "n.md"}) in EFFECTS
    plan = list(a.store.run_state(result.run_id).plans.values())[-1]
    assert [(s.tool, s.asks) for s in plan.steps] == [("remove", False), ("make", True)]
    refused = denied(a.store, result.run_id)[-1]
    assert refused.rule == "grant.reject"


def test_patterns_cover_what_they_say(tmp_path: Path) -> None:
    person = Person(Verdict.approve(grant=GrantSpec(scope="run", paths=["data/*.csv"])))
    a = agent(tmp_path, script(one("make", path="data/a.csv"), one("make", path="data/b.csv"),
                               one("make", path="data/sub/c.csv"), one("make", path="../data/d.csv")), person)
    result = asyncio.run(a.run("x"))
    assert [e[1]["path"] for e in EFFECTS] == ["data/a.csv", "data/b.csv"]
    assert person.asked[-1] == ["make data/sub/c.csv"]  # `*` stays inside a folder
    assert result.status.value == "waiting"
    assert grants.path_matches("data/**/*.csv", "data/sub/c.csv")
    assert not grants.path_matches("**", "../x")  # never past the folder
    assert not grants.path_matches("*", "/etc/passwd")
    assert grants.path_matches(grants.exact("a[1]*.md"), "a[1]*.md") and not grants.path_matches(
        grants.exact("a[1]*.md"), "a1x.md")


def test_argument_patterns_and_tools_without_paths(tmp_path: Path) -> None:
    person = Person(Verdict.approve(grant=GrantSpec(scope="run", arguments={"mode": "a"})))
    a = agent(tmp_path, script(one("note", text="x", mode="a"), one("note", text="y", mode="a"),
                               one("note", text="z", mode="w")), person)
    asyncio.run(a.run("x"))
    assert [e[1]["text"] for e in EFFECTS] == ["x", "y"]
    assert person.asked[-1] == ["note"]


def test_a_pattern_that_matches_nothing_is_an_error_and_decides_nothing(tmp_path: Path) -> None:
    a = agent(tmp_path, script(one("make", path="report.md")), Person())
    result = asyncio.run(a.run("x"))
    before = len(a.store.run_events(result.run_id))
    with pytest.raises(GrantError, match=r"covers none of the calls .*make report.md.*nothing was decided"):
        a.answer_pending(result.run_id, verdict=Verdict.approve(grant=GrantSpec(scope="run", paths=["zzz/*"])))
    assert len(a.store.run_events(result.run_id)) == before
    assert a.store.run_state(result.run_id).pending is not None
    with pytest.raises(GrantError, match="give a duration"):
        grants.parse_duration("soon")


def test_a_run_grant_covers_its_sub_agents(tmp_path: Path) -> None:
    turns = {"turns": [one("make", path="r.md"), one("spawn_agent", prompt="sub"), one("make", path="r.md"),
                       {"content": "sub done"}, {"content": "done"}]}
    person = Person(Verdict.approve(grant=FOR_RUN))
    a = agent(tmp_path, turns, person)
    result = asyncio.run(a.run("x"))
    assert result.status.value == "completed", result
    child = a.store.run_state(result.run_id).children[0]
    assert started(a.store, child)[0].grant_id is not None and len(person.asked) == 1


def test_grants_in_replay_and_recorded_approvals(tmp_path: Path) -> None:
    turns = script(one("make", path="r.md"), one("make", path="r.md"), one("remove", path="x"),
                   one("remove", path="x"))
    a = agent(tmp_path, turns, Person(Verdict.approve(grant=FOR_RUN), Verdict.deny("no", grant=FOR_RUN)))
    first = asyncio.run(a.run("x"))
    assert first.status.value == "completed_with_errors"  # the removes were denied: not done
    original = [(c.tool, c.grant_id is not None) for c in started(a.store, first.run_id)]
    # --approve recorded: the recorded decisions, each with the grants it gave, for the new run only
    EFFECTS.clear()
    rec = RecordedDecider.from_events(recorded_events(a.store, first.run_id), first.run_id)
    b = agent(tmp_path, turns, rec, store=a.store)
    second = asyncio.run(b.run("x again", previous_run_id=first.run_id))
    assert second.status.value == "completed_with_errors", second  # the same denials, again
    assert [(c.tool, c.grant_id is not None) for c in started(a.store, second.run_id)] == original
    again = [g for g in grants.all_grants(a.store) if g.run_id == second.run_id]
    assert {(g.effect, g.scope) for g in again} == {("allow", "run"), ("reject", "run")}
    assert all(g.by == f"recorded:{first.run_id}" for g in again)
    assert [d.rule for d in denied(a.store, second.run_id)] == ["grant.reject"]
    # a replay (no model): same calls, same answers
    r = Agent(replay=first.run_id, tools=TOOLS, autonomy="L1", store=a.store, plan_threshold=3)
    replayed = asyncio.run(r.run("x"))
    assert replayed.status.value == "completed_with_errors", replayed


def test_replay_of_a_run_that_ran_under_a_session_grant(tmp_path: Path) -> None:
    a = agent(tmp_path, script(one("make", path="r.md")), Person(Verdict.approve(grant=GrantSpec(scope="session"))))
    asyncio.run(a.run("x"))
    b = agent(tmp_path, script(one("make", path="r.md")), Person(), store=a.store)
    used = asyncio.run(b.run("y"))
    assert started(a.store, used.run_id)[0].grant_id is not None
    r = Agent(replay=used.run_id, tools=TOOLS, autonomy="L1", store=a.store, plan_threshold=3)
    replayed = asyncio.run(r.run("y"))
    assert replayed.status.value == "completed", replayed  # the grant it ran under is given again, for it only
    (standing,) = [g for g in grants.all_grants(a.store) if g.root_run_id == replayed.run_id]
    assert standing.scope == "run" and standing.by == f"recorded:{used.run_id}"


def test_grants_in_the_cli_show_grants_and_revoke(tmp_path: Path) -> None:
    a = agent(tmp_path, script(one("make", path="r.md"), one("make", path="r.md")),
              Person(Verdict.approve(grant=GrantSpec(scope="session"))))
    result = asyncio.run(a.run("x"))
    a.store.close()
    nb = str(tmp_path / "nb.ipynb")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "nbagent.cli", *args], capture_output=True, text=True,
                              cwd=tmp_path)

    show = cli("show", result.run_id, nb)
    assert show.returncode == 0, show.stderr
    assert "allowed by grant" in show.stdout and "and for the session: make path=r.md" in show.stdout
    listing = cli("grants", nb)
    assert listing.returncode == 0 and "make path=r.md up to WRITE_LOW_RISK" in listing.stdout
    (g,) = grants.all_grants(Store(tmp_path / "nb.ipynb", readonly=True))
    assert f"{g.grant_id}  allow   session" in listing.stdout and listing.stdout.rstrip().endswith("1")
    first = cli("revoke", g.grant_id, nb)
    assert first.returncode == 0 and "revoked grant" in first.stdout
    twice = cli("revoke", g.grant_id, nb)
    assert twice.returncode == 2 and "already revoked" in twice.stderr and twice.stderr.count("\n") == 1
    assert "no grants in force" in cli("grants", nb).stdout
    js = json.loads(cli("show", result.run_id, nb, "--json").stdout)
    assert any(e["payload"].get("grant_id") for e in js if e["type"] == "tool_call_started")


def test_a_grant_ending_on_another_day_shows_its_date(tmp_path: Path) -> None:
    # Was (attack h3b): a grant ending in 2125 was listed "active until 15:51", as if it ended today.
    def ending(ts: str) -> grants.Grant:
        return grants.Grant(effect="allow", scope="session", tool="write_file", grant_id="g1", given_at=ts,
                            expires_at=ts)

    now = grants.now()
    assert ending("2125-03-01T15:51:00Z").status(now) == "active until 2125-03-01 15:51"
    assert ending(now.isoformat()).status(now) == "expired " + now.strftime("%H:%M")  # today: the time alone
