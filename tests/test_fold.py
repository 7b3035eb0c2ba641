"""fold(events) -> RunState over hand-written event sequences, one per status and then some."""

from __future__ import annotations

import pytest
from helpers import llm, new_run

from nbagent.events import model as E
from nbagent.events.model import PlanStep
from nbagent.events.state import RunState, RunStatus, fold
from nbagent.store import Store

CALLS = [("c1", "read_file", {"path": "a.csv"}), ("c2", "create_file", {"path": "r.md", "content": "x"})]
STEPS = [
    PlanStep(call_id="c1", tool="read_file", arguments={"path": "a.csv"}, risk="READ_ONLY"),
    PlanStep(call_id="c2", tool="create_file", arguments={"path": "r.md", "content": "x"}, risk="WRITE_LOW_RISK",
             diff="+x"),
]


def propose(store: Store, run: str) -> None:
    store.append(llm(None, CALLS), run_id=run)
    store.append(E.PlanProposed(plan_id="p1", purpose="write the report", steps=STEPS, max_risk="WRITE_LOW_RISK"),
                 run_id=run)
    store.append(E.WaitingForApproval(plan_id="p1", request_id="r1"), run_id=run)


def state(store: Store, run: str) -> RunState:
    folded = fold(store.run_events(run))
    assert folded == store.run_state(run)  # incremental and from-scratch folds agree
    return folded


def test_running_after_start(store: Store) -> None:
    run = new_run(store, "hello")
    s = state(store, run)
    assert s.status == RunStatus.RUNNING and s.prompt == "hello" and s.messages == [
        {"role": "user", "content": "hello"}
    ]


def test_completed_with_answer_usage_and_messages(store: Store) -> None:
    run = new_run(store, "sum it")
    store.append(llm(None, [("c1", "read_file", {"path": "a.csv"})], tokens=(10, 5), cost=0.25), run_id=run)
    store.append(E.ToolCallStarted(call_id="c1", tool="read_file", arguments={"path": "a.csv"}), run_id=run)
    store.append(E.ToolCallCompleted(call_id="c1", tool="read_file", result="1,2", duration_ms=4), run_id=run)
    store.append(llm("The sum is 3.", tokens=(20, 7), cost=0.5), run_id=run)
    store.append(E.AnswerReady(content="The sum is 3."), run_id=run)
    store.append(E.Completed(), run_id=run)
    s = state(store, run)
    assert s.status == RunStatus.COMPLETED and s.answer == "The sum is 3." and s.ended_at
    assert (s.usage.prompt_tokens, s.usage.completion_tokens, s.tokens) == (30, 12, 42)
    assert s.cost == pytest.approx(0.75) and s.cost_known and s.model_calls == 2
    assert s.steps["c1"].status == "ok" and s.steps["c1"].result == "1,2" and s.steps["c1"].duration_ms == 4
    roles = [m["role"] for m in s.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert s.messages[1]["tool_calls"][0]["function"]["name"] == "read_file"
    assert s.messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "1,2"}


def test_unknown_cost_is_not_reported_as_zero(store: Store) -> None:
    run = new_run(store)
    store.append(llm("x", cost=None), run_id=run)
    assert not state(store, run).cost_known


def test_waiting_for_approval_then_approved(store: Store) -> None:
    run = new_run(store)
    propose(store, run)
    s = state(store, run)
    assert s.status == RunStatus.WAITING
    assert s.pending and s.pending.kind == "approval" and s.pending.request_id == "r1"
    assert [st.tool for st in s.pending.steps] == ["read_file", "create_file"] and s.pending.purpose
    store.append(E.PlanApproved(plan_id="p1", request_id="r1", by="user"), run_id=run)
    s = state(store, run)
    assert s.status == RunStatus.RUNNING and s.pending is None and s.decisions[0].kind == "approved"


def test_rejected_plan_answers_every_call_for_the_model(store: Store) -> None:
    run = new_run(store)
    propose(store, run)
    store.append(E.PlanRejected(plan_id="p1", request_id="r1", reason="not now"), run_id=run)
    s = state(store, run)
    assert s.status == RunStatus.RUNNING and s.pending is None
    assert {st.status for st in s.steps.values()} == {"rejected"}
    tool_msgs = [m for m in s.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["c1", "c2"] and "not now" in tool_msgs[0]["content"]


def test_refined_plan_feeds_back_the_feedback(store: Store) -> None:
    run = new_run(store)
    propose(store, run)
    store.append(E.PlanRefined(plan_id="p1", request_id="r1", feedback="use report.md instead"), run_id=run)
    s = state(store, run)
    assert s.messages[-1] == {"role": "user", "content": "use report.md instead"}
    assert {st.status for st in s.steps.values()} == {"skipped"} and s.decisions[-1].kind == "refined"


def test_waiting_for_human_input_then_answered(store: Store) -> None:
    run = new_run(store)
    store.append(llm(None, [("c9", "ask_human", {"question": "Which year?"})]), run_id=run)
    store.append(E.HumanInputRequested(request_id="h1", question="Which year?", call_id="c9"), run_id=run)
    s = state(store, run)
    assert s.status == RunStatus.WAITING and s.pending and s.pending.question == "Which year?"
    store.append(E.HumanInputReceived(request_id="h1", answer="2024", call_id="c9"), run_id=run)
    s = state(store, run)
    assert s.status == RunStatus.RUNNING and s.pending is None
    assert s.messages[-1] == {"role": "tool", "tool_call_id": "c9", "content": "2024"}


def test_stale_decision_does_not_clear_another_request(store: Store) -> None:
    run = new_run(store)
    propose(store, run)
    store.append(E.PlanApproved(plan_id="p0", request_id="old"), run_id=run)
    s = state(store, run)
    assert s.status == RunStatus.WAITING and s.pending and s.pending.request_id == "r1"


def test_completed_with_errors_after_denied_and_failed_steps(store: Store) -> None:
    run = new_run(store)
    store.append(llm(None, CALLS), run_id=run)
    store.append(E.AuthorizationDenied(call_id="c2", tool="create_file", reason="outside the folder"), run_id=run)
    store.append(E.ToolCallFailed(call_id="c1", tool="read_file", error="timeout", retry_count=3), run_id=run)
    store.append(E.CompletedWithErrors(errors=["create_file: denied: outside the folder"]), run_id=run)
    s = state(store, run)
    assert s.status == RunStatus.COMPLETED_WITH_ERRORS
    assert s.steps["c2"].status == "denied" and s.steps["c1"].status == "failed" and s.steps["c1"].retry_count == 3
    assert len(s.errors) == 2  # the denial and the failure, not duplicated by the final event
    assert [m["tool_call_id"] for m in s.messages if m["role"] == "tool"] == ["c2", "c1"]


def test_failed(store: Store) -> None:
    run = new_run(store)
    store.append(E.Error(message="model unreachable after 5 retries", error_type="APIConnectionError"), run_id=run)
    s = state(store, run)
    assert s.status == RunStatus.FAILED and s.error == "model unreachable after 5 retries"


def test_interrupted_while_waiting_keeps_the_pending_decision_and_resumes(store: Store) -> None:
    run = new_run(store)
    propose(store, run)
    store.append(E.Interrupted(reason="KeyboardInterrupt"), run_id=run)
    s = state(store, run)
    assert s.status == RunStatus.INTERRUPTED and s.pending and s.pending.request_id == "r1"
    store.append(E.RunResumed(by="%agent resume"), run_id=run)
    assert state(store, run).status == RunStatus.WAITING
    store.append(E.PlanApproved(plan_id="p1", request_id="r1"), run_id=run)
    assert state(store, run).status == RunStatus.RUNNING


def test_interrupted_run_answered_directly_stays_interrupted_until_resumed(store: Store) -> None:
    run = new_run(store)
    propose(store, run)
    store.append(E.Interrupted(), run_id=run)
    store.append(E.PlanApproved(plan_id="p1", request_id="r1"), run_id=run)
    s = state(store, run)
    assert s.status == RunStatus.INTERRUPTED and s.pending is None
    store.append(E.RunResumed(), run_id=run)
    assert state(store, run).status == RunStatus.RUNNING


def test_superseded_is_final_whatever_follows(store: Store) -> None:
    run = new_run(store)
    store.append(E.Completed(), run_id=run)
    store.append(E.RunSuperseded(by_run_id="01NEWER"), run_id=run)
    s = state(store, run)
    assert s.status == RunStatus.SUPERSEDED and s.superseded_by == "01NEWER" and s.is_terminal


def test_child_runs_and_context(store: Store) -> None:
    run = new_run(store, "parent")
    store.append(E.ContextAssembled(messages=[{"role": "system", "content": "be brief"}], tools=["read_file"]),
                 run_id=run)
    store.append(E.ChildRunStarted(child_run_id="01CHILD", prompt="sub task"), run_id=run)
    s = state(store, run)
    assert s.children == ["01CHILD"]
    assert s.messages[:2] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "parent"}]


def test_fold_of_nothing_is_an_empty_running_state() -> None:
    s = fold([])
    assert s.status == RunStatus.RUNNING and s.event_count == 0 and s.messages == []
