"""`Agent`: what a person configures (model, tools, autonomy, decider, store) and the public calls on it.

The work is done by its parts, one module each: the loop (loop.py), a turn's calls (calls.py), running a call
(invoke.py), decisions and grants (decisions.py), the run tree (tree.py) and the history sent to the model
(history.py); choosing the model is model_choice.py. This module holds the configuration and the entry points:
`run`, `resume`, `answer_pending`, `result`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from nbagent.events.bus import EventBus
from nbagent.events.ids import new_id
from nbagent.events.levels import Autonomy
from nbagent.events.model import ContextAssembled, EventBase, HumanInputReceived, RunResumed, RunSuperseded
from nbagent.events.state import RunStatus
from nbagent.gate import grants as grants_
from nbagent.gate.deciders import Answer, Decider, InteractiveDecider, Verdict
from nbagent.gate.policy import Authorizer, AuthPolicy, Budget
from nbagent.models.base import LocalModel
from nbagent.runtime.calls import CallHandling
from nbagent.runtime.context import RunContext, RunResult, RunStateError
from nbagent.runtime.decisions import Decisions
from nbagent.runtime.fitting import ContextFitting
from nbagent.runtime.history import History
from nbagent.runtime.invoke import Invocation
from nbagent.runtime.loop import RunLoop
from nbagent.runtime.model_choice import ModelOptions, choose_model
from nbagent.runtime.tree import RunTree
from nbagent.scope.rules import Scope, ScopeGuard
from nbagent.secrets.redactor import Redactor
from nbagent.store import Store
from nbagent.tools.base import ToolLike, as_tools
from nbagent.tools.control import CONTROL_TOOLS

DEFAULT_SYSTEM_PROMPT = """\
You are nbagent, an assistant working inside a researcher's Jupyter notebook. Use the tools to look before you
answer; never guess file contents. Changes you propose may need the user's approval; if a plan is denied, do
not try to achieve the same change another way. When the task is done, give a short final answer in Markdown
(or call respond_to_user). If the request is ambiguous, call ask_human."""


class Agent(RunLoop, CallHandling, Invocation, Decisions, RunTree, History, ContextFitting):
    """An agent: a model, tools, an autonomy level, a decider, and the store that records every run.

        agent = Agent(model="nbagent/scripted", script="turns.json", tools=[read_csv], autonomy="L1",
                      decider=PolicyDecider("low"), store="analysis.ipynb")
        result = await agent.run("Which region sold most?")

    Args:
        model: any litellm model (`provider/name`), or a `ModelOptions` that says everything about the model
            (then the model keywords below are not given). Optional with `script`, `function` or `replay`.
        tools: the tools the model may call (functions made tools with `@tool`, or `Tool`s); not given: the file
            tools of the scope's folder, their writes undoable; `[]`: none.
        autonomy: L0-L3 (`Autonomy`), what runs without asking (policy.py's approval table); L1 by default, a
            replay at the autonomy it was recorded at.
        decider: who answers approvals and questions (deciders.py); by default the interactive one.
        store: the store that records every run (a `Store`, or its path; by default `agent.nbagent` here).
        session: the session's name in the store: runs of a session continue one conversation.
        script: turns for the offline scripted model (`nbagent/scripted`).
        function: a Python function that plays the model (`nbagent/function`).
        local_model: an offline model object (models.base.LocalModel).
        replay: a run id: replay its recorded model replies, and its decisions unless `decider` is given.
        budget: limits on tokens, cost, model calls and tool steps per run tree (policy.Budget).
        policy: what the configuration forbids (policy.AuthPolicy).
        plan_threshold: a turn with this many calls or more is shown as a plan.
        system_prompt: the system message (None: nbagent's own; "": none).
        api_base: the model's endpoint.
        api_key: the model's key (redacted from everything recorded).
        timeout: the deadline of a model call in seconds, from its request to its reply's end, streamed or not
            (a call past it fails, not retried: docs/runtime.md, "Model calls").
        max_retries: retries of a model call's transient failure.
        retry_base: the first wait before a retry, in seconds, doubled each time (model and tool retries).
        retry_cap: the longest wait before a retry, in seconds.
        model_params: further litellm arguments (temperature, max_tokens...).
        tool_timeout: seconds a tool call may take (None: no limit).
        tool_retries: retries of a tool call's transient failure.
        bus: where events and streamed tokens are announced (views subscribe to it).
        stream: stream the model's text to the bus.
        scope: the folder path arguments of tools without a scope of their own may point into (a `Scope`, or
            the folder); by default the store's folder.
        code_paths: files that run later (an MCP configuration...): a write of one is WRITE_HIGH_RISK.
        context_window: the model's input limit in tokens, where litellm's table does not know it or you want less
            (docs/context-budget.md); for an offline model, setting it turns the context budget on.

    Raises:
        ValueError: no model named, or a tool named like a control tool.
    """

    def __init__(
        self,
        model: str | ModelOptions | None = None,
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
        context_window: int | None = None,
    ) -> None:
        options = model if isinstance(model, ModelOptions) else ModelOptions(
            model=model, script=script, function=function, local_model=local_model, replay=replay,
            api_base=api_base, api_key=api_key, timeout=timeout, max_retries=max_retries, retry_base=retry_base,
            retry_cap=retry_cap, params=model_params or {})
        self.store = store if isinstance(store, Store) else Store(store or Path.cwd() / "agent.nbagent")
        # where path arguments of tools without a scope of their own may point: the notebook's folder
        if not isinstance(scope, Scope):
            folder = Path(scope) if scope is not None else self.store.path.parent
            scope = Scope(root=folder, base=folder)
        self.path_guard = ScopeGuard(scope)
        self.session = self.store.session(session)
        # L1 by default; a replay, by default, at the autonomy it was recorded at, so it asks what the recording
        # asked (at another autonomy it runs what that autonomy runs: at L3, a recorded no answers nothing)
        if autonomy is None and options.replay is not None:
            autonomy = self.store.run_state(self.store.resolve_run(options.replay)).autonomy
        self.autonomy = Autonomy(autonomy or Autonomy.L1)
        if tools is None:  # not given: the file tools of the scope's folder, their writes undoable (tools=[]: none)
            from nbagent.store.blobs import BlobStore
            from nbagent.tools.files import file_tools

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
        self.redactor = Redactor([options.api_key])
        self.replay_source = options.replay
        chosen = choose_model(options, self.store, with_decider=decider is None)
        self._local = chosen.local
        self._local_key = chosen.local_key
        self._legacy_ids = chosen.legacy_ids
        self.settings = chosen.settings
        self.decider = decider or chosen.decider or InteractiveDecider()
        if context_window is not None and context_window < 1_000:
            raise ValueError(f"context_window must be at least 1,000 tokens, got {context_window}")
        self.context_window = context_window
        self._counter = None
        self._context = self._window_options()  # recorded with each run; None: no budget (offline, not set)
        if self._context is not None and "read_result" not in self.tools:
            from nbagent.runtime.results import read_result_tool

            self.tools["read_result"] = read_result_tool(self.store, self.counter)

    # ------------------------------------------------------------------ public API

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
    ) -> RunResult:
        """Start a run and drive it until it ends or waits for a decision nobody can give now.

        It continues the session's conversation (`previous_run_id="auto"`: the latest run), or `fork_of` an
        earlier run: the new run starts from the state before it, and that run and every run after it in its
        chain are marked superseded (never deleted).

        Args:
            prompt: the person's request (redacted before it is recorded).
            previous_run_id: the run this one continues: "auto" (the session's latest, or for a replay the
                recording's start), a run id, or None (a new conversation).
            fork_of: a run to fork: start from the state before it and supersede it and its successors.
            cell_id: the notebook cell the run belongs to.
            context: messages given with the request (the notebook context), recorded in `context_assembled`.
            parent_run_id: the run this one is a sub-agent of.
            tools: the names of the tools this run may call (None: all of the agent's).
            options: further options recorded with the run.

        Returns:
            The run's `RunResult` (its status says whether it ended or waits).

        Raises:
            RunStateError: the run is being run by another process.
        """
        return await self._start(prompt, previous_run_id=previous_run_id, fork_of=fork_of, cell_id=cell_id,
                                 context=context, parent_run_id=parent_run_id, tools=tools, options=options)

    async def _start(
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
        depth: int = 0,
        turn: list[int] | None = None,
    ) -> RunResult:
        """`run`, for a sub-agent too: `depth` is how deep in its tree the run is, `turn` the tree's count of
        model attempts (shared with the parent: offline models count per tree)."""
        if fork_of is not None:
            previous_run_id = self.store.run_state(fork_of).previous_run_id
        elif previous_run_id == "auto" and self.replay_source is not None and parent_run_id is None:
            previous_run_id = self.store.run_state(self.replay_source).previous_run_id  # the recording's start
        elif previous_run_id == "auto":
            previous_run_id = None if parent_run_id else self.latest_run_id()
        options = {**(options or {}), **({"tools": tools} if tools is not None else {}),
                   **({"context": self._context} if self._context is not None else {})}
        # the run's checkpoints are committed per turn of the loop (Store.grouped): its start while the first
        # request is in flight, its answer and its end together
        with self.store.grouped():
            run = self.store.create_run(
                self.session.id, self.redactor.text(prompt), model=self.model, autonomy=self.autonomy,
                cell_id=cell_id, previous_run_id=previous_run_id, parent_run_id=parent_run_id, options=options,
                lease=True,
            )
            try:  # the lease taken with the run is held until it has been driven
                self.bus.event(self.store.run_events(run.id)[0])
                if fork_of is not None:
                    for old in self.successors(fork_of):
                        if self.store.in_progress(old):
                            continue  # another kernel runs it now: the two complete side by side, as siblings
                        self._record(old, RunSuperseded(by_run_id=run.id))
                history = self.conversation(previous_run_id) if previous_run_id else []
                ctx = RunContext(run.id, run.id if turn is None else self._root_of(run.id), depth, turn or [0])
                tool_names = [t["function"]["name"] for t in self._schemas(run.id)]
                # a replay runs under the grants its recording ran under; its own chain lists them first, which is
                # what backs them (grants.vouched): a grant appended to the log later names no such start
                standing = [(new_id(), terms) for terms in self.decider.standing_grants] \
                    if parent_run_id is None else []
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
        with self.store.grouped():
            if verdict is not None or answer is not None:
                self.answer_pending(run_id, verdict=verdict, answer=answer)
            if was in (RunStatus.INTERRUPTED, RunStatus.WAITING):
                self._record(run_id, RunResumed(by="resume"))
            root = self._root_of(run_id)
            ctx = RunContext(run_id, root, 0, [self._tree_attempts(root)])
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
            cost=s.cost if s.cost_known else None, steps=len(s.steps), model_calls=s.all_model_calls,
            pending=pending, children=list(s.children), log_path=str(self.store.path),
        )


__all__ = ["DEFAULT_SYSTEM_PROMPT", "Agent", "ModelOptions", "RunResult", "RunStateError"]
