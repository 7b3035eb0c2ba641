"""A run's state, derived from its events: `fold(events) -> RunState`.

The events are the truth; this is the one place that says what they mean. `RunState.apply` is a reducer, so a
store can keep a state current event by event (O(1) per event) and `fold` is just the reduction from nothing.

`messages` is the run's own part of the conversation in OpenAI chat format (context messages, the user's
prompt, each assistant turn, a tool message answering every tool call, feedback from a refine). A run that
continues a conversation prepends the messages of its `previous_run_id` chain; that is the runtime's business,
so forking never rewrites a run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

from nbagent.events.ids import identify
from nbagent.events.levels import Autonomy, Risk
from nbagent.events.model import EventBase, PlanStep, Usage
from nbagent.events.outcomes import code_fault


class RunStatus(StrEnum):
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    COMPLETED_WITH_ERRORS = "completed_with_errors"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    SUPERSEDED = "superseded"


_APPLY_FIELDS = ("event_count", "last_seq", "last_hash", "run_id", "session_id")

_TERMINAL_STATUS = {
    "completed": RunStatus.COMPLETED,
    "completed_with_errors": RunStatus.COMPLETED_WITH_ERRORS,
    "error": RunStatus.FAILED,
    "interrupted": RunStatus.INTERRUPTED,
}


class PendingDecision(BaseModel):
    """What a waiting run needs from a person: a plan to approve, or an answer to a question."""

    kind: Literal["approval", "human_input"]
    request_id: str
    event_id: str
    plan_id: str | None = None
    purpose: str = ""
    steps: list[PlanStep] = Field(default_factory=list)
    question: str | None = None
    call_id: str | None = None


class Decision(BaseModel):
    kind: Literal["approved", "rejected", "refined", "answered"]
    request_id: str | None
    plan_id: str | None = None
    by: str = "user"
    text: str = ""
    ts: str
    event_id: str | None = None
    grants: list[dict[str, Any]] = Field(default_factory=list)  # what the decision also answers ahead (grants.py)
    grant_error: str | None = None  # why the grant asked for was not given


class PlanInfo(BaseModel):
    plan_id: str
    purpose: str = ""
    steps: list[PlanStep] = Field(default_factory=list)
    max_risk: Risk = Risk.READ_ONLY
    auto_executing: bool = False
    status: Literal["proposed", "auto", "approved", "rejected", "refined"] = "proposed"
    approval_event_id: str | None = None  # the `plan_approved` event that let it run (approval.clearance)
    approved_by: str | None = None
    grant_offer: list[str] = Field(default_factory=list)


class StepResult(BaseModel):
    call_id: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    status: Literal["proposed", "running", "ok", "failed", "denied", "rejected", "skipped"] = "proposed"
    result: Any = None
    preview: str = ""
    error: str | None = None
    duration_ms: float = 0.0
    retry_count: int = 0


class RunState(BaseModel):
    run_id: str | None = None
    session_id: str | None = None
    status: RunStatus = RunStatus.RUNNING
    prompt: str = ""
    model: str | None = None
    autonomy: Autonomy = Autonomy.L1
    cell_id: str | None = None
    previous_run_id: str | None = None
    parent_run_id: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    context: list[dict[str, Any]] = Field(default_factory=list)
    turns: list[dict[str, Any]] = Field(default_factory=list)
    pending: PendingDecision | None = None
    decisions: list[Decision] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    cost: float = 0.0
    cost_known: bool = True
    model_calls: int = 0  # the model's replies (nbagent's call ids count them: nb{k}_{i})
    summary_calls: int = 0  # the summary requests of compactions: model calls too, in every count shown
    steps: dict[str, StepResult] = Field(default_factory=dict)
    plans: dict[str, PlanInfo] = Field(default_factory=dict)
    plan_of: dict[str, str] = Field(default_factory=dict)  # call_id -> plan_id
    last_llm_event_id: str | None = None
    recorded_own: int = 0  # own messages already written into llm_called requests (delta encoding)
    tool_calls_started: int = 0  # the step budget counts these
    model_attempts: int = 0  # model calls including retries: the turn counter of offline models
    children: list[str] = Field(default_factory=list)
    compactions: list[Any] = Field(default_factory=list)  # context_compacted payloads, in order (compaction.py)
    call_ids_seen: set[str] = Field(default_factory=set)  # nbagent's call ids so far: each is unique in the run
    answer: str | None = None
    errors: list[str] = Field(default_factory=list)
    error: str | None = None
    superseded_by: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    last_seq: int = 0
    last_hash: str | None = None
    event_count: int = 0

    @property
    def messages(self) -> list[dict[str, Any]]:
        prompt = [{"role": "user", "content": self.prompt}] if self.prompt else []
        return [*self.context, *prompt, *self.turns]

    @property
    def all_model_calls(self) -> int:
        """Every call made to the model: its replies and the summary requests (what the counts and budgets say)."""
        return self.model_calls + self.summary_calls

    @property
    def tokens(self) -> int:
        return self.usage.total_tokens

    @property
    def is_terminal(self) -> bool:
        return self.status not in (RunStatus.RUNNING, RunStatus.WAITING)

    # ------------------------------------------------------------------ the reducer

    def apply(self, event: EventBase) -> RunState:
        # what `self.event_count += 1; self.last_seq = ...` does (a plain model: no validation on assignment), in
        # one go: this runs for every event recorded or read
        d = self.__dict__
        d["event_count"] += 1
        d["last_seq"], d["last_hash"] = event.seq, event.hash
        d["run_id"] = d["run_id"] or event.run_id
        d["session_id"] = d["session_id"] or event.session_id
        self.__pydantic_fields_set__.update(_APPLY_FIELDS)
        handler = getattr(self, "_on_" + event.type, None)
        if handler is not None:
            handler(event.payload, event)
        return self

    def _on_run_started(self, p: Any, e: EventBase) -> None:
        self.prompt, self.model, self.autonomy = p.prompt, p.model, p.autonomy
        self.cell_id, self.previous_run_id, self.parent_run_id = p.cell_id, p.previous_run_id, p.parent_run_id
        self.options = dict(p.options)
        self.started_at = e.ts
        self.status = RunStatus.RUNNING

    def _on_run_resumed(self, p: Any, e: EventBase) -> None:
        if self.status != RunStatus.SUPERSEDED:
            self.status = RunStatus.WAITING if self.pending else RunStatus.RUNNING
            self.ended_at = None

    def _on_run_superseded(self, p: Any, e: EventBase) -> None:
        self.status, self.superseded_by = RunStatus.SUPERSEDED, p.by_run_id

    def _on_context_assembled(self, p: Any, e: EventBase) -> None:
        self.context = list(p.messages)

    def _on_llm_called(self, p: Any, e: EventBase) -> None:
        self.model_calls += 1
        self.model_attempts += 1 + p.retry_count
        self.last_llm_event_id = e.id
        own_from = p.request.get("own_from")
        if isinstance(own_from, int):
            self.recorded_own = own_from + len(p.request.get("messages") or [])
        self.usage = added(self.usage, p.usage)
        if p.cost is None:
            self.cost_known = False
        else:
            self.cost += max(0.0, p.cost)
        message = assistant_message(p.response)
        if message is not None:
            calls = message.get("tool_calls") or []
            # nbagent's ids replace the model's (ids.identify): every key after this is one nbagent chose
            ids = identify([c.get("id") for c in calls], getattr(p, "call_ids", None), self.call_ids_seen, e.id)
            for call, call_id in zip(calls, ids, strict=True):
                call["id"] = call_id
            self.turns.append(message)

    def _on_plan_proposed(self, p: Any, e: EventBase) -> None:
        self.plans[p.plan_id] = PlanInfo(
            plan_id=p.plan_id, purpose=p.purpose, steps=p.steps, max_risk=p.max_risk, auto_executing=p.auto_executing,
            status="auto" if p.auto_executing else "proposed", grant_offer=list(getattr(p, "grant_offer", None) or []),
        )
        for s in p.steps:
            self.plan_of[s.call_id] = p.plan_id
        for s in p.steps:
            self.steps.setdefault(s.call_id, StepResult(call_id=s.call_id, tool=s.tool, arguments=s.arguments))

    def _on_waiting_for_approval(self, p: Any, e: EventBase) -> None:
        plan = self.plans.get(p.plan_id) or PlanInfo(plan_id=p.plan_id)
        self.pending = PendingDecision(
            kind="approval", request_id=p.request_id, event_id=e.id, plan_id=p.plan_id,
            purpose=plan.purpose, steps=plan.steps,
        )
        self._wait()

    def _on_plan_approved(self, p: Any, e: EventBase) -> None:
        self._decide("approved", p, e, "")
        plan = self.plans.get(p.plan_id)
        if plan is not None and plan.status == "proposed":  # a decision counts once, for a plan still open
            plan.status, plan.approval_event_id, plan.approved_by = "approved", e.id, p.by

    def _on_plan_rejected(self, p: Any, e: EventBase) -> None:
        self._decide("rejected", p, e, p.reason)
        self._plan_status(p.plan_id, "rejected")
        self._close_plan(p.plan_id, "rejected", f"Not executed: the user denied this plan. Reason: {p.reason}")

    def _on_plan_refined(self, p: Any, e: EventBase) -> None:
        self._decide("refined", p, e, p.feedback)
        self._plan_status(p.plan_id, "refined")
        self._close_plan(p.plan_id, "skipped", "Not executed: the user asked for a different plan.")
        self.turns.append({"role": "user", "content": p.feedback})

    def _on_tool_call_started(self, p: Any, e: EventBase) -> None:
        self.tool_calls_started += 1
        self._step(p).__dict__.update(arguments=p.arguments, status="running")

    def _on_tool_call_completed(self, p: Any, e: EventBase) -> None:
        self._step(p).__dict__.update(status="ok", result=p.result, preview=p.preview, duration_ms=p.duration_ms,
                                      retry_count=p.retry_count)
        self.turns.append(tool_message(p.call_id, p.result))
        # a cell whose code raised or was stopped completed (the model reads its traceback) but did not do what was
        # asked: an error of the run, which then ends completed_with_errors as after a failed tool (outcomes.py)
        fault = code_fault(p.tool, p.result)
        if fault is not None:
            self.errors.append(f"{p.tool}: {fault.sentence(p.duration_ms)}")

    def _on_tool_call_failed(self, p: Any, e: EventBase) -> None:
        self._step(p).__dict__.update(status="failed", error=p.error, duration_ms=p.duration_ms,
                                      retry_count=p.retry_count)
        self.errors.append(f"{p.tool}: {p.error}")
        self.turns.append(tool_message(p.call_id, f"Error: {p.error}"))

    def _on_authorization_denied(self, p: Any, e: EventBase) -> None:
        # a person's no given ahead (a reject grant) is a rejection, as a denied plan is, not an error of the run
        by_person = p.rule == "grant.reject"
        if not by_person:
            self.errors.append(f"{p.tool}: denied: {p.reason}")
        if p.call_id:
            step = self._step(p)
            step.status, step.error = ("rejected" if by_person else "denied"), p.reason
            # what the model reads names no grant id or time, so a replay (whose grant is a new one) asks the same
            self.turns.append(tool_message(p.call_id, "Rejected by the user: they said no to calls like this one"
                                           if by_person else f"Denied by policy: {p.reason}"))

    def _on_human_input_requested(self, p: Any, e: EventBase) -> None:
        self.pending = PendingDecision(
            kind="human_input", request_id=p.request_id, event_id=e.id, question=p.question, call_id=p.call_id
        )
        self._wait()

    def _on_human_input_received(self, p: Any, e: EventBase) -> None:
        self._decide("answered", p, e, p.answer)
        if p.call_id:
            self.turns.append(tool_message(p.call_id, p.answer))
            if p.call_id in self.steps:
                self.steps[p.call_id].status, self.steps[p.call_id].result = "ok", p.answer

    def _on_child_run_started(self, p: Any, e: EventBase) -> None:
        self.children.append(p.child_run_id)

    def _on_answer_ready(self, p: Any, e: EventBase) -> None:
        self.answer = p.content

    def _on_completed(self, p: Any, e: EventBase) -> None:
        self._end("completed", e)

    def _on_completed_with_errors(self, p: Any, e: EventBase) -> None:
        self.errors.extend(x for x in p.errors if x not in self.errors)
        self._end("completed_with_errors", e)

    def _on_context_compacted(self, p: Any, e: EventBase) -> None:
        self.compactions.append(p)
        if p.summary_requested:
            self.summary_calls += 1
        if p.usage.total_tokens or p.usage.prompt_tokens:  # the summary request is a model call of the run
            self.usage = added(self.usage, p.usage)
        if p.cost is not None:
            self.cost += max(0.0, p.cost)

    def _on_error(self, p: Any, e: EventBase) -> None:
        self.error = p.message
        self._end("error", e)

    def _on_interrupted(self, p: Any, e: EventBase) -> None:
        self._end("interrupted", e)  # a pending decision survives: the run can be resumed and answered

    # ------------------------------------------------------------------ helpers

    def _step(self, p: Any) -> StepResult:
        """The step of a call (`steps.setdefault(call_id, StepResult(...))`, built only when missing).

        Its fields are then written to its `__dict__` (what assigning them does on a model without validation on
        assignment) without marking them as set: a set of 5+ field names is 0.5 KB a step, kept as long as the
        run's state; nothing dumps a state with `exclude_unset`."""
        step = self.steps.get(p.call_id)
        if step is None:
            step = self.steps[p.call_id] = StepResult(call_id=p.call_id, tool=p.tool)
        return step

    def _plan_status(self, plan_id: str, status: Any) -> None:
        plan = self.plans.get(plan_id)
        if plan is not None and plan.status == "proposed":  # a decision counts once, for a plan still open
            plan.status = status

    def open_calls(self) -> list[dict[str, Any]]:
        """Tool calls of the last assistant turn that no tool message answers yet (what a resumed run does next)."""
        for i in range(len(self.turns) - 1, -1, -1):
            m = self.turns[i]
            if m["role"] == "assistant":
                answered = {t.get("tool_call_id") for t in self.turns[i + 1:] if t["role"] == "tool"}
                return [c for c in m.get("tool_calls") or [] if c.get("id") not in answered]
        return []

    def _wait(self) -> None:
        if self.status != RunStatus.SUPERSEDED:
            self.status = RunStatus.WAITING

    def _end(self, type_: str, e: EventBase) -> None:
        self.ended_at = e.ts
        if self.status != RunStatus.SUPERSEDED:
            self.status = _TERMINAL_STATUS[type_]

    def _decide(self, kind: Any, p: Any, e: EventBase, text: str) -> None:
        self.decisions.append(Decision(
            kind=kind, request_id=p.request_id, plan_id=getattr(p, "plan_id", None), by=p.by, text=text, ts=e.ts,
            event_id=e.id, grants=list(getattr(p, "grants", None) or []), grant_error=getattr(p, "grant_error", None),
        ))
        if self.pending is not None and (p.request_id is None or p.request_id == self.pending.request_id):
            self.pending = None
            if self.status == RunStatus.WAITING:  # an interrupted run stays so until it is resumed
                self.status = RunStatus.RUNNING

    def _close_plan(self, plan_id: str, status: Any, text: str) -> None:
        plan = self.plans.get(plan_id)
        for call_id in [s.call_id for s in plan.steps] if plan else []:
            step = self.steps[call_id]
            if step.status == "proposed":
                step.status = status
                self.turns.append(tool_message(call_id, text))


def fold(events: Iterable[EventBase], state: RunState | None = None) -> RunState:
    state = state if state is not None else RunState()
    for event in events:
        state.apply(event)
    return state


def assistant_message(response: dict[str, Any]) -> dict[str, Any] | None:
    """The assistant message of a recorded (OpenAI-format) model response."""
    try:
        message = response["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c.get("id"), "type": "function",
             "function": {"name": c["function"].get("name"), "arguments": c["function"].get("arguments", "")}}
            for c in message["tool_calls"]
        ]
    return out


def added(a: Usage, b: Usage) -> Usage:
    """Two usages summed (`cached_tokens`, input read from a provider's cache, only when there were any)."""
    cached = (getattr(a, "cached_tokens", 0) or 0) + (getattr(b, "cached_tokens", 0) or 0)
    # a count below zero (a log written by anything but this runtime, which floors usage: usage.py) adds nothing:
    # a fold never subtracts, so no recorded event can refill a budget
    prompt, completion, total = (max(0, n) for n in (b.prompt_tokens, b.completion_tokens, b.total_tokens))
    return Usage(prompt_tokens=a.prompt_tokens + prompt, completion_tokens=a.completion_tokens + completion,
                 total_tokens=a.total_tokens + (total or prompt + completion),
                 **({"cached_tokens": cached} if cached else {}))


def tool_message(call_id: str, result: Any) -> dict[str, Any]:
    # keys sorted, as the log holds them: a result read back from the log (another kernel, `nbagent run`, a replay)
    # is then sent byte for byte as it was sent live, so replays match and providers' prompt caches hit
    content = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str,
                                                               sort_keys=True)
    return {"role": "tool", "tool_call_id": call_id, "content": content}
