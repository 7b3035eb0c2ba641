"""The agent loop with the scripted and function models: autonomy, decisions, errors, budgets, resuming."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from agents import CALLS, RISKY, TOOLS, agent, call, run, turns, types

from nbagent.events.levels import Autonomy, Risk
from nbagent.events.state import RunStatus
from nbagent.gate.deciders import InteractiveDecider, PolicyDecider, Verdict
from nbagent.gate.policy import APPROVAL_TABLE, AuthPolicy, Budget
from nbagent.runtime import Agent, RunStateError


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    CALLS.clear()


# ---------------------------------------------------------------------------------------------- autonomy


@pytest.mark.parametrize("autonomy", list(Autonomy))
@pytest.mark.parametrize("risk", list(Risk))
def test_every_cell_of_the_autonomy_table(autonomy: Autonomy, risk: Risk, tmp_path: Path) -> None:
    tool = RISKY[risk.value]
    args = {"path": "r.md", "content": "x"} if tool.name == "create_file" else {"path": "r.md"}
    a = agent(tmp_path, turns([call(tool.name, **args)], "finished"), autonomy=autonomy)
    result = run(a)
    expected = APPROVAL_TABLE[autonomy][risk]
    if expected == "run":
        assert result.status == RunStatus.COMPLETED and [(tool.name, args)] == CALLS
        assert "plan_proposed" not in types(a, result.run_id)
    else:
        assert result.status == RunStatus.WAITING and CALLS == []
        assert result.pending and result.pending["kind"] == "approval"
        plan = next(e for e in a.store.run_events(result.run_id) if e.type == "plan_proposed").payload
        assert plan.max_risk == risk and not plan.auto_executing and plan.steps[0].tool == tool.name


def test_table_is_the_one_in_the_design() -> None:
    rows = {a.value: [APPROVAL_TABLE[a][r] for r in Risk] for a in Autonomy}
    assert rows == {"L0": ["propose"] * 3, "L1": ["run", "propose", "propose"], "L2": ["run", "run", "propose"],
                    "L3": ["run"] * 3}


def test_three_read_only_calls_are_a_plan_that_runs_at_once(tmp_path: Path) -> None:
    a = agent(tmp_path, turns([call("read_file", path=p) for p in "abc"], "read them"))
    result = run(a)
    assert result.status == RunStatus.COMPLETED and len(CALLS) == 3
    plan = next(e for e in a.store.run_events(result.run_id) if e.type == "plan_proposed").payload
    assert plan.auto_executing and plan.max_risk == Risk.READ_ONLY and len(plan.steps) == 3
    assert "execution_started" in types(a, result.run_id) and "waiting_for_approval" not in types(a, result.run_id)


def test_plan_threshold_is_configurable(tmp_path: Path) -> None:
    a = agent(tmp_path, turns([call("read_file", path=p) for p in "ab"], "ok"), plan_threshold=2)
    assert "plan_proposed" in types(a, run(a).run_id)


# ---------------------------------------------------------------------------------------------- decisions


def test_approve_from_another_thread(tmp_path: Path) -> None:
    decider = InteractiveDecider(poll=0.01)
    a = agent(tmp_path, turns([call("create_file", path="r.md", content="hi")], "written"), decider=decider)

    async def main() -> Any:
        task = asyncio.create_task(a.run("write it"))
        while not decider.waiting():
            await asyncio.sleep(0.005)
        request = decider.waiting()[0]
        import threading

        results: list[bool] = []
        t = threading.Thread(target=lambda: results.append(decider.resolve(request.request_id, Verdict.approve())))
        t.start()
        t.join()
        assert results == [True]
        assert decider.resolve(request.request_id, Verdict.approve()) is False  # a duplicate click does nothing
        return await task

    result = asyncio.run(main())
    assert result.status == RunStatus.COMPLETED and CALLS == [("create_file", {"path": "r.md", "content": "hi"})]
    assert result.answer == "written"


def test_stale_request_id_is_ignored(tmp_path: Path) -> None:
    decider = InteractiveDecider(poll=0.01)
    assert decider.resolve("01NOTWAITING", Verdict.approve()) is False


def test_deny_feeds_the_reason_back_to_the_model(tmp_path: Path) -> None:
    seen: list[list[dict[str, Any]]] = []

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        seen.append(messages)
        if len(seen) == 1:
            return {"tool_calls": [call("delete_file", path="data.csv")]}
        return "Understood, I left data.csv alone."

    a = Agent(function=model, tools=TOOLS, decider=PolicyDecider("none"), store=tmp_path / "nb.ipynb")
    result = asyncio.run(a.run("clean up"))
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS and CALLS == []  # a denied plan is not done (docs)
    tool_msg = seen[1][-1]
    assert tool_msg["role"] == "tool" and "denied" in tool_msg["content"] and "approve=none" in tool_msg["content"]
    assert "plan_rejected" in types(a, result.run_id)


def test_refine_makes_the_model_replan(tmp_path: Path) -> None:
    verdicts = [Verdict.refine("call it summary.md"), Verdict.approve()]

    class Scripted(PolicyDecider):
        async def decide(self, request: Any) -> Verdict:
            return verdicts.pop(0)

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        last = messages[-1]
        if last["role"] == "user" and last["content"] == "write a report":
            return {"tool_calls": [call("create_file", path="report.md", content="x")]}
        if last["role"] == "user" and "summary.md" in last["content"]:
            return {"tool_calls": [call("create_file", path="summary.md", content="x")]}
        return "done"

    a = Agent(function=model, tools=TOOLS, decider=Scripted(), store=tmp_path / "nb.ipynb")
    result = asyncio.run(a.run("write a report"))
    assert result.status == RunStatus.COMPLETED
    assert CALLS == [("create_file", {"path": "summary.md", "content": "x"})]
    assert types(a, result.run_id).count("plan_proposed") == 2 and "plan_refined" in types(a, result.run_id)


def test_verdict_refine_needs_feedback() -> None:
    with pytest.raises(ValueError, match="feedback"):
        Verdict.refine("  ")


# ---------------------------------------------------------------------------------------------- waiting, resuming


def test_ask_human_answered_in_a_new_process(tmp_path: Path) -> None:
    script = turns([call("ask_human", question="Which year?")], [call("read_file", path="2024.csv")],
                   "2024 it is")
    (tmp_path / "script.json").write_text(json.dumps(script))
    a = agent(tmp_path, script)
    first = run(a, "summarise the year")
    assert first.status == RunStatus.WAITING and first.pending["question"] == "Which year?"
    a.store.close()

    code = textwrap.dedent(f"""
        import asyncio, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from agents import agent
        from pathlib import Path
        a = agent(Path({str(tmp_path)!r}), {str(tmp_path / "script.json")!r})
        r = asyncio.run(a.resume({first.run_id!r}, answer="2024"))
        print(r.status.value, r.answer)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "completed 2024 it is"
    again = agent(tmp_path, script)
    state = again.store.run_state(first.run_id)
    assert state.status == RunStatus.COMPLETED
    assert {"role": "tool", "tool_call_id": "nb1_0", "content": "2024"} in state.messages
    assert state.steps["nb2_0"].result == "contents of 2024.csv"


def test_waiting_approval_resumed_with_a_verdict(tmp_path: Path) -> None:
    script = turns([call("delete_file", path="old.csv")], "deleted")
    a = agent(tmp_path, script)
    first = run(a)
    assert first.status == RunStatus.WAITING
    b = agent(tmp_path, script)  # a new Agent: only the store is shared
    result = asyncio.run(b.resume(first.run_id, verdict=Verdict.approve(by="code")))
    assert result.status == RunStatus.COMPLETED and CALLS == [("delete_file", {"path": "old.csv"})]
    assert b.store.run_state(first.run_id).decisions[-1].by == "code"
    with pytest.raises(RunStateError, match="already ended"):
        asyncio.run(b.resume(first.run_id))


def test_interrupt_while_waiting_then_approve(tmp_path: Path) -> None:
    decider = InteractiveDecider(poll=0.01)
    script = turns([call("create_file", path="r.md", content="x")], "ok")
    a = agent(tmp_path, script, decider=decider)

    async def main() -> None:
        task = asyncio.create_task(a.run("go"))
        while not decider.waiting():
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    run_id = a.store.run_ids()[-1]
    state = a.store.run_state(run_id)
    assert state.status == RunStatus.INTERRUPTED and state.pending is not None
    a.answer_pending(run_id, verdict=Verdict.approve())
    result = asyncio.run(a.resume(run_id))
    assert result.status == RunStatus.COMPLETED and len(CALLS) == 1
    assert types(a, run_id)[-1] == "completed" and "run_resumed" in types(a, run_id)


def test_interrupt_during_a_tool_is_not_rerun_on_resume(tmp_path: Path) -> None:
    started = asyncio.Event()

    from nbagent.tools.base import tool

    @tool(risk="READ_ONLY")
    async def slow(n: int) -> str:
        """Takes long."""
        started.set()
        await asyncio.sleep(30)
        return "never"

    a = agent(tmp_path, turns([call("slow", n=1)], "after"), tools=[slow])

    async def main() -> None:
        task = asyncio.create_task(a.run("go"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    run_id = a.store.run_ids()[-1]
    assert a.store.run_state(run_id).status == RunStatus.INTERRUPTED
    result = asyncio.run(a.resume(run_id))
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS
    step = a.store.run_state(run_id).steps["nb1_0"]
    assert step.status == "failed" and "not re-run" in (step.error or "")


# ---------------------------------------------------------------------------------------------- spawn_agent


def test_spawn_agent_runs_a_child_with_its_own_events(tmp_path: Path) -> None:
    script = turns(
        [call("spawn_agent", prompt="add 2 and 3", tools=["add"])],  # parent
        [call("add", a=2, b=3)],  # child
        "the sum is 5",  # child answer
        "The sub-agent says the sum is 5.",  # parent answer
    )
    a = agent(tmp_path, script)
    result = run(a, "delegate")
    assert result.status == RunStatus.COMPLETED and result.answer == "The sub-agent says the sum is 5."
    assert len(result.children) == 1
    child = a.store.run_state(result.children[0])
    assert child.parent_run_id == result.run_id and child.status == RunStatus.COMPLETED
    assert child.answer == "the sum is 5" and child.steps["nb1_0"].result == 5
    parent = a.store.run_state(result.run_id)
    assert parent.steps["nb1_0"].result["answer"] == "the sum is 5"
    assert "child_run_started" in types(a, result.run_id)
    assert a.latest_run_id() == result.run_id  # a child is never what the next cell continues


# ---------------------------------------------------------------------------------------------- partial results


def test_failing_and_denied_steps_leave_partial_results(tmp_path: Path) -> None:
    script = turns([call("read_file", path="a.csv"), call("explode", reason="disk on fire")],
                   [call("read_file", path="../etc/passwd")], "partial answer")
    a = agent(tmp_path, script)
    result = run(a)
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS and result.answer == "partial answer"
    state = a.store.run_state(result.run_id)
    assert state.steps["nb1_0"].status == "ok" and state.steps["nb1_1"].status == "failed"
    assert "disk on fire" in (state.steps["nb1_1"].error or "")
    denied = next(e for e in a.store.run_events(result.run_id) if e.type == "authorization_denied").payload
    assert denied.rule == "path_traversal" and denied.tool == "read_file"
    assert [c[0] for c in CALLS] == ["read_file", "explode"]


def test_deny_list_and_allow_list(tmp_path: Path) -> None:
    script = turns([call("read_file", path="a"), call("add", a=1, b=2)], "ok")
    a = agent(tmp_path, script, policy=AuthPolicy(deny_tools={"read_file"}))
    result = run(a)
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS and CALLS == [("add", {"a": 1, "b": 2})]
    b = agent(tmp_path, script, policy=AuthPolicy(allow_tools={"read_file"}))
    result = run(b)
    reasons = [e.payload.reason for e in b.store.run_events(result.run_id) if e.type == "authorization_denied"]
    assert reasons == ["the tool 'add' is not on the allow-list"]


def test_shell_metacharacters_in_shell_like_tools(tmp_path: Path) -> None:
    from nbagent.tools.base import tool

    @tool(risk="READ_ONLY", shell_like=True)
    def grep(pattern: str) -> str:
        """Search."""
        return "found"

    a = agent(tmp_path, turns([call("grep", pattern="x; rm -rf ~")], "ok"), tools=[grep])
    result = run(a)
    denied = next(e for e in a.store.run_events(result.run_id) if e.type == "authorization_denied").payload
    assert denied.rule == "shell_metacharacters" and "';'" in denied.reason


def test_transient_tool_failure_is_retried(tmp_path: Path) -> None:
    from nbagent.tools.base import tool

    attempts: list[int] = []

    @tool(risk="READ_ONLY")
    def flaky(x: int) -> str:
        """Fails once with a connection error."""
        attempts.append(x)
        if len(attempts) == 1:
            raise ConnectionError("reset by peer")
        return "fine"

    a = agent(tmp_path, turns([call("flaky", x=1)], "ok"), tools=[flaky])
    result = run(a)
    done = next(e for e in a.store.run_events(result.run_id) if e.type == "tool_call_completed").payload
    assert result.status == RunStatus.COMPLETED and done.retry_count == 1 and done.result == "fine"


@pytest.mark.parametrize(("failures", "error", "retries", "calls", "outcome", "retry_count"), [
    (0, ConnectionError, 2, 1, "ok", 0),
    (1, ConnectionError, 2, 2, "ok", 1),
    (2, ConnectionError, 2, 3, "ok", 2),
    (5, ConnectionError, 2, 3, "failed", 2),  # given up after tool_retries, as tenacity's stop says
    (5, ConnectionError, 0, 1, "failed", 0),
    (5, ValueError, 2, 1, "failed", 0),  # not transient: never retried
])
def test_a_tools_first_attempt_outside_tenacity_keeps_its_retries(
        tmp_path: Path, failures: int, error: type[Exception], retries: int, calls: int, outcome: str,
        retry_count: int) -> None:
    """The first attempt is made without tenacity (runtime._call_tool); a transient failure hands over to it, so
    the attempts, the retry count and the final error are what tenacity alone gave."""
    from nbagent.tools.base import tool

    made: list[int] = []

    @tool(risk="READ_ONLY")
    def flaky(x: int) -> str:
        """Fails `failures` times."""
        made.append(x)
        if len(made) <= failures:
            raise error(f"failure {len(made)}")
        return "fine"

    a = agent(tmp_path, turns([call("flaky", x=1)], "ok"), tools=[flaky], tool_retries=retries, retry_base=0.001)
    result = run(a)
    end = next(e for e in a.store.run_events(result.run_id) if e.type in ("tool_call_completed", "tool_call_failed"))
    assert len(made) == calls and end.payload.retry_count == retry_count
    assert end.type == ("tool_call_completed" if outcome == "ok" else "tool_call_failed")
    if outcome == "failed":
        assert end.payload.error_type == error.__name__ and f"failure {calls}" in end.payload.error


# ---------------------------------------------------------------------------------------------- budgets


@pytest.mark.parametrize(("budget", "rule"), [
    (Budget(max_steps=2), "budget.max_steps"),
    (Budget(max_tokens=300), "budget.max_tokens"),
    (Budget(max_cost=0.0002), "budget.max_cost"),
    (Budget(max_model_calls=2), "budget.max_model_calls"),
])
def test_budgets_stop_a_run_with_a_clear_reason(budget: Budget, rule: str, tmp_path: Path) -> None:
    script = turns(*[[call("read_file", path=f"{i}.csv")] for i in range(6)], "never reached")
    a = agent(tmp_path, script, budget=budget)
    result = run(a)
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS
    denial = next(e for e in a.store.run_events(result.run_id) if e.type == "authorization_denied").payload
    assert denial.rule == rule
    assert any("exhausted" in e or "limit" in e for e in result.errors), result.errors
    assert len(CALLS) < 6


def test_calls_per_hour_counts_every_run_in_the_store(tmp_path: Path) -> None:
    a = agent(tmp_path, turns("one"), budget=Budget(max_calls_per_hour=1))
    assert run(a).status == RunStatus.COMPLETED
    b = agent(tmp_path, turns("two"), budget=Budget(max_calls_per_hour=1))
    result = run(b)
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS and "1 model calls in the last hour" in result.errors[0]


# ---------------------------------------------------------------------------------------------- conversation


def test_next_run_continues_and_fork_supersedes(tmp_path: Path) -> None:
    seen: list[list[dict[str, Any]]] = []

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        seen.append(messages)
        return f"answer to {messages[-1]['content']}"

    a = Agent(function=model, tools=TOOLS, store=tmp_path / "nb.ipynb")
    r1 = asyncio.run(a.run("first", cell_id="c1"))
    r2 = asyncio.run(a.run("second", cell_id="c2"))
    r3 = asyncio.run(a.run("third", cell_id="c3"))
    assert [m["content"] for m in seen[2] if m["role"] == "user"] == ["first", "second", "third"]
    # re-run cell c2: the fork starts from the state after r1; r2 and r3 are superseded
    r2b = asyncio.run(a.run("second, edited", cell_id="c2", fork_of=r2.run_id))
    assert [m["content"] for m in seen[3] if m["role"] == "user"] == ["first", "second, edited"]
    states = {r: a.store.run_state(r) for r in (r1.run_id, r2.run_id, r3.run_id, r2b.run_id)}
    assert states[r1.run_id].status == RunStatus.COMPLETED
    assert states[r2.run_id].status == states[r3.run_id].status == RunStatus.SUPERSEDED
    assert states[r2.run_id].superseded_by == r2b.run_id
    assert a.latest_run_id() == r2b.run_id
    assert len(a.store.run_events(r2.run_id)) > 3  # nothing deleted
