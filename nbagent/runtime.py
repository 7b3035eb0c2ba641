"""The agent loop: plain asyncio, no IPython, everything it does recorded as events.

The loop is driven by the run's *derived* state (`store.run_state`, a fold of its events), never by local
variables that a crash would lose. Each turn of `_drive` asks what the events say comes next:

    terminal?            -> stop
    a pending decision?  -> ask the Decider; no answer -> leave the run `waiting` and return
    open tool calls?     -> (plan them,) authorize and execute them
    an answer recorded?  -> finish (`completed` or `completed_with_errors`)
    otherwise            -> check budgets, call the model, record `llm_called`

So resuming a run in a new process is the same loop started on the same events: nothing else is needed.

A model turn with tool calls becomes a plan when it has `plan_threshold` (3) or more calls, or when any call
is above the run's autonomy (the approval table in `policy.py`). A plan is proposed with its purpose, steps,
risks and previews; it either runs at once (`auto_executing`) or waits for approval. Approve runs it, Deny
answers every call with the reason, Refine answers them as skipped and adds the feedback for the model.
Malformed calls (invalid JSON, unknown tool, wrong argument types, more calls than allowed) are answered with
an error the model sees, before any planning.
"""

from __future__ import annotations

import asyncio
import json
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from filelock import Timeout as FileLockTimeout
from pydantic import BaseModel, Field, SecretStr

from . import grants as grants_
from .approval import assign_call_ids, call_risk, clearance, needs_decision
from .bus import EventBus
from .deciders import (
    Answer,
    ApprovalRequest,
    Decider,
    InteractiveDecider,
    QuestionRequest,
    RecordedDecider,
    Verdict,
)
from .effects import CallInfo, Effect, bound, call_digest, resolve
from .events import (
    AnswerReady,
    AuthorizationDenied,
    ChildRunStarted,
    Completed,
    CompletedWithErrors,
    ContextAssembled,
    Error,
    EventBase,
    ExecutionStarted,
    GrantGiven,
    HumanInputReceived,
    HumanInputRequested,
    Interrupted,
    LlmCalled,
    Payload,
    PlanApproved,
    PlanningStarted,
    PlanProposed,
    PlanRefined,
    PlanRejected,
    PlanStep,
    RunResumed,
    RunSuperseded,
    Thinking,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallStarted,
    Usage,
    WaitingForApproval,
)
from .ids import new_id
from .levels import Autonomy, Risk
from .llm import (
    Fingerprint,
    ModelError,
    ModelSettings,
    ToolCallRequest,
    accepts_images,
    complete,
    is_transient,
    parse_tool_calls,
)
from .models.base import LocalModel
from .policy import Authorizer, AuthPolicy, Budget, Denial, TreeUsage, hour_ago_iso
from .scope import Scope, ScopeGuard
from .secrets import Redactor, StreamRedactor
from .state import RunState, RunStatus, assistant_message
from .store import Store
from .tools.base import Tool, ToolError, ToolLike, as_tools
from .tools.control import CONTROL_TOOLS

DEFAULT_SYSTEM_PROMPT = """\
You are nbagent, an assistant working inside a researcher's Jupyter notebook. Use the tools to look before you
answer; never guess file contents. Changes you propose may need the user's approval; if a plan is denied, do
not try to achieve the same change another way. When the task is done, give a short final answer in Markdown
(or call respond_to_user). If the request is ambiguous, call ask_human."""

MAX_RESULT_CHARS = 50_000
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


# Scope refusals that state a fact about the folder, not a policy: the call fails as an error (a denial is reserved
# for what the person or the configuration forbids: outside, excluded, a switched-off operation, a size limit...)
FILE_FACTS = frozenset({"scope.missing", "scope.exists", "scope.not_a_file", "scope.not_a_folder", "scope.changed",
                        "scope.unreadable", "scope.symlink_loop"})


class _Ctx:
    """Per-run working data that is *not* state: caches and handles, all rebuildable from the events."""

    def __init__(self, run_id: str, root_id: str, depth: int, turn: list[int]) -> None:
        self.run_id = run_id
        self.root_id = root_id
        self.depth = depth
        self.turn = turn  # shared across a run tree: offline models count model attempts per tree
        self.fingerprint: Fingerprint | None = None
        self.prefix: list[dict[str, Any]] = []
        self.stop: list[str] = []  # budget or policy reasons to finish after the current turn
        self.grants_seen = -1  # events of the session's chain when `grants` was read (grants change rarely)
        self.grants: dict[str, grants_.Grant] = {}
        self.blocked = False  # a sub-agent waits for a decision nobody can give now: so does this run


class Agent:
    """An agent: a model, tools, an autonomy level, a decider, and the store that records every run.

        agent = Agent(model="nbagent/scripted", script="turns.json", tools=[read_csv], autonomy="L1",
                      decider=PolicyDecider("low"), store="analysis.ipynb")
        result = await agent.run("Which region sold most?")
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        tools: Iterable[ToolLike] | None = None,
        autonomy: Autonomy | str | None = None,
        decider: Decider | None = None,
        store: Store | str | Path | None = None,
        session: str = "default",
        script: Any = None,
        function: Callable[..., Any] | None = None,
        local_model: LocalModel | None = None,
        replay: str | None = None,
        budget: Budget | None = None,
        policy: AuthPolicy | None = None,
        plan_threshold: int = 3,
        system_prompt: str | None = None,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 4,
        retry_base: float = 0.5,
        retry_cap: float = 20.0,
        model_params: dict[str, Any] | None = None,
        tool_timeout: float | None = 300.0,
        tool_retries: int = 2,
        bus: EventBus | None = None,
        stream: bool = False,
        scope: Scope | str | Path | None = None,
        code_paths: Iterable[str] = (),
    ) -> None:
        self.store = store if isinstance(store, Store) else Store(store or Path.cwd() / "agent.nbagent")
        # where path arguments of tools without a scope of their own may point: the notebook's folder
        if not isinstance(scope, Scope):
            folder = Path(scope) if scope is not None else self.store.path.parent
            scope = Scope(root=folder, base=folder)
        self.path_guard = ScopeGuard(scope)
        self.session = self.store.session(session)
        # L1 by default; a replay, by default, at the autonomy it was recorded at, so it asks what the recording
        # asked (at another autonomy it runs what that autonomy runs: at L3, a recorded no answers nothing)
        if autonomy is None and replay is not None:
            autonomy = self.store.run_state(self.store.resolve_run(replay)).autonomy
        self.autonomy = Autonomy(autonomy or Autonomy.L1)
        if tools is None:  # not given: the file tools of the scope's folder, their writes undoable (tools=[]: none)
            from .blobs import BlobStore
            from .tools.files import file_tools

            tools = file_tools(scope, BlobStore.of_store(self.store.path))
        self.tools = as_tools(tools)
        # files the host's settings name as code that runs later (an MCP configuration given to --mcp): a write of
        # one is WRITE_HIGH_RISK whatever its name (runs_later.py)
        # (and the files an MCP tool's server runs: its script rewritten is the server's code, mcp.code_files)
        self.code_paths = list(dict.fromkeys([*(str(p) for p in code_paths),
                                              *(str(f) for t in self.tools.values()
                                                for f in getattr(t, "code_files", None) or ())]))
        clash = set(self.tools) & set(CONTROL_TOOLS)
        if clash:
            raise ValueError(f"tool names reserved for control tools: {sorted(clash)}")
        self.budget = budget or Budget()
        self.policy = policy or AuthPolicy()
        self.authorizer = Authorizer(self.policy, self.budget)
        self.plan_threshold = plan_threshold
        self.system_prompt = DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt
        self.bus = bus or EventBus()
        self.stream = stream
        self.tool_timeout = tool_timeout
        self.tool_retries = tool_retries
        self.redactor = Redactor([api_key])
        self.replay_source = replay
        self._local: LocalModel | None = local_model
        self._legacy_ids = False
        if replay is not None:
            from .models.replay import ReplayModel
            from .replay import recorded_calls, recorded_events

            recording = recorded_calls(self.store, replay)
            self._local = ReplayModel(recording, source=f"run {replay}")
            # a recording from before nbagent named the calls itself is replayed with the model's ids, so the
            # replayed requests are the recorded ones; keys stay unique in the run either way (approval.identify)
            self._legacy_ids = any(c.call_ids is None and c.response_calls for c in recording)
            decider = decider or RecordedDecider.from_events(recorded_events(self.store, replay), replay)
            model = "nbagent/replay"
        elif script is not None:
            from .models.scripted import ScriptedModel

            self._local = ScriptedModel(script)
            model = model or "nbagent/scripted"
        elif function is not None:
            from .models.function import FunctionModel

            self._local = FunctionModel(function)
            model = model or "nbagent/function"
        if model is None:
            raise ValueError("no model: pass model='provider/name' (any litellm model), or script=PATH for the "
                             "offline scripted model")
        self._local_key: str | None = None
        if self._local is not None:
            from .models.provider import register_local

            self._local_key = register_local(self._local)
        self.settings = ModelSettings(
            model=model, api_base=api_base, api_key=SecretStr(api_key) if api_key else None, timeout=timeout,
            max_retries=max_retries, retry_base=retry_base, retry_cap=retry_cap, params=model_params or {},
        )
        self.decider = decider or InteractiveDecider()

    # ------------------------------------------------------------------ public API

    @property
    def model(self) -> str:
        return self.settings.model

    async def run(
        self,
        prompt: str,
        *,
        previous_run_id: str | Literal["auto"] | None = "auto",
        fork_of: str | None = None,
        cell_id: str | None = None,
        context: list[dict[str, Any]] | None = None,
        parent_run_id: str | None = None,
        tools: list[str] | None = None,
        options: dict[str, Any] | None = None,
        _depth: int = 0,
        _turn: list[int] | None = None,
    ) -> RunResult:
        """Start a run. It continues the session's conversation (`previous_run_id="auto"`: the latest run), or
        `fork_of` an earlier run: the new run starts from the state before it, and that run and every run
        after it in its chain are marked superseded (never deleted)."""
        if fork_of is not None:
            previous_run_id = self.store.run_state(fork_of).previous_run_id
        elif previous_run_id == "auto" and self.replay_source is not None and parent_run_id is None:
            previous_run_id = self.store.run_state(self.replay_source).previous_run_id  # the recording's start
        elif previous_run_id == "auto":
            previous_run_id = None if parent_run_id else self.latest_run_id()
        options = {**(options or {}), **({"tools": tools} if tools is not None else {})}
        run = self.store.create_run(
            self.session.id, self.redactor.text(prompt), model=self.model, autonomy=self.autonomy, cell_id=cell_id,
            previous_run_id=previous_run_id, parent_run_id=parent_run_id, options=options, lease=True,
        )
        try:  # the lease taken with the run is held until it has been driven
            self.bus.event(self.store.run_events(run.id)[0])
            if fork_of is not None:
                for old in self.successors(fork_of):
                    if self.store.in_progress(old):
                        continue  # another kernel is running it now: the two runs complete side by side, as siblings
                    self._record(old, RunSuperseded(by_run_id=run.id))
            history = self.conversation(previous_run_id) if previous_run_id else []
            ctx = _Ctx(run.id, run.id if _turn is None else self._root_of(run.id), _depth, _turn or [0])
            tool_names = [t["function"]["name"] for t in self._schemas(run.id)]
            # a replay runs under the grants its recording ran under; its own chain lists them first, which is what
            # backs them (grants.vouched): a grant appended to the log later names no such start
            standing = [(new_id(), terms) for terms in self.decider.standing_grants] if parent_run_id is None else []
            by = f"recorded:{self.replay_source or 'run'}"
            self._record(run.id, ContextAssembled(
                messages=context or [], tools=tool_names, from_run_id=previous_run_id,
                system=self.system_prompt, history_messages=len(history),
                grants=[{"grant_id": gid, "covers": grants_.covers_text(t), "by": by} for gid, t in standing],
            ))
            for gid, terms in standing:
                self._give_grant(run.id, run.id, None, None, terms, by=by, expires_at=None, grant_id=gid)
            return await self._drive(ctx)
        finally:
            self.store.release_lease(run.id)

    async def resume(self, run_id: str, verdict: Verdict | None = None, answer: Answer | str | None = None
                     ) -> RunResult:
        """Continue a waiting or interrupted run (in this process or any other), optionally answering it."""
        run_id = self.store.resolve_run(run_id)
        state = self.store.run_state(run_id)
        if state.status == RunStatus.SUPERSEDED:
            raise RunStateError(f"run {run_id} was superseded by {state.superseded_by}; it cannot be resumed")
        if state.status in (RunStatus.COMPLETED, RunStatus.COMPLETED_WITH_ERRORS, RunStatus.FAILED):
            raise RunStateError(f"run {run_id} has already ended ({state.status.value}); nothing to resume")
        if self.store.in_progress(run_id):
            raise RunStateError(f"run {run_id} is being run by another process (another kernel or `nbagent run` of "
                                "this notebook); wait for it to end, then look at it with `nbagent show`")
        was = state.status  # (the store's state object is live: read it before it changes)
        if verdict is not None or answer is not None:
            self.answer_pending(run_id, verdict=verdict, answer=answer)
        if was in (RunStatus.INTERRUPTED, RunStatus.WAITING):
            self._record(run_id, RunResumed(by="resume"))
        root = self._root_of(run_id)
        ctx = _Ctx(run_id, root, 0, [self._tree_attempts(root)])
        return await self._drive(ctx)

    def answer_pending(self, run_id: str, *, verdict: Verdict | None = None, answer: Answer | str | None = None
                       ) -> EventBase:
        """Record a decision for a waiting (or interrupted-while-waiting) run without running it."""
        run_id = self.store.resolve_run(run_id)
        state = self.store.run_state(run_id)
        pending = state.pending
        if pending is None:
            raise RunStateError(f"run {run_id} is not waiting for a decision (status {state.status.value})")
        if pending.kind == "approval":
            if verdict is None:
                raise RunStateError(f"run {run_id} waits for an approval of plan {pending.plan_id}: approve, deny "
                                    "or refine it")
            return self._record_verdict(run_id, pending.plan_id or "", pending.request_id, pending.event_id, verdict)
        if verdict is not None and verdict.grant is not None:
            raise RunStateError(f"run {run_id} waits for an answer to a question, not an approval: a grant needs a "
                                "plan to approve or deny")
        if answer is None:
            raise RunStateError(f"run {run_id} waits for an answer to: {pending.question}")
        ans = Answer(text=answer) if isinstance(answer, str) else answer
        return self._record(run_id, HumanInputReceived(
            request_id=pending.request_id, answer=ans.text, call_id=pending.call_id, by=ans.by,
        ), parent=pending.event_id)

    def latest_run_id(self) -> str | None:
        """The session's latest top-level run that was not forked away: what a new run continues."""
        for run in reversed(self.store.list_runs(self.session.id)):
            if run.parent_run_id is None and run.status != RunStatus.SUPERSEDED:
                return run.id
        return None

    def successors(self, run_id: str) -> list[str]:
        """The run and every run that continues it, directly or not (what a fork supersedes)."""
        runs = self.store.list_runs(self.session.id)
        chain = {run_id}
        for r in runs:  # ULID order: a successor is always newer than what it continues
            if r.previous_run_id in chain:
                chain.add(r.id)
        return [r.id for r in runs if r.id in chain and r.status != RunStatus.SUPERSEDED]

    def conversation(self, run_id: str | None) -> list[dict[str, Any]]:
        """The messages a run leaves behind, after those of the runs it continues (oldest first)."""
        chain: list[str] = []
        while run_id is not None and run_id not in chain:
            chain.append(run_id)
            run_id = self.store.run_state(run_id).previous_run_id
        messages: list[dict[str, Any]] = []
        for rid in reversed(chain):
            messages.extend(_closed(self.store.run_state(rid).messages))
        return messages

    def result(self, run_id: str) -> RunResult:
        """The run's outcome; a run whose sub-agent waits for a decision is `waiting`, with the sub-agent's
        pending request (and its `run_id`) as its own."""
        s = self.store.run_state(run_id)
        status, pending = s.status, s.pending.model_dump(mode="json") if s.pending else None
        if status == RunStatus.RUNNING and pending is None:
            waiting = self._waiting_descendant(s)
            if waiting is not None:
                status = RunStatus.WAITING
                pending = {**waiting.pending.model_dump(mode="json"), "run_id": waiting.run_id}  # type: ignore[union-attr]
        return RunResult(
            run_id=run_id, status=status, answer=s.answer, error=s.error, errors=list(s.errors), usage=s.usage,
            cost=s.cost if s.cost_known else None, steps=len(s.steps), model_calls=s.model_calls,
            pending=pending, children=list(s.children), log_path=str(self.store.path),
        )

    def _waiting_descendant(self, state: RunState) -> RunState | None:
        for child in state.children:
            c = self.store.run_state(child)
            if c.status == RunStatus.WAITING and c.pending is not None:
                return c
            deeper = self._waiting_descendant(c) if c.status == RunStatus.RUNNING else None
            if deeper is not None:
                return deeper
        return None

    # ------------------------------------------------------------------ the loop

    async def _drive(self, ctx: _Ctx) -> RunResult:
        lease = self.store.lease(ctx.run_id)
        try:
            lease.acquire()
        except FileLockTimeout:
            raise RunStateError(f"run {ctx.run_id} is being run by another process (another kernel or `nbagent "
                                "run` of this notebook); wait for it to end, then look at it with `nbagent show`"
                                ) from None
        try:
            return await self._drive_leased(ctx)
        finally:
            self.store.release_lease(ctx.run_id, lease)

    async def _drive_leased(self, ctx: _Ctx) -> RunResult:
        run_id = ctx.run_id
        try:
            while True:
                state = self.store.run_state(run_id)
                if state.is_terminal:
                    break
                if state.pending is not None:
                    if not await self._settle(ctx, state):
                        break  # nobody can decide now: the run stays `waiting`
                    continue
                open_calls = state.open_calls()
                if open_calls:
                    await self._handle_calls(ctx, state, open_calls)
                    if ctx.blocked:
                        break  # without this, a parent would re-enter its waiting child forever
                    continue
                if state.answer is not None or ctx.stop:
                    self._finish(run_id, ctx)
                    continue
                await self._model_turn(ctx, state)
        except (asyncio.CancelledError, KeyboardInterrupt) as exc:
            # Recording is synchronous, so the cancellation cannot cut it short; the run stays resumable.
            self._record(run_id, Interrupted(reason=type(exc).__name__))
            raise
        except Exception as exc:  # a bug or an unexpected failure: the run fails cleanly, with the reason
            self._record(run_id, Error(message=f"{type(exc).__name__}: {exc}", error_type=type(exc).__name__,
                                       traceback=traceback.format_exc(limit=8)))
        return self.result(run_id)

    async def _model_turn(self, ctx: _Ctx, state: RunState) -> None:
        run_id = ctx.run_id
        calls_last_hour = self.store.events.count(_since_type("llm_called", hour_ago_iso())) \
            if self.budget.max_calls_per_hour is not None else 0
        tokens, cost, model_calls, _ = self._tree_sums(ctx.root_id, state)  # a sub-agent spends its root's budget
        denial = self.authorizer.check_model_call(tokens=tokens, cost=cost, model_calls=model_calls,
                                                  calls_last_hour=calls_last_hour)
        if denial is not None:
            self._deny(run_id, None, "(model)", denial, None)
            ctx.stop.append(denial.reason)
            return
        tools = self._schemas(run_id, state)
        if ctx.fingerprint is None:
            ctx.prefix = self._prefix(run_id, state)
            ctx.fingerprint = Fingerprint(tools, ctx.prefix)
        own = state.messages
        messages = ctx.prefix + own
        fingerprint = ctx.fingerprint.of(own)
        metadata: dict[str, Any] = {}
        if self._local_key is not None:
            metadata = {"nbagent_model": self._local_key, "nbagent_turn": ctx.turn[0],
                        "nbagent_fingerprint": fingerprint, "nbagent_prefix_len": len(ctx.prefix),
                        "nbagent_prefix_sha": ctx.fingerprint.prefix_sha}
        # streamed text is redacted before the bus: the live view and the notebook's widget state never see a secret
        stream = StreamRedactor(self.redactor, lambda text: self.bus.token(run_id, text),
                                lambda: self.bus.token_reset(run_id)) if self.stream else None
        try:
            reply = await complete(self.settings, messages, tools, metadata=metadata,
                                   on_token=stream.feed if stream is not None else None,
                                   on_retry=(lambda attempt, exc: stream.reset()) if stream is not None else None)
        except ModelError as exc:
            ctx.turn[0] += 1 + exc.retry_count
            self._record(run_id, Error(message=str(exc), error_type=exc.error_type, retry_count=exc.retry_count))
            return
        finally:
            if stream is not None:
                stream.close()
        ctx.turn[0] += 1 + reply.retry_count
        request = {
            "model": self.model, "params": self.settings.params, "tools": [t["function"]["name"] for t in tools],
            "tools_sha": ctx.fingerprint.tools_sha,
            "prefix": {"messages": len(ctx.prefix), "sha": ctx.fingerprint.prefix_sha},
            "own_from": state.recorded_own, "messages": own[state.recorded_own:], "n_messages": len(messages),
        }
        if self.settings.api_base:
            request["api_base"] = self.settings.api_base
        called = self._record(run_id, LlmCalled(
            model=self.model, request=request, response=reply.response, usage=reply.usage, cost=reply.cost,
            latency_ms=round(reply.latency_ms, 3), retry_count=reply.retry_count, fingerprint=fingerprint,
            call_ids=None if self._legacy_ids else assign_call_ids(state.model_calls + 1, _count_calls(reply.response)),
        ))
        if reply.tool_calls:
            if reply.content and reply.content.strip():
                self._record(run_id, Thinking(text=reply.content), parent=called.id)
            return  # the open calls are handled by the next turn of the loop
        if not (reply.content or "").strip():
            self._record(run_id, Error(
                message="the model returned an empty reply (no text and no tool calls); try again, or another model",
                error_type="EmptyReply"), parent=called.id)
            return
        self._record(run_id, AnswerReady(content=reply.content or ""), parent=called.id)

    # ------------------------------------------------------------------ tool calls and plans

    async def _handle_calls(self, ctx: _Ctx, state: RunState, open_calls: list[dict[str, Any]]) -> None:
        run_id = ctx.run_id
        calls = parse_tool_calls({"tool_calls": open_calls})
        parent = state.last_llm_event_id
        plan = state.plans.get(state.plan_of.get(calls[0].id, ""))
        if plan is not None:
            if plan.status == "proposed":  # proposed, but the wait was never recorded (a crash in between)
                self._record(run_id, WaitingForApproval(plan_id=plan.plan_id, request_id=new_id()))
                return
            # a plan already decided (auto, approved): carry it out (again, after a crash or an interrupt); each
            # call still passes the approval gate in `_execute`
            await self._execute_all(ctx, calls, parent)
            return
        allowed = self._allowed_tools(run_id, state)
        valid: list[ToolCallRequest] = []
        for i, call in enumerate(calls):
            problem = self._malformed(call, i, allowed)
            if problem is not None:
                self._record(run_id, ToolCallFailed(call_id=call.id, tool=call.name or "(none)", error=problem,
                                                    error_type="InvalidToolCall"), parent=parent)
            else:
                valid.append(call)
        if not valid:
            return
        in_force = self._grants(ctx, state)
        tools = allowed
        # what each call will touch, resolved now: risk, grants, the card and the approval are all about that
        done = [self._effect(allowed[c.name], c.arguments or {}) for c in valid]
        risks = [call_risk(allowed[c.name], c.arguments or {}, e) for c, e in zip(valid, done, strict=True)]
        # a call a grant answers (yes or no) is not asked about again; the gate in `_execute` applies the grant
        needing = [i for i, (c, e, (risk, why)) in enumerate(zip(valid, done, risks, strict=True))
                   if needs_decision(state.autonomy, c.name, risk) and grants_.answering(
                       in_force, c.name, c.arguments or {}, e, risk, why) is None]
        if len(valid) < self.plan_threshold and not needing:
            # no plan: its steps (previews, digests) are not needed, and the calls run now, on the effects just
            # resolved (the file tools still act only on those targets: effects.bound)
            # (only the first: a call before another may change the folder, a link made by a tool of the same reply)
            await self._execute_all(ctx, valid, parent, {valid[0].id: done[0]})
            return
        steps = [self._step(c, allowed, r, e, i in needing)
                 for i, (c, r, e) in enumerate(zip(valid, risks, done, strict=True))]
        needs_approval = [steps[i] for i in needing]
        plan_id = new_id()
        auto = not needs_approval
        max_risk = max((s.risk for s in steps), key=lambda r: r.rank)
        self._record(run_id, PlanningStarted(plan_id=plan_id), parent=parent)
        purpose = _purpose(state)
        offer: list[str] = []
        if not auto:
            try:
                offer = [grants_.covers_text(t) for t in grants_.for_plan(
                    needs_approval, state.autonomy, grants_.GrantSpec(scope="run"), "allow", tools)[0]]
            except grants_.GrantError:
                offer = []  # nothing of it can be granted: every call plants code
        proposed = self._record(run_id, PlanProposed(plan_id=plan_id, purpose=purpose, steps=steps,
                                                     max_risk=max_risk, auto_executing=auto, grant_offer=offer),
                                parent=parent)
        if auto:
            self._record(run_id, ExecutionStarted(plan_id=plan_id), parent=proposed.id)
            await self._execute_all(ctx, valid, parent)
        else:
            self._record(run_id, WaitingForApproval(plan_id=plan_id, request_id=new_id()), parent=proposed.id)

    async def _execute_all(self, ctx: _Ctx, calls: list[ToolCallRequest], parent: str | None,
                           resolved: dict[str, Effect] | None = None) -> None:
        for call in calls:
            await self._execute(ctx, call, parent, (resolved or {}).get(call.id))
            if ctx.blocked or self.store.run_state(ctx.run_id).pending is not None:
                return  # ask_human, or a sub-agent waiting: the rest of the turn waits for the answer

    def _malformed(self, call: ToolCallRequest, index: int, allowed: dict[str, Tool]) -> str | None:
        limit = self.budget.max_tool_calls_per_turn
        if index >= limit:
            return f"not executed: more than {limit} tool calls in one reply; do the rest in a later turn"
        if not call.name:
            return "the tool call has no tool name"
        if call.name not in allowed:
            names = ", ".join(sorted(allowed))
            return f"unknown tool {call.name!r}; the available tools are: {names}"
        if call.parse_error is not None:
            return call.parse_error
        try:
            allowed[call.name].validate(call.arguments or {})
        except ToolError as exc:
            return str(exc)
        return None

    def _step(self, call: ToolCallRequest, allowed: dict[str, Tool], risk_why: tuple[Risk, str | None],
              effect: Effect, asks: bool) -> PlanStep:
        tool = allowed[call.name]
        args = call.arguments or {}
        risk, why = risk_why  # call_risk(tool, args, effect)
        return PlanStep(call_id=call.id, tool=call.name, arguments=args, risk=risk,
                        target=effect.shown(tool.target(args)), preview=tool.preview(args), risk_reason=why,
                        digest=call_digest(call.name, args, effect), effect=effect, asks=asks)

    def _effect(self, tool: Tool, args: dict[str, Any]) -> Effect:
        """What the call will touch, resolved in the notebook's folder now (effects.py)."""
        if tool.name in CONTROL_TOOLS:
            return Effect()
        return resolve(tool, args, self.path_guard, sources=self.code_paths)

    async def _settle(self, ctx: _Ctx, state: RunState) -> bool:
        """Ask the decider about the pending request; True once a decision was recorded."""
        pending = state.pending
        assert pending is not None
        if pending.kind == "approval":
            plan = state.plans.get(pending.plan_id or "")
            request = ApprovalRequest(run_id=ctx.run_id, request_id=pending.request_id,
                                      plan_id=pending.plan_id or "", purpose=pending.purpose, steps=pending.steps,
                                      max_risk=plan.max_risk if plan else Risk.WRITE_HIGH_RISK)
            verdict = await self.decider.decide(request)
            if verdict is None:
                return False
            try:
                self._record_verdict(ctx.run_id, request.plan_id, request.request_id, pending.event_id, verdict)
            except grants_.GrantError:  # patterns that cover nothing: the decision stands, without the grant
                self._record_verdict(ctx.run_id, request.plan_id, request.request_id, pending.event_id,
                                     verdict.model_copy(update={"grant": None}))
            return True
        question = QuestionRequest(run_id=ctx.run_id, request_id=pending.request_id, question=pending.question or "")
        answer = await self.decider.answer(question)
        if answer is None:
            return False
        self._record(ctx.run_id, HumanInputReceived(request_id=pending.request_id, answer=answer.text,
                                                    call_id=pending.call_id, by=answer.by), parent=pending.event_id)
        return True

    def _record_verdict(self, run_id: str, plan_id: str, request_id: str, parent: str, verdict: Verdict
                        ) -> EventBase:
        """Record a decision, and the grants it gives (checked first: a grant that cannot be given is a
        `GrantError` and nothing is recorded)."""
        terms = self.grant_terms(run_id, plan_id, verdict)
        # everything the decision records is worked out before anything is written: a decision that fails records
        # nothing (an expiry past what a clock can hold, patterns that cover nothing)
        expires = None
        if terms and verdict.grant is not None:
            try:
                expires = grants_.expiry(verdict.grant, grants_.now())
            except (OverflowError, ValueError) as exc:
                raise grants_.GrantError(f"the grant's expiry cannot be used ({exc}); nothing was decided") from None
        ids = [new_id() for _ in terms]
        given = [{"grant_id": g, "scope": t.scope, "effect": t.effect, "covers": grants_.covers_text(t),
                  "expires_at": expires} for g, t in zip(ids, terms, strict=True)]
        root = self._root_of(run_id) if terms else run_id
        # each grant made and sealed before the decision is written (a key that cannot be used fails it here)
        sealed = [self._grant_event(run_id, root, plan_id, request_id, t, by=verdict.by, expires_at=expires,
                                    grant_id=g) for g, t in zip(ids, terms, strict=True)]
        payload: Payload
        if verdict.action == "approve":
            payload = PlanApproved(plan_id=plan_id, request_id=request_id, by=verdict.by, grants=given)
        elif verdict.action == "deny":
            payload = PlanRejected(plan_id=plan_id, request_id=request_id, reason=verdict.text, by=verdict.by,
                                   grants=given)
        else:
            payload = PlanRefined(plan_id=plan_id, request_id=request_id, feedback=verdict.text, by=verdict.by)
        event = self._record(run_id, payload, parent=parent)
        session_id = self.store.run_state(run_id).session_id or ""
        for grant in sealed:
            self.store.append(grant, session_id=session_id)
        if verdict.action == "approve":
            self._record(run_id, ExecutionStarted(plan_id=plan_id), parent=event.id)
        return event

    def grant_terms(self, run_id: str, plan_id: str, verdict: Verdict) -> list[grants_.GrantTerms]:
        """The grants a verdict on this plan gives: those asked for (over the plan's steps that needed the
        decision), or in a replay the recorded ones, for the run only."""
        if verdict.action == "refine":
            return []
        if verdict.replay_grants:
            return [t.model_copy(update={"scope": "run"}) for t in verdict.replay_grants]
        if verdict.grant is None:
            return []
        state = self.store.run_state(run_id)
        plan = state.plans.get(plan_id)
        terms, _ = grants_.for_plan(plan.steps if plan else [], state.autonomy, verdict.grant,
                                    "allow" if verdict.action == "approve" else "reject", self._allowed_tools(run_id))
        return terms

    def _give_grant(self, run_id: str, root: str, plan_id: str | None, request_id: str | None,
                    terms: grants_.GrantTerms, *, by: str, expires_at: str | None, grant_id: str | None = None
                    ) -> EventBase:
        given = self._grant_event(run_id, root, plan_id, request_id, terms, by=by, expires_at=expires_at,
                                  grant_id=grant_id)
        return self.store.append(given, session_id=self.store.run_state(run_id).session_id or "")

    def _grant_event(self, run_id: str, root: str, plan_id: str | None, request_id: str | None,
                     terms: grants_.GrantTerms, *, by: str, expires_at: str | None, grant_id: str | None = None
                     ) -> GrantGiven:
        """A grant as the log will hold it, sealed with the giver's key for this store (grants.grant_seal)."""
        given = GrantGiven(
            grant_id=grant_id or new_id(), effect=terms.effect, scope=terms.scope, tool=terms.tool, paths=terms.paths,
            arguments=terms.arguments, max_risk=terms.max_risk, by=by, expires_at=expires_at, run_id=run_id,
            root_run_id=root, plan_id=plan_id, request_id=request_id, pinned=terms.pinned, digests=terms.digests)
        given.seal = grants_.grant_seal(given.model_dump(mode="json"), self.store.run_state(run_id).session_id or "",
                                        self.store.path)
        return given

    def _grants(self, ctx: _Ctx, state: RunState) -> list[grants_.Grant]:
        """The grants in force for this run now (re-read when the session's chain grew: a grant or a revoke)."""
        key = f"session:{state.session_id}"
        if self.store.events.chain_len(key) != ctx.grants_seen:  # (the chain's events are read only when it grew)
            from .events import parse_event

            docs = self.store.events.docs_for_chain(key)
            # only grants the log backs with the decision that gave them (grants.vouched): a hand-made one is inert
            ctx.grants = {g.grant_id: g for g in grants_.from_events(parse_event(d) for d in docs).values()
                          if grants_.vouched(self.store, g)}
            ctx.grants_seen = len(docs)
        found = grants_.applicable(ctx.grants.values(), root_run_id=ctx.root_id, session_id=state.session_id or "",
                                   session_wide=self.decider.session_grants, at=grants_.now())
        return self._unspent(found) if any(g.pinned for g in found) else found

    def _unspent(self, found: list[grants_.Grant]) -> list[grants_.Grant]:
        """A replay's pinned grants, less the recorded calls they already answered in this replay."""
        pinned = {g.grant_id for g in found if g.pinned}
        used: dict[str, list[str]] = {}
        for e in self.store.query_events(types=["tool_call_started", "authorization_denied"]):
            gid = getattr(e.payload, "grant_id", None)
            if gid in pinned:
                used.setdefault(gid, []).append(getattr(e.payload, "digest", None) or "")
        out = []
        for g in found:
            if g.pinned:
                left = list(g.digests)
                for d in used.get(g.grant_id, []):
                    if d in left:
                        left.remove(d)
                if not left:
                    continue
                g = g.model_copy(update={"digests": left})
            out.append(g)
        return out

    async def _execute(self, ctx: _Ctx, call: ToolCallRequest, parent: str | None,
                       resolved: Effect | None = None) -> None:
        run_id = ctx.run_id
        state = self.store.run_state(run_id)
        step = state.steps.get(call.id)
        if step is not None and step.status == "running":
            if call.name == "spawn_agent" and any(True for _ in self._child_of_call(state, call.id)):
                await self._spawn(ctx, call, parent, resume=True)
                return
            self._record(run_id, ToolCallFailed(
                call_id=call.id, tool=call.name, error="interrupted while running; not re-run automatically "
                "(it may have partly happened): check its effect, then ask again", error_type="Interrupted"),
                parent=parent)
            return
        tool = self._allowed_tools(run_id, state)[call.name]
        args = call.arguments or {}
        # resolved again now (a decision must still be about this), unless it was resolved a moment ago for a call
        # that runs at once, with nothing decided in between, and that either only reads or acts through the file
        # tools (which act only on those targets: effects.bound); a foreign tool that writes is resolved again,
        # since the call before it may have changed the folder
        reuse = resolved is not None and (tool.resolver is not None or tool.risk == Risk.READ_ONLY)
        effect = resolved if reuse and resolved is not None else self._effect(tool, args)
        risk, risk_reason = call_risk(tool, args, effect)
        denial = self.authorizer.check_tool(call.name, args, shell_like=tool.shell_like)
        fact: Denial | None = None  # the folder says no (a missing file...): an error, unless policy refuses first
        if denial is None:
            denial = self._check_paths(tool, args, effect)
            if denial is not None and denial.rule in FILE_FACTS:
                fact, denial = denial, None
        if denial is None and call.name not in CONTROL_TOOLS:
            denial = self.authorizer.check_step(self._tree_sums(ctx.root_id, state)[3])
            if denial is not None:
                ctx.stop.append(denial.reason)
        gate = clearance(state, call.id, call.name, args, effect, risk, grants=self._grants(ctx, state),
                         risk_reason=risk_reason)
        if denial is None and not gate.ok:
            denial = Denial(rule=gate.rule or "approval.missing", reason=gate.reason)
        if denial is not None:
            by_grant = denial.rule == "grant.reject"
            self._deny(run_id, call.id, call.name, denial, effect.shown(tool.target(args)), parent,
                       grant_id=gate.grant_id if by_grant else None,
                       digest=call_digest(call.name, args, effect) if by_grant else None,
                       effect=effect if effect.targets else None)
            return
        if fact is not None:  # nothing ran: a failed call the model sees, listed with errors, not with denials
            self._record(run_id, ToolCallFailed(call_id=call.id, tool=call.name, error=fact.reason,
                                                error_type=fact.rule), parent=parent)
            return
        if call.name in CONTROL_TOOLS:
            await self._control(ctx, call, args, parent)
            return
        started = self._record(run_id, ToolCallStarted(
            call_id=call.id, tool=call.name, arguments=args, risk=risk, target=effect.shown(tool.target(args)),
            reason=gate.reason, approval_event_id=gate.approval_event_id, plan_id=gate.plan_id,
            digest=call_digest(call.name, args, effect), risk_reason=risk_reason, grant_id=gate.grant_id,
            effect=effect if effect.targets else None), parent=parent)
        t0 = time.perf_counter()
        retries = 0
        try:
            call_info = CallInfo(run_id=run_id, call_id=call.id, tool=call.name, digest=started.payload.digest or "",
                                 approval_event_id=gate.approval_event_id, plan_id=gate.plan_id,
                                 grant_id=gate.grant_id, reason=gate.reason)
            with bound(effect, call_info):  # the file tools act on exactly these targets, or fail as changed
                result, retries = await self._call_tool(tool, args)
        except Exception as exc:
            self._record(run_id, ToolCallFailed(
                call_id=call.id, tool=call.name, error=_error_text(exc), error_type=type(exc).__name__,
                duration_ms=_ms(t0), retry_count=getattr(exc, "retry_count", 0)), parent=started.id)
            return
        result = _jsonable(result)
        self._record(run_id, ToolCallCompleted(call_id=call.id, tool=call.name, duration_ms=_ms(t0), result=result,
                                               preview=_preview(result), retry_count=retries), parent=started.id)

    async def _call_tool(self, tool: Tool, args: dict[str, Any]) -> tuple[Any, int]:
        def transient(e: BaseException) -> bool:
            return not isinstance(e, ToolError) and is_transient(e)

        # The first attempt is made directly: tenacity's retrying state is a few dozen objects in reference cycles
        # (freed only by a full garbage collection), made for every call although nearly every call succeeds or
        # fails for good at once. Only a transient failure hands over to tenacity, whose first attempt is this one.
        try:
            return await self._attempt(tool, args), 0
        except Exception as exc:
            if self.tool_retries < 1 or not transient(exc):
                exc.retry_count = 0  # type: ignore[attr-defined]
                raise
            first = exc
        from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

        attempts = 0
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(self.tool_retries + 1),
                wait=wait_exponential(multiplier=self.settings.retry_base, max=self.settings.retry_cap),
                retry=retry_if_exception(transient),
                reraise=True,
            ):
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    if attempts == 1:
                        raise first
                    result = await self._attempt(tool, args)
        except Exception as exc:
            exc.retry_count = max(0, attempts - 1)  # type: ignore[attr-defined]
            raise
        return result, max(0, attempts - 1)

    async def _attempt(self, tool: Tool, args: dict[str, Any]) -> Any:
        coro = tool.call(args)
        return await (asyncio.wait_for(coro, self.tool_timeout) if self.tool_timeout else coro)

    async def _control(self, ctx: _Ctx, call: ToolCallRequest, args: dict[str, Any], parent: str | None) -> None:
        run_id = ctx.run_id
        if call.name == "ask_human":
            started = self._record(run_id, ToolCallStarted(call_id=call.id, tool=call.name, arguments=args,
                                                           risk=CONTROL_RISK), parent=parent)
            self._record(run_id, HumanInputRequested(request_id=new_id(), question=args["question"],
                                                     call_id=call.id), parent=started.id)
            return
        if call.name == "spawn_agent":
            await self._spawn(ctx, call, parent, resume=False)
            return
        started = self._record(run_id, ToolCallStarted(call_id=call.id, tool=call.name, arguments=args,
                                                       risk=CONTROL_RISK), parent=parent)
        if call.name == "respond_to_user":
            self._record(run_id, ToolCallCompleted(call_id=call.id, tool=call.name, result="delivered to the user",
                                                   preview="answer delivered"), parent=started.id)
            self._record(run_id, AnswerReady(content=args["message"]), parent=started.id)
        else:  # done
            state = self.store.run_state(run_id)
            self._record(run_id, ToolCallCompleted(call_id=call.id, tool=call.name, result="finished",
                                                   preview="finished"), parent=started.id)
            if state.answer is None:
                last_text = next((m.get("content") for m in reversed(state.turns)
                                  if m["role"] == "assistant" and m.get("content")), None)
                self._record(run_id, AnswerReady(content=args.get("summary") or last_text or "Done."),
                             parent=started.id)

    async def _spawn(self, ctx: _Ctx, call: ToolCallRequest, parent: str | None, *, resume: bool) -> None:
        run_id = ctx.run_id
        args = call.arguments or {}
        t0 = time.perf_counter()
        if resume:
            child_id = next(self._child_of_call(self.store.run_state(run_id), call.id))
            child_state = self.store.run_state(child_id)
            child_ctx = _Ctx(child_id, ctx.root_id, ctx.depth + 1, ctx.turn)
            if child_state.status in (RunStatus.INTERRUPTED, RunStatus.WAITING):
                self._record(child_id, RunResumed(by=f"parent {run_id}"))
            result = await self._drive(child_ctx)
            started_id = parent
        else:
            if ctx.depth >= 3:
                self._record(run_id, ToolCallFailed(call_id=call.id, tool=call.name, error="spawn_agent: sub-agents "
                                                    "may not nest deeper than 3 levels", error_type="DepthLimit"),
                             parent=parent)
                return
            started = self._record(run_id, ToolCallStarted(call_id=call.id, tool=call.name, arguments=args,
                                                           risk=CONTROL_RISK), parent=parent)
            started_id = started.id
            names = args.get("tools")
            parent_tools = [n for n in self._allowed_tools(run_id) if n not in CONTROL_TOOLS]
            child_tools = [n for n in (names or parent_tools) if n in parent_tools]
            holder: list[str] = []

            def announce(kind: str, data: Any) -> None:
                if kind == "event" and data.type == "run_started" and data.payload.parent_run_id == run_id \
                        and not holder:
                    holder.append(data.run_id)
                    self._record(run_id, ChildRunStarted(child_run_id=data.run_id, prompt=args["prompt"],
                                                         call_id=call.id), parent=started_id)

            unsubscribe = self.bus.subscribe(announce)
            try:
                result = await self.run(args["prompt"], previous_run_id=None, parent_run_id=run_id,
                                        tools=child_tools, _depth=ctx.depth + 1, _turn=ctx.turn)
            finally:
                unsubscribe()
        if result.status == RunStatus.WAITING:
            ctx.blocked = True  # the parent waits with its child; resuming the parent resumes the child
            return
        if result.status == RunStatus.INTERRUPTED:
            raise asyncio.CancelledError()
        outcome = {"run_id": result.run_id, "status": result.status.value, "answer": result.answer}
        if result.error or result.errors:
            outcome["errors"] = [result.error] if result.error else result.errors
        if result.status == RunStatus.FAILED:
            self._record(run_id, ToolCallFailed(call_id=call.id, tool=call.name,
                                                error=f"the sub-agent failed: {result.error}",
                                                error_type="ChildRunFailed", duration_ms=_ms(t0)), parent=started_id)
            return
        self._record(run_id, ToolCallCompleted(call_id=call.id, tool=call.name, duration_ms=_ms(t0), result=outcome,
                                               preview=_preview(result.answer or "")), parent=started_id)

    def _check_paths(self, tool: Tool, args: dict[str, Any], effect: Effect) -> Denial | None:
        """The file scope for every path argument of a tool that has no scope check of its own (user tools)."""
        if tool.has_own_authorization:
            try:
                tool.authorize(args)
            except ToolError as exc:
                return Denial(rule=f"scope.{getattr(exc, 'rule', 'denied')}", reason=str(exc))
            return None
        if tool.name in CONTROL_TOOLS:
            return None
        # the call's own effect, resolved as the decision saw it (relative paths from the tool's folder: an MCP
        # server's cwd), so the scope refuses exactly what the card would have shown
        for t in effect.targets:
            if t.problem is not None:
                return Denial(rule=f"scope.{t.rule or 'denied'}", reason=f"argument {t.arg!r}: {t.problem}")
        return None

    def _child_of_call(self, state: RunState, call_id: str) -> Iterable[str]:
        for e in self.store.query_events(run_id=state.run_id, types="child_run_started"):
            if e.payload.call_id == call_id:  # type: ignore[attr-defined]
                yield e.payload.child_run_id  # type: ignore[attr-defined]

    def _deny(self, run_id: str, call_id: str | None, tool: str, denial: Denial, target: str | None,
              parent: str | None = None, grant_id: str | None = None, digest: str | None = None,
              effect: Effect | None = None) -> None:
        self._record(run_id, AuthorizationDenied(call_id=call_id, tool=tool, reason=denial.reason, target=target,
                                                 rule=denial.rule, grant_id=grant_id, digest=digest, effect=effect),
                     parent=parent)

    def _finish(self, run_id: str, ctx: _Ctx) -> None:
        state = self.store.run_state(run_id)
        if state.answer is None:
            last = next((m.get("content") for m in reversed(state.turns)
                         if m["role"] == "assistant" and m.get("content")), None)
            summary = "; ".join(ctx.stop) if ctx.stop else ""
            self._record(run_id, AnswerReady(content=last or f"Stopped before an answer: {summary}"))
            state = self.store.run_state(run_id)
        errors = [*state.errors, *_refusals(state), *ctx.stop]
        if errors:  # a denied plan too: the answer may claim what was refused, so the run did not do all it says
            self._record(run_id, CompletedWithErrors(errors=list(dict.fromkeys(errors))))
        else:
            self._record(run_id, Completed())

    # ------------------------------------------------------------------ helpers

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

    def _allowed_tools(self, run_id: str, state: RunState | None = None) -> dict[str, Tool]:
        """The tools this run may call (`state`: the run's state, when the caller has just read it)."""
        names = (state if state is not None else self.store.run_state(run_id)).options.get("tools")
        tools = {**self.tools, **CONTROL_TOOLS}
        if names is not None:
            tools = {n: t for n, t in tools.items() if n in names or (n in CONTROL_TOOLS and n != "spawn_agent")}
        return tools

    def _schemas(self, run_id: str, state: RunState | None = None) -> list[dict[str, Any]]:
        return [t.schema() for t in self._allowed_tools(run_id, state).values()]

    def _prefix(self, run_id: str, state: RunState) -> list[dict[str, Any]]:
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        history = self.conversation(state.previous_run_id) if state.previous_run_id else []
        if self._local is None and _has_images(history) and not accepts_images(self.model):
            # an image an earlier run sent to a model that takes them ({Out[n]}): described to one that does not
            # (offline models and replays get the history as recorded, so a replay asks what was asked)
            history = _images_described(history)
        return system + history

    def _root_of(self, run_id: str) -> str:
        state = self.store.run_state(run_id)
        while state.parent_run_id is not None:
            state = self.store.run_state(state.parent_run_id)
        return state.run_id or run_id

    def tree_usage(self, run_id: str) -> TreeUsage:
        """What the run tree containing `run_id` has spent, in total and run by run (budgets use the total)."""
        return self._tree_totals(self._root_of(run_id))

    def _tree_totals(self, root: str) -> TreeUsage:
        states, todo = [], [root]
        while todo:
            s = self.store.run_state(todo.pop())
            states.append(s)
            todo.extend(s.children)
        return TreeUsage.of(states)

    def _tree_sums(self, root: str, state: RunState) -> tuple[int, float, int, int]:
        """What `_tree_totals(root)` sums for the budgets (tokens, cost, model calls, tool steps), in the same
        order, without building the per-run table; `state` is a run's state just read (used if it is the root's)."""
        tokens, cost, model_calls, tool_steps = 0, 0.0, 0, 0
        todo = [root]
        while todo:
            run_id = todo.pop()
            s = state if run_id == state.run_id else self.store.run_state(run_id)
            model_calls += s.model_calls
            tokens += s.tokens
            cost += s.cost
            tool_steps += s.tool_calls_started
            todo.extend(s.children)
        return tokens, cost, model_calls, tool_steps

    def _tree_attempts(self, root: str) -> int:
        total, todo = 0, [root]
        while todo:
            s = self.store.run_state(todo.pop())
            total += s.model_attempts
            todo.extend(s.children)
        return total


class RunStateError(Exception):
    """The run is not in a state that allows what was asked (resume a finished run, answer a running one)."""


def _has_images(messages: list[dict[str, Any]]) -> bool:
    return any(isinstance(m.get("content"), list) and any(
        isinstance(p, dict) and p.get("type") == "image_url" for p in m["content"]) for m in messages)


def _images_described(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = [{"type": "text", "text": "(an image shown earlier in this conversation; this model does not "
                                                "take images)"}
                       if isinstance(p, dict) and p.get("type") == "image_url" else p for p in content]
            m = {**m, "content": content}
        out.append(m)
    return out


def _closed(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A finished conversation for the next run: any tool call left unanswered gets a result saying so."""
    out = list(messages)
    for i in range(len(out) - 1, -1, -1):
        m = out[i]
        if m["role"] == "assistant":
            answered = {t.get("tool_call_id") for t in out[i + 1:] if t["role"] == "tool"}
            missing = [c for c in m.get("tool_calls") or [] if c.get("id") not in answered]
            out.extend({"role": "tool", "tool_call_id": c.get("id"),
                        "content": "Not executed: the run ended before this call ran."} for c in missing)
            break
    return out


def _since_type(type_: str, since: str) -> Any:
    from tinydb import Query

    q = Query()
    return (q.type == type_) & (q.ts >= since)


def _refusals(state: RunState) -> list[str]:
    """The calls a person or a policy said no to (a denied plan, a reject grant), one line each: they end the run
    `completed_with_errors` as policy denials do, since its answer may claim them done (docs/concepts.md)."""
    said: dict[str, str] = {}
    for d in state.decisions:
        if d.kind == "rejected" and d.plan_id:
            text = d.text.strip()
            said[d.plan_id] = text if text.lower().startswith("denied") else \
                f"denied by {d.by}" + (f": {text}" if text else "")
    out = []
    for call_id, step in state.steps.items():
        if step.status != "rejected":
            continue
        plan = state.plans.get(state.plan_of.get(call_id, ""))
        planned = next((s for s in plan.steps if s.call_id == call_id), None) if plan else None
        target = planned.target if planned is not None and planned.target else step.arguments.get("path")
        what = step.tool + (f" {target}" if isinstance(target, str) and target else "")
        why = said.get(plan.plan_id) if plan is not None and plan.plan_id in said else \
            f"denied: {step.error or 'a person said no to calls like this one'}"
        out.append(f"{what}: {why}")
    return out


def _purpose(state: RunState) -> str:
    """The model's own words about its plan, or "" (the views phrase the question from the steps, not this)."""
    for m in reversed(state.turns):
        if m["role"] == "assistant":
            return (m.get("content") or "").strip()[:500]
    return ""


def _jsonable(value: Any) -> Any:
    if type(value) is str and 6 * len(value) + 2 <= MAX_RESULT_CHARS:
        return value  # the round trip gives a plain string back, and its JSON (6 characters at most each) is not capped
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = json.dumps(repr(value))
    if len(text) > MAX_RESULT_CHARS:
        return (text[:MAX_RESULT_CHARS] + f"… [truncated: the result had {len(text):,} characters; ask for less]")
    value = json.loads(text)
    return value


def _preview(result: Any, width: int = 200) -> str:
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return "the tool timed out"
    text = str(exc) or type(exc).__name__
    text = text if isinstance(exc, ToolError) else f"{type(exc).__name__}: {text}"
    if len(text) > MAX_RESULT_CHARS:  # an error is capped as a result is: a tool (or server) may say megabytes
        text = text[:MAX_RESULT_CHARS] + f"… [truncated: the error had {len(text):,} characters]"
    return text


def _valid_text(value: Any) -> Any:
    """The same structure with every unpaired surrogate replaced by U+FFFD (UTF-8 cannot hold one)."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if isinstance(value, dict):
        return {_valid_text(k): _valid_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_valid_text(v) for v in value]
    return value


def _count_calls(response: dict[str, Any]) -> int:
    message = assistant_message(response) or {}
    return len(message.get("tool_calls") or [])


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


__all__ = ["Agent", "RunResult", "RunStateError"]
