"""The event types: one pydantic payload model per type, and `Event`, the union over them on `type`.

A run is recorded as a sequence of events; everything else (status, conversation, usage, what is waiting) is
derived from them by `nbagent.events.state.fold`. What every event is whatever its type (its fields, its chain,
how its line is hashed: `EventBase`, `Payload`, `canonical_json`) is envelope.py, re-exported here.

Payloads are pydantic models, one per event type, and `Event` is a discriminated union on `type`. Payload
models allow extra fields so that a reader one minor version behind can still read a newer log.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model

from nbagent.events.effect import Effect
from nbagent.events.envelope import EventBase as EventBase
from nbagent.events.envelope import Payload as Payload
from nbagent.events.envelope import canonical_json as canonical_json
from nbagent.events.envelope import chain_key as chain_key
from nbagent.events.envelope import compute_hash as compute_hash
from nbagent.events.envelope import load_record as load_record
from nbagent.events.levels import Autonomy, Risk

# --------------------------------------------------------------------------------------------- payloads


class Usage(BaseModel):
    model_config = ConfigDict(extra="allow")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class PlanStep(BaseModel):
    model_config = ConfigDict(extra="allow")
    call_id: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    risk: Risk = Risk.WRITE_HIGH_RISK
    target: str | None = None
    preview: str | None = None
    diff: str | None = None
    # why the risk is what it is when the call raised it above the tool's own (a write Python would execute)
    risk_reason: str | None = None
    # sha256 of the call's tool name, canonical arguments and resolved effect: what an approval of this step covers
    # (effects.call_digest; steps recorded before effects were bound: tool and arguments only)
    digest: str | None = None
    # what the call touches, resolved when it was planned (effects.py); None in older logs
    effect: Effect | None = None
    # whether this step needed the decision (the rest of the plan runs without asking); None in older logs
    asks: bool | None = None


class SessionCreated(Payload):
    event_type = "session_created"
    name: str
    notebook: str | None = None
    defaults: dict[str, Any] = Field(default_factory=dict)


class SessionResumed(Payload):
    event_type = "session_resumed"
    pid: int | None = None


class RunStarted(Payload):
    event_type = "run_started"
    prompt: str
    model: str | None = None
    autonomy: Autonomy = Autonomy.L1
    cell_id: str | None = None
    previous_run_id: str | None = None
    parent_run_id: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class RunResumed(Payload):
    """A waiting or interrupted run picked up again (possibly by another process)."""

    event_type = "run_resumed"
    by: str | None = None


class RunSuperseded(Payload):
    """The run was forked away: an earlier cell was re-run. The run stays in the log, marked."""

    event_type = "run_superseded"
    by_run_id: str


class ContextAssembled(Payload):
    """What a run starts from: extra context messages, the system prompt, the tools, the history it continues."""

    event_type = "context_assembled"
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)
    from_run_id: str | None = None
    system: str | None = None
    history_messages: int = 0
    # a replay's standing grants, given at its start (grant_id, covers, by): what backs them (grants.vouched)
    grants: list[dict[str, Any]] = Field(default_factory=list)


class LlmCalled(Payload):
    event_type = "llm_called"
    model: str
    request: dict[str, Any] = Field(default_factory=dict)
    response: dict[str, Any] = Field(default_factory=dict)
    usage: Usage = Field(default_factory=Usage)
    cost: float | None = None
    latency_ms: float = 0.0
    retry_count: int = 0
    fingerprint: str | None = None
    # nbagent's ids for the reply's tool calls, in order (approval.py): the only ids anything is keyed by.
    # None in logs written before nbagent owned call identity.
    call_ids: list[str] | None = None


class Thinking(Payload):
    event_type = "thinking"
    text: str


class PlanningStarted(Payload):
    event_type = "planning_started"
    plan_id: str


class PlanProposed(Payload):
    event_type = "plan_proposed"
    plan_id: str
    purpose: str = ""
    steps: list[PlanStep] = Field(default_factory=list)
    max_risk: Risk = Risk.READ_ONLY
    auto_executing: bool = False
    # what "approve for this run / session" would cover (grants.covers_text), one line per grant; [] when nothing
    # of the plan can be granted (a write Python would run is approved once only)
    grant_offer: list[str] = Field(default_factory=list)


class WaitingForApproval(Payload):
    event_type = "waiting_for_approval"
    plan_id: str
    request_id: str


class PlanApproved(Payload):
    event_type = "plan_approved"
    plan_id: str
    request_id: str | None = None
    by: str = "user"
    # grants this decision gave (the `grant_given` events in the session chain): id, scope, what they cover
    grants: list[dict[str, Any]] = Field(default_factory=list)
    # why a grant asked for with this decision was not given, and what to do (a key that cannot be used...)
    grant_error: str | None = None


class PlanRejected(Payload):
    event_type = "plan_rejected"
    plan_id: str
    request_id: str | None = None
    reason: str = ""
    by: str = "user"
    # grants this decision gave (the `grant_given` events in the session chain): id, scope, what they cover
    grants: list[dict[str, Any]] = Field(default_factory=list)
    # why a grant asked for with this decision was not given, and what to do (a key that cannot be used...)
    grant_error: str | None = None


class PlanRefined(Payload):
    event_type = "plan_refined"
    plan_id: str
    request_id: str | None = None
    feedback: str
    by: str = "user"


class ExecutionStarted(Payload):
    event_type = "execution_started"
    plan_id: str | None = None


class ToolCallStarted(Payload):
    """An allowed attempt: with `decision` and `reason`, the audit line of why it was allowed to run."""

    event_type = "tool_call_started"
    call_id: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    risk: Risk = Risk.WRITE_HIGH_RISK
    target: str | None = None
    decision: str = "allowed"
    reason: str = ""
    # when an approval let the call run: the `plan_approved` event, and what it covered (approval.py)
    approval_event_id: str | None = None
    plan_id: str | None = None
    digest: str | None = None
    risk_reason: str | None = None
    grant_id: str | None = None  # when a grant answered for the person (grants.py)
    effect: Effect | None = None  # what the call touches, resolved right before it ran (effects.py)


class ToolCallCompleted(Payload):
    event_type = "tool_call_completed"
    call_id: str
    tool: str
    duration_ms: float = 0.0
    result: Any = None
    preview: str = ""
    retry_count: int = 0


class ToolCallFailed(Payload):
    event_type = "tool_call_failed"
    call_id: str
    tool: str
    error: str
    error_type: str | None = None
    duration_ms: float = 0.0
    retry_count: int = 0


class AuthorizationDenied(Payload):
    event_type = "authorization_denied"
    call_id: str | None = None
    tool: str
    reason: str
    target: str | None = None
    rule: str | None = None
    grant_id: str | None = None  # a reject grant that answered no (rule grant.reject)
    digest: str | None = None  # then, the call it answered (approval.call_digest), as tool_call_started has it
    effect: Effect | None = None  # what the call would have touched, resolved (effects.py)


class GrantGiven(Payload):
    """A person's yes or no that answers later calls of the same kind (grants.py); in the session's chain."""

    event_type = "grant_given"
    grant_id: str
    effect: Literal["allow", "reject"]
    scope: Literal["run", "session"]
    tool: str
    paths: list[str] = Field(default_factory=list)
    arguments: dict[str, str] = Field(default_factory=dict)
    max_risk: Risk = Risk.READ_ONLY
    by: str = "user"
    expires_at: str | None = None
    run_id: str | None = None  # the run whose decision gave it
    root_run_id: str | None = None  # the run tree a run-scoped grant covers
    plan_id: str | None = None
    request_id: str | None = None
    # a replay's grant answers only the recorded calls it answered, by digest, each as often as listed
    pinned: bool = False
    digests: list[str] = Field(default_factory=list)
    # an HMAC of its terms under the key of the user who gave it (grants.grant_seal): a grant that came with a log
    # from elsewhere, or was written by hand, answers nothing here
    seal: str | None = None


class GrantRevoked(Payload):
    event_type = "grant_revoked"
    grant_id: str
    by: str = "user"
    reason: str = ""


class McpServerTrusted(Payload):
    """A person's (or `--approve all`'s) yes to starting one MCP server entry read from a file (docs/mcp.md); in the
    session's chain. It covers that server, that file and that entry (`digest`): an edited entry asks again."""

    event_type = "mcp_server_trusted"
    server: str
    source: str  # the file the entry came from (absolute)
    # sha256 of the entry's canonical JSON, then "+" and a sha256 of the files it runs (nbagent.mcp.entry_digest)
    digest: str
    command: str = ""  # what it runs, as shown when it was trusted (redacted)
    by: str = "user"
    # HMAC of server, source and digest under a key of this user's, kept outside every project (ipython/trust.py):
    # a trust in a log that came with a cloned repository, or was appended by hand, has no valid seal here
    seal: str | None = None


class HumanInputRequested(Payload):
    event_type = "human_input_requested"
    request_id: str
    question: str
    call_id: str | None = None


class HumanInputReceived(Payload):
    event_type = "human_input_received"
    request_id: str
    answer: str
    call_id: str | None = None
    by: str = "user"


class ChildRunStarted(Payload):
    event_type = "child_run_started"
    child_run_id: str
    prompt: str
    call_id: str | None = None


class AnswerReady(Payload):
    event_type = "answer_ready"
    content: str


class Completed(Payload):
    event_type = "completed"
    summary: str = ""


class CompletedWithErrors(Payload):
    event_type = "completed_with_errors"
    errors: list[str] = Field(default_factory=list)


class Interrupted(Payload):
    event_type = "interrupted"
    reason: str = "interrupted"


class CompactedResult(BaseModel):
    """A tool result sent as a reference from now on (the result itself stays in its run's log)."""

    model_config = ConfigDict(extra="allow")
    run_id: str
    call_id: str
    tokens: int = 0


class ContextCompacted(Payload):
    """What was taken out of the requests to the model from here on, and why (runtime/compaction.py).

    `results`: tool results sent as references (handles `run_id/call_id` that `read_result` pages through);
    `summary`: a summary that stands for the runs in `summarized_runs` (a model's, or an extract when the model's
    summary failed: `summary_error`). A replay folds the same events, so it sends what was sent."""

    event_type = "context_compacted"
    reason: str  # "budget": the next request would pass the window's share; "refused": the provider said too long
    window: int | None = None
    window_source: str | None = None
    tokens_before: int = 0
    tokens_after: int = 0
    results: list[CompactedResult] = Field(default_factory=list)
    summary: str | None = None
    summarized_runs: list[str] = Field(default_factory=list)
    summary_by: str | None = None  # "model" or "extract"
    summary_error: str | None = None
    summary_model: str | None = None  # the model the summary was asked of (None: none was asked)
    provider_message: str | None = None
    usage: Usage = Field(default_factory=Usage)  # of the summary request
    cost: float | None = None

    @property
    def summary_requested(self) -> bool:
        """Whether a model was asked for the summary (a model call of the run): `summary_model`, or, where a log
        does not name it, an answer's usage or a failure. An offline model's extract and a replay's recorded summary
        asked nothing."""
        if self.summary_model is not None or self.summary_error is not None:
            return True
        return bool(self.usage.total_tokens or self.usage.prompt_tokens)


class Error(Payload):
    event_type = "error"
    message: str
    error_type: str | None = None
    traceback: str | None = None
    retry_count: int = 0


PAYLOADS: dict[str, type[Payload]] = {
    cls.event_type: cls
    for cls in (
        SessionCreated, SessionResumed, RunStarted, RunResumed, RunSuperseded, ContextAssembled, LlmCalled,
        Thinking, PlanningStarted, PlanProposed, WaitingForApproval, PlanApproved, PlanRejected, PlanRefined,
        ExecutionStarted, ToolCallStarted, ToolCallCompleted, ToolCallFailed, AuthorizationDenied,
        HumanInputRequested, HumanInputReceived, ChildRunStarted, AnswerReady, Completed, CompletedWithErrors,
        Interrupted, Error, ContextCompacted, GrantGiven, GrantRevoked, McpServerTrusted,
    )
}

# Events after which a run's state is worth making durable (fsync) and caching in the runs table: the
# places a run can stop, wait, or change what it is allowed to do.
CHECKPOINT_TYPES = frozenset({
    "run_started", "run_resumed", "run_superseded", "waiting_for_approval", "plan_approved", "plan_rejected",
    "plan_refined", "human_input_requested", "human_input_received", "answer_ready", "completed",
    "completed_with_errors", "interrupted", "error", "grant_given", "grant_revoked", "mcp_server_trusted",
})

TERMINAL_TYPES = frozenset({"completed", "completed_with_errors", "interrupted", "error"})

# --------------------------------------------------------------------------------------------- events


def _event_model(payload_cls: type[Payload]) -> type[EventBase]:
    name = payload_cls.__name__ + "Event"
    return create_model(
        name,
        __base__=EventBase,
        type=(Literal[payload_cls.event_type], ...),  # type: ignore[arg-type]  # a Literal made at run time
        payload=(payload_cls, ...),
    )


EVENT_MODELS: dict[str, type[EventBase]] = {t: _event_model(p) for t, p in PAYLOADS.items()}

Event = Annotated[Union[tuple(EVENT_MODELS.values())], Field(discriminator="type")]  # type: ignore[valid-type]  # noqa: UP007
_EVENT_ADAPTER: TypeAdapter[EventBase] = TypeAdapter(Event)  # type: ignore[arg-type]  # a union made at run time


class UnknownEventType(ValueError):
    """A log line whose `type` this nbagent does not know (a newer version wrote it).

    `parse_event` no longer raises it (it returns an `UnknownEvent`); kept for code that still catches it.
    """


class UnknownEvent(EventBase):
    """An event of a type this nbagent does not know, written by a newer version.

    Kept, not refused: its raw payload is carried as is, so a newer log can still be listed, shown and
    verified (the hash covers the raw dict, never this model), and folding skips it (no handler).
    """

    payload: Any = None  # the raw payload, whatever a newer nbagent wrote


def parse_event(record: dict[str, Any]) -> EventBase:
    """Raw log dict -> typed event; an unknown `type` (a newer nbagent wrote it) -> `UnknownEvent`."""
    if record.get("type") not in EVENT_MODELS:
        return UnknownEvent.model_validate(record)
    return _EVENT_ADAPTER.validate_python(record)
