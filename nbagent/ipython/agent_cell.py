"""The `%%agent` cell path: reading the cell, starting its run, and driving a run with a live view in a cell.

Split from host.py so that what happens when a `%%agent` cell runs reads in one place: the cell's options and
`{references}` become a prompt and context (`run_cell`), the run is started or forked from the cell's last run
(`start_run`), the agent is built with the notebook's tools and the cell's decider (`make_agent`,
`decider_for`), and `drive` shows the live view, leaves the static record whatever happens, and fails the cell
of a headless kernel that would wait forever for a decision. `NotebookHost` (host.py) has these as methods:
`CellPath` is one of its bases, and uses the host's state (store, settings, tools, display ids).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from nbagent.ipython.entry import RunFailed, RunInterrupted
from nbagent.ipython.hoststate import HostState
from nbagent.ipython.notes import ContinuationNote, InterruptNote, show_notes
from nbagent.ipython.options import UsageError, cell_parser, parse
from nbagent.ipython.reproduce import Rerun

# The runtime, the deciders and the live view are imported where a run needs them, not here: `%load_ext` imports
# this module (a base of the host), and a real provider's first run imports them while it waits for the model
# process (entry._prepare) or once the kernel is idle (loading.py).
if TYPE_CHECKING:
    from nbagent.gate.deciders import Decider
    from nbagent.runtime import Agent as RuntimeAgent
    from nbagent.runtime import RunResult

HEADLESS_MESSAGE = (
    "nbagent: run {run_id} needs a decision ({what}), but nobody can answer here: no run view was shown by a "
    "front end, so this looks like a headless kernel (nbconvert, papermill). Set NBAGENT_APPROVE=all|none|low "
    "for the kernel, pass --approve to the cell, or use `nbagent run NOTEBOOK --approve ...`. The run is saved "
    "as waiting: %agent resume {run_id} continues it."
)
# Inside `nbagent run` (NBAGENT_EXECUTION set) its --approve policy answers every decision, unless the notebook set
# it aside (`%agent config approve=`): say so, and what answers there, not "use nbagent run".
HEADLESS_IN_RUN = (
    "nbagent: run {run_id} needs a decision ({what}), but nobody can answer inside `nbagent run`, and its "
    "--approve policy does not apply: {where} set approve to '' (ask a person). Remove that setting, or give the "
    "cell --approve all|none|low, and run again with --approve all|none|low (questions: set NBAGENT_ANSWER for "
    "`nbagent run`). The run is saved as waiting: %agent resume {run_id} continues it."
)


class HeadlessDecisionError(RuntimeError):
    """A run needs a person and none is there: fail the cell now rather than wait forever."""


class CellPath(HostState):
    """The `%%agent` part of `NotebookHost` (a base class of it; see the module's docstring)."""

    async def run_cell(self, line: str, body: str) -> None:
        args = parse(cell_parser(), self.shell.var_expand(line) if hasattr(self.shell, "var_expand") else line)
        if args.help:
            print(cell_parser().format_help())
            return
        prompt = body.strip()
        if not prompt:
            raise UsageError("%%agent: the cell has no request; write it below the %%agent line")
        from nbagent.ipython.references import Notebook, context_message, expand_all, notebook_message, too_big_notes

        notebook = Notebook.of(self.shell, self.outputs, self.last_error)  # {In[n]}, {Out[n]}, {Err}
        prompt, names, refs = expand_all(prompt, self.shell.user_ns, notebook)
        context = [m for m in [context_message(names, self.shell.user_ns), notebook_message(refs, notebook)] if m]
        show_notes(too_big_notes(refs, notebook))  # information, not an error: a display, not stderr
        await self.start_run(args, prompt, context)

    async def start_run(self, args: Any, prompt: str, context: list[dict[str, Any]]) -> None:
        from nbagent.events.state import RunStatus

        self.parameters.check()  # a bad papermill value fails here, in one line
        cfg = {k: v for k, (v, _) in self.settings(args).items()}
        store = self.store
        session = store.session(cfg["session"], notebook=self.notebook.name)
        cell_id = self.cell_id()
        previous: Any = "auto"
        fork_of = None
        cell_runs = [s for s in store.session_states(session.id) if s.cell_id == cell_id
                     and s.parent_run_id is None] if cell_id else []
        if args.new:
            previous = None
        elif cell_runs and cell_runs[-1].status != RunStatus.SUPERSEDED:
            fork_of = cell_runs[-1].run_id  # re-running a cell: start from before its last run
        rerun = self.rerun_of(args, cell_id, prompt)  # ask again, or reproduce the recorded run (reproduce.py)
        replay = rerun.run_id if rerun.kind == "reproduce" else None
        if rerun.line is not None and not (rerun.kind == "ask" and self.rerun_noted == self.execution()):
            show_notes([rerun.line])  # the output's first line (an "asking again" one may be shown already: _shown)
        # a recording that is not this user's (a cloned log): its decisions are asked again (recorded_yes.py)
        theirs = replay is not None and args.approve in (None, "", "recorded") and not self._yours(replay)
        if replay is not None:  # the recording's decisions at its autonomy, unless this cell's own line says
            cfg["approve"] = args.approve or "recorded"
            if not theirs:  # (another's recording: at this person's autonomy, each card asked)
                cfg["autonomy"] = args.autonomy
        options = {k: cfg[k] for k in ("script", "approve", "max_steps", "budget") if cfg[k]}
        if replay is not None:
            options["reproduces"] = replay  # the record says which run it reproduced
            if theirs:
                options["decisions_asked"] = True  # ... and that its decisions were this person's, asked again
        if cfg.get("mcp") and not str(cfg["mcp"]).lstrip().startswith("{"):
            options["mcp"] = cfg["mcp"]  # a file's name, so a resume finds the same servers (never inline JSON:
            # its headers may hold tokens, and the log keeps what it is given)
        if os.environ.get("NBAGENT_EXECUTION"):  # `nbagent run` counts only the runs its own kernel made
            options["execution"] = os.environ["NBAGENT_EXECUTION"]
        if cfg["script"]:
            options["script"] = str(self._path(cfg["script"]))
        recorded_from = replay if replay is not None and not args.approve else \
            cell_runs[-1].run_id if cell_runs else None
        agent = self.make_agent(cfg, session_name=cfg["session"], replay=replay, recorded_from=recorded_from,
                                cell_mcp=args.mcp)
        from nbagent.ipython.references import for_model

        # images: parts for a model that takes them (a replay: as the recorded run's model did), else described
        context, notes = for_model(context, store.run_state(replay).model if replay else agent.model)
        show_notes(notes)
        tools = [t.strip() for t in args.tools.split(",")] if args.tools else None
        self.reruns.supersede(store, cell_id, prompt)  # its earlier runs' cells: refused if queued, replaced (rerun.py)
        await self.drive(agent, lambda: agent.run(prompt, previous_run_id=previous, fork_of=fork_of,
                                                  cell_id=cell_id, tools=tools, options=options,
                                                  context=context))

    def rerun_of(self, args: Any, cell_id: str | None, prompt: str | None) -> Rerun:
        """Whether this execution asks again or reproduces a recorded run (reproduce.py): `--reproduce [RUN]`, a
        `%agent reproduce RUN` for this cell, or the notebook's `rerun` setting."""
        from nbagent.ipython.reproduce import decide
        from nbagent.secrets.redactor import Redactor

        armed = self.reproduce_next.pop(cell_id, None) if cell_id and prompt is not None else None
        return decide(self.store, cell_id=cell_id, mode=str(self.settings(args)["rerun"][0]), named=args.reproduce,
                      armed=armed, prompt=Redactor().text(prompt) if prompt is not None else None)

    def note_rerun(self, line: str) -> None:
        """Before anything else the cell shows (the "loading the model library" line): that it asks again, when it
        does and its cell has a run already. A reproduction says so once checked (start_run)."""
        args = parse(cell_parser(), self.shell.var_expand(line) if hasattr(self.shell, "var_expand") else line)
        cell_id = self.cell_id()
        if args.help or args.reproduce is not None or (cell_id and cell_id in self.reproduce_next) or \
                self.settings(args)["rerun"][0] == "reproduce":
            return
        rerun = self.rerun_of(args, cell_id, None)
        if rerun.kind == "ask" and rerun.line is not None:
            show_notes([rerun.line])
            self.rerun_noted = self.execution()

    def execution(self) -> str | None:
        """The id of the request this kernel is executing (its parent message)."""
        kernel = getattr(self.shell, "kernel", None)
        try:
            parent = kernel.get_parent() if kernel is not None else None
        except Exception:
            return None
        msg_id = ((parent or {}).get("header") or {}).get("msg_id")
        return str(msg_id) if msg_id else None

    def make_agent(self, cfg: dict[str, Any], *, session_name: str, replay: str | None = None,
                   recorded_from: str | None = None, cell_mcp: str | None = None) -> RuntimeAgent:
        from nbagent.gate.policy import Budget
        from nbagent.runtime import Agent as RuntimeAgent

        decider = self.decider_for(cfg.get("approve") or "", recorded_from)
        script = self._path(cfg["script"]) if cfg.get("script") and not replay else None
        model = cfg.get("model") or None
        if replay is None and script is None and not model:
            from nbagent.models.detect import NO_MODEL, detect

            found = detect()
            if found is None:
                raise UsageError("%%agent: " + NO_MODEL)
            model = found.model
        budget = Budget(max_steps=int(cfg.get("max_steps") or 50), max_cost=float(cfg.get("budget") or 0) or None)
        mcp = cfg.get("mcp") or None
        tools = self.all_tools(mcp, approve=cfg.get("approve") or None, session=session_name, cell_mcp=cell_mcp)
        from nbagent.mcp import code_files, notebook_config

        # the MCP file the settings name starts commands at the next run, and the files of the folder its servers'
        # command lines name (`sh tools/serve.sh`) are what those commands run: writing any of them is code
        code = [str(self._path(mcp))] if mcp and not str(mcp).lstrip().startswith("{") else []
        code += code_files(notebook_config(self.folder, mcp))
        timeout = float(cfg.get("model_timeout") or 0)
        agent = RuntimeAgent(
            # --script implies the scripted model (its help says so), whatever model a default names
            model=None if script is not None else model, timeout=timeout if timeout > 0 else 120.0,
            script=script, replay=replay, tools=tools, autonomy=cfg.get("autonomy") or (None if replay else "L1"),
            decider=decider, store=self.store, session=session_name, budget=budget, stream=True,
            tool_timeout=float(cfg.get("tool_timeout") or 0) or None,
            context_window=int(cfg.get("context_window") or 0) or None,
            code_paths=code,  # runs_later.py: a write of one is WRITE_HIGH_RISK, no grant covers it
        )
        # a call past its deadline names the setting that set it (llm.deadline)
        agent.settings = agent.settings.model_copy(update={"timeout_setting": self._timeout_setting()})
        return agent

    def _timeout_setting(self) -> str:
        source = self.settings()["model_timeout"][1]
        if source == "default":
            return "%agent config model_timeout=SECONDS (or NbAgent.model_timeout, NBAGENT_MODEL_TIMEOUT)"
        if source == "%agent config":
            return "%agent config model_timeout=SECONDS"
        if source == "%config NbAgent":
            return "NbAgent.model_timeout"
        return f"model_timeout, set by {source}"

    def decider_for(self, approve: str, recorded_from: str | None) -> Decider:
        from nbagent.gate.deciders import PolicyDecider, RecordedDecider

        if approve in ("all", "none", "low"):
            return PolicyDecider(approve, answer=os.environ.get("NBAGENT_ANSWER"))
        if approve == "recorded":
            if recorded_from is None:
                raise UsageError("--approve recorded: this cell has no earlier run whose decisions to reuse")
            from nbagent.runtime.recording import recorded_events

            if not self._yours(recorded_from, say=True):  # the author's yes of a cloned log: asked on a card
                return self.decider
            return RecordedDecider.from_events(recorded_events(self.store, recorded_from), recorded_from)
        return self.decider

    def _yours(self, run_id: str, say: bool = False) -> bool:
        """Whether `run_id`'s recorded decisions are this user's own, made here (recorded_yes.py); `say`: if not,
        the cell's output says so in one line."""
        from nbagent.runtime.recorded_yes import not_yours

        why = not_yours(self.store, run_id)
        if why is not None and say:
            show_notes([why])
        return why is None

    async def drive(self, agent: RuntimeAgent, start: Callable[[], Awaitable[RunResult]],
                    run_id: str | None = None) -> RunResult | None:
        """Show a live view, run, and leave the static record in the output whatever happens. A run continued
        here (`run_id` given) gets a line saying where it started, and its earlier records are updated."""
        from nbagent.ipython.live import LiveDisplay

        if run_id is not None:
            from IPython.display import display

            display(ContinuationNote(self.continuation_text(run_id)))
        status, self.status_display = self.status_display, None
        live = LiveDisplay(agent, self, run_id, display_id=status)
        self.current_cell, self.current_run = self.cell_id(), run_id

        def follow(kind: str, data: Any) -> None:
            if kind == "event" and data.type == "run_started" and data.payload.parent_run_id is None:
                self.current_run = data.run_id

        unsubscribe_follow = agent.bus.subscribe(follow)
        unsubscribe = agent.bus.subscribe(live.on_bus)
        result: RunResult | None = None
        interrupted = False
        try:
            result = await start()
        except (asyncio.CancelledError, KeyboardInterrupt):
            interrupted = True
        finally:
            unsubscribe()
            unsubscribe_follow()
            live.finish()
        run_id = live.run_id
        if run_id is not None:
            self._update_earlier(run_id, live)
            self._refresh_superseded(agent)
        if interrupted:
            from IPython.display import display

            note_id = f"nbagent-note-{uuid.uuid4().hex}"
            display(InterruptNote(f"Interrupted. The run ({run_id}) is saved and can continue: %agent resume {run_id} "
                                  "(or %agent approve / deny / refine if it was waiting)."), display_id=note_id)
            if run_id is not None:
                self.interrupt_notes.setdefault(run_id, []).append(note_id)
        if self.unanswerable is not None:
            request, self.unanswerable = self.unanswerable, None
            what = f"the question {request.question!r}" if hasattr(request, "question") else \
                f"approval of a {request.max_risk} plan"
            if os.environ.get("NBAGENT_EXECUTION"):
                where = self.settings()["approve"][1]
                raise HeadlessDecisionError(HEADLESS_IN_RUN.format(run_id=run_id, what=what, where=where))
            raise HeadlessDecisionError(HEADLESS_MESSAGE.format(run_id=run_id, what=what))
        self._tell_the_kernel(result, run_id, interrupted)
        return result

    @staticmethod
    def _tell_the_kernel(result: RunResult | None, run_id: str | None, interrupted: bool) -> None:
        """Fail the cell when its run failed or was interrupted, as the kernel would fail a person's cell. A run
        that waits for a decision, or that carried on past a denial (`completed_with_errors`), has not failed."""
        from nbagent.events.state import RunStatus

        if interrupted or (result is not None and result.status == RunStatus.INTERRUPTED):
            if run_id is None:
                raise RunInterrupted("the cell was interrupted before its run began; run it again")
            raise RunInterrupted(f"run {run_id} was interrupted; it is saved, and %agent resume {run_id} continues it")
        if result is not None and result.status == RunStatus.FAILED:
            raise RunFailed(f"run {result.run_id} failed: {result.error or 'see its record'}")
