"""What the parts of the agent share: the per-run working data, the one way the runtime writes, the result.

`Agent` (agent.py) is assembled from parts, one module each (the loop, a turn's calls, calling a tool,
decisions and grants, the run tree, the history). They share the attributes `AgentBase` declares and the
`_record` it defines: every event the runtime writes passes through `_record`, where it is redacted, so no
part can skip that.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from nbagent.events.levels import Risk
from nbagent.events.model import AuthorizationDenied, EventBase, Payload, Usage
from nbagent.events.state import RunState, RunStatus
from nbagent.gate import grants as grants_
from nbagent.gate.effects import Effect
from nbagent.gate.policy import Denial

if TYPE_CHECKING:
    from nbagent.events.bus import EventBus
    from nbagent.gate.deciders import Decider
    from nbagent.gate.policy import Authorizer, AuthPolicy, Budget
    from nbagent.models.base import LocalModel
    from nbagent.models.reply import Fingerprint, ModelError, ModelReply, ModelSettings
    from nbagent.models.tool_calls import ToolCallRequest
    from nbagent.scope.rules import ScopeGuard
    from nbagent.secrets.redactor import Redactor
    from nbagent.store import SessionRecord, Store
    from nbagent.tools.base import Tool

MAX_RESULT_CHARS = 1_000_000  # kept whole in the log; what a request sends is sized in tokens (compaction.py)


def cut(text: str, what: str) -> str:
    """`text` as the log keeps it: whole up to MAX_RESULT_CHARS, else its start and a note of how much it had (a
    tool's result, its error, a model's answer: none of them makes the log grow by megabytes unsaid)."""
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return (text[:MAX_RESULT_CHARS] + f"… [truncated: the {what} had {len(text):,} characters; the log keeps the "
            f"first {MAX_RESULT_CHARS:,}]")


CONTROL_RISK = Risk.READ_ONLY


class RunResult(BaseModel):
    """What `Agent.run` returns: the run's derived state, summarised."""

    run_id: str
    status: RunStatus
    answer: str | None = None
    error: str | None = None
    errors: list[str] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    cost: float | None = None
    steps: int = 0
    model_calls: int = 0
    pending: dict[str, Any] | None = None
    children: list[str] = Field(default_factory=list)
    log_path: str = ""

    @property
    def ok(self) -> bool:
        return self.status in (RunStatus.COMPLETED, RunStatus.COMPLETED_WITH_ERRORS)


class RunStateError(Exception):
    """The run is not in a state that allows what was asked (resume a finished run, answer a running one)."""


class RunContext:
    """Per-run working data that is *not* state: caches and handles, all rebuildable from the events."""

    def __init__(self, run_id: str, root_id: str, depth: int, turn: list[int]) -> None:
        self.run_id = run_id
        self.root_id = root_id
        self.depth = depth
        self.turn = turn  # shared across a run tree: offline models count model attempts per tree
        self.fingerprint: Fingerprint | None = None
        self.prefix: list[dict[str, Any]] = []
        self.history: list[tuple[str, list[dict[str, Any]]]] = []  # the prefix's history, run by run (history.py)
        self.run_names: dict[str, str] = {}  # run id -> its name in result handles ("r3")
        self.next_tokens: tuple[int, bool] | None = None  # the next request's input tokens, and whether counted
        self.window_limit: int | None = None  # the window the last request was fitted to (None: unknown)
        self.refused_once = False  # this turn's request was refused for its length once already (fitting.py)
        # (messages looked at, the last of them, what they are sent as) for a run without a window (fitting._capped)
        self.capped: tuple[int, dict[str, Any] | None, list[dict[str, Any]]] = (0, None, [])
        self.stop: list[str] = []  # budget or policy reasons to finish after the current turn
        self.grants = grants_.InForce()  # the grants in force, re-read when the session's chain grew
        self.blocked = False  # a sub-agent waits for a decision nobody can give now: so does this run



class AgentBase:
    """The attributes every part of `Agent` reads (set by `Agent.__init__`), and the one way it writes."""

    store: Store
    session: SessionRecord
    path_guard: ScopeGuard
    autonomy: Any
    tools: dict[str, Tool]
    code_paths: list[str]
    budget: Budget
    policy: AuthPolicy
    authorizer: Authorizer
    plan_threshold: int
    system_prompt: str
    bus: EventBus
    stream: bool
    tool_timeout: float | None
    tool_retries: int
    redactor: Redactor
    replay_source: str | None
    settings: ModelSettings
    decider: Decider
    _local: LocalModel | None
    _local_key: str | None
    _legacy_ids: bool

    if TYPE_CHECKING:  # what the parts call of each other (each is defined in the part named)
        # loop.py
        async def _drive(self, ctx: RunContext) -> RunResult: ...
        # calls.py
        async def _handle_calls(self, ctx: RunContext, state: RunState, open_calls: list[dict[str, Any]]
                                ) -> None: ...
        def _allowed_tools(self, run_id: str, state: RunState | None = None) -> dict[str, Tool]: ...
        def _schemas(self, run_id: str, state: RunState | None = None) -> list[dict[str, Any]]: ...
        # invoke.py
        async def _call_tool(self, tool: Tool, args: dict[str, Any]) -> tuple[Any, int]: ...
        async def _control(self, ctx: RunContext, call: ToolCallRequest, args: dict[str, Any],
                           parent: str | None) -> None: ...
        async def _spawn(self, ctx: RunContext, call: ToolCallRequest, parent: str | None, *,
                         resume: bool) -> None: ...
        def _child_of_call(self, state: RunState, call_id: str) -> Iterator[str]: ...
        # decisions.py
        async def _settle(self, ctx: RunContext, state: RunState) -> bool: ...
        def _grants(self, ctx: RunContext, state: RunState) -> list[grants_.Grant]: ...
        # tree.py
        def _root_of(self, run_id: str) -> str: ...
        def _tree_sums(self, root: str, state: RunState) -> tuple[int, float, int, int]: ...
        # fitting.py
        async def _fit(self, ctx: RunContext, state: RunState, tools: list[dict[str, Any]],
                       own: list[dict[str, Any]]) -> list[dict[str, Any]] | None: ...
        async def _refused(self, ctx: RunContext, state: RunState, tools: list[dict[str, Any]],
                           own: list[dict[str, Any]], exc: ModelError) -> bool: ...
        def _estimate(self, ctx: RunContext, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                      exact: bool = False) -> dict[str, Any] | None: ...
        def _window_options(self) -> dict[str, Any] | None: ...
        def _spent(self, ctx: RunContext, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   reply: ModelReply, counted: int | None = None) -> tuple[Usage, float | None]: ...
        # history.py
        def _prefix(self, ctx: RunContext, state: RunState) -> list[dict[str, Any]]: ...
        def _history(self, ctx: RunContext, state: RunState) -> None: ...
        # agent.py
        async def _start(self, prompt: str, *, previous_run_id: str | Literal["auto"] | None = "auto",
                         fork_of: str | None = None, cell_id: str | None = None,
                         context: list[dict[str, Any]] | None = None, parent_run_id: str | None = None,
                         tools: list[str] | None = None, options: dict[str, Any] | None = None, depth: int = 0,
                         turn: list[int] | None = None) -> RunResult: ...
        def result(self, run_id: str) -> RunResult: ...

    @property
    def model(self) -> str:
        """The model's name (`provider/name`, or `nbagent/scripted`, `nbagent/function`, `nbagent/replay`)."""
        return self.settings.model

    def _record(self, run_id: str, payload: Payload, parent: str | None = None) -> EventBase:
        """The one way the runtime writes: every payload is redacted here, so no path can skip it."""
        # (the store writes `clean` as validated: dumping the validated payload again gives the same dict)
        clean = self.redactor.redact(payload.model_dump(mode="json", fallback=repr))
        try:
            event = self.store.append(type(payload).model_validate(clean), run_id=run_id, parent_event_id=parent,
                                      payload_json=clean)
        except UnicodeEncodeError:  # a lone surrogate from the model (half an emoji): kept as U+FFFD, not a crash
            clean = _valid_text(clean)
            event = self.store.append(type(payload).model_validate(clean), run_id=run_id, parent_event_id=parent,
                                      payload_json=clean)
        self.bus.event(event)
        return event

    def _deny(self, run_id: str, call_id: str | None, tool: str, denial: Denial, target: str | None,
              parent: str | None = None, grant_id: str | None = None, digest: str | None = None,
              effect: Effect | None = None) -> None:
        """Record that a call (or the model call: `tool` "(model)") was refused, and by which rule."""
        self._record(run_id, AuthorizationDenied(call_id=call_id, tool=tool, reason=denial.reason, target=target,
                                                 rule=denial.rule, grant_id=grant_id, digest=digest, effect=effect),
                     parent=parent)


def _valid_text(value: Any) -> Any:
    """The same structure with every unpaired surrogate replaced by U+FFFD (UTF-8 cannot hold one)."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if isinstance(value, dict):
        return {_valid_text(k): _valid_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_valid_text(v) for v in value]
    return value


def ms_since(t0: float) -> float:
    """Milliseconds since `t0` (a `time.perf_counter()` reading), rounded as every recorded `duration_ms` is."""
    return round((time.perf_counter() - t0) * 1000, 3)
