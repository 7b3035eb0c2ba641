"""The agent inside a kernel: `%%agent` cells and `%agent` lines, one `NotebookHost` per IPython shell.

The host owns what a notebook shares between cells: the store beside the notebook, the interactive decider
that widget clicks resolve, the option overrides of `%agent config`, and which run each cell last made (a
re-run cell forks the conversation from before that run). Each run is shown by a `LiveDisplay`: the run view
widget while it runs, replaced through the same display id by the static record when it ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..deciders import Decider, InteractiveDecider, PolicyDecider, RecordedDecider, Verdict
from ..models.base import ModelScriptError
from ..policy import Budget
from ..runtime import Agent as RuntimeAgent
from ..runtime import RunResult, RunStateError
from ..state import RunStatus
from ..store import Store, StoreError, store_path_for
from ..tools.base import Tool
from .live import LiveDisplay
from .notes import ContinuationNote, InterruptNote, Shown, execution_count, show_notes
from .notes import cell_label as _cell_label
from .options import SETTINGS, NbAgent, UsageError, cell_parser, line_parser, parse, resolve, set_override
from .references import UnknownVariable

_host: NotebookHost | None = None
log = logging.getLogger("nbagent.ipython")


def install(shell: Any) -> NotebookHost:
    global _host
    if _host is None or _host.shell is not shell:
        _host = NotebookHost(shell)
    return _host


def current() -> NotebookHost:
    if _host is None:
        raise UsageError("nbagent is not loaded in this kernel: run %load_ext nbagent first")
    return _host


async def run_cell(line: str, body: str) -> Any:
    return await _shown(lambda: current().run_cell(line, body), offline=lambda: current().offline_cell(line))


async def run_line(line: str) -> Any:
    return await _shown(lambda: current().run_line(line))


_EXPECTED = (UsageError, StoreError, RunStateError, ModelScriptError, UnknownVariable, ValueError)

LOADING = "nbagent: loading the model library (first run in this kernel)…"


class _Status:
    """A one-line status shown in the cell before the run view (replaced by it through the same display id)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        import html

        return {"text/plain": self.text, "text/html": f"<p><em>{html.escape(self.text)}</em></p>"}


async def _warmed_up(offline: bool = False) -> str | None:
    """Wait for the background warm-up (see warmup.py) before this cell imports anything; while it runs, say so.
    A cell with an offline model waits only for nbagent's own modules (~0.1 s), never for litellm's import.
    Returns the display id of that status line, for the run view to take over, or None when nothing waited."""
    from . import warmup

    if not warmup.running() or (offline and warmup.offline_ready()):
        return None
    import uuid

    from IPython.display import display

    display_id = f"nbagent-{uuid.uuid4().hex}"
    display(_Status(LOADING), display_id=display_id)
    try:
        await (warmup.wait_offline() if offline else warmup.wait())
    except BaseException:  # interrupted (ipykernel cancels the awaiting cell): the cell no longer loads anything
        from IPython.display import update_display

        update_display({"text/plain": ""}, raw=True, display_id=display_id)
        raise
    return display_id


async def _shown(start: Callable[[], Awaitable[Any]], offline: Callable[[], bool] | None = None) -> Any:
    """Run a cell's work. An nbagent error (bad options, an unknown `{name}`, no run waiting...) fails the cell
    with one clear line and no traceback, so Run All and `nbagent run` stop there; whatever the cell shows is
    redacted."""
    try:
        quick = offline() if offline is not None else False
    except Exception:  # options that do not parse: the cell reports them once it runs
        quick = False
    status = await _warmed_up(quick)
    if _host is not None:
        _host.status_display = status
    try:
        return await start()
    except _EXPECTED as exc:
        text = redact(str(exc)).rstrip()
        shown = scrub(exc)
        name = type(exc).__name__
        shown._render_traceback_ = lambda: [f"\x1b[0;31m{name}\x1b[0m: {text}"]  # type: ignore[attr-defined]
        raise shown from None
    except Exception as exc:
        shown = scrub(exc)
        if shown is exc:
            raise
        raise shown from None
    finally:
        if _host is not None and _host.status_display is not None:  # no run view took the status line's place
            from IPython.display import update_display

            update_display({"text/plain": ""}, raw=True, display_id=_host.status_display)
            _host.status_display = None


def redact(text: str) -> str:
    """Text for the cell's output, with the secrets of this kernel's environment taken out (see nbagent.secrets)."""
    from ..secrets import Redactor

    return Redactor().text(text)


def scrub(exc: BaseException) -> BaseException:
    """The exception to show in the cell: `exc` with its messages (and those it was raised from) redacted.

    If some text still leaks after the args are redacted (a class that formats its message itself), a
    RuntimeError with the redacted text of `exc` is shown instead, without the chain."""
    from ..secrets import Redactor

    r = Redactor()
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = str(e)
        if r.text(text) != text:
            try:
                e.args = tuple(r.redact(a) if isinstance(a, str | list | tuple | dict) else a for a in e.args)
            except Exception:
                pass
            if r.text(str(e)) != str(e):  # its chain is not shown: the first message says enough
                return RuntimeError(f"{type(exc).__name__}: {r.text(str(exc))}")
        e = e.__cause__ or e.__context__
    return exc


HEADLESS_MESSAGE = (
    "nbagent: run {run_id} needs a decision ({what}), but nobody can answer here: no run view was shown by a "
    "front end, so this looks like a headless kernel (nbconvert, papermill). Set NBAGENT_APPROVE=all|none|low "
    "for the kernel, pass --approve to the cell, or use `nbagent run NOTEBOOK --approve ...`. The run is saved "
    "as waiting: %agent resume {run_id} continues it."
)


class HeadlessDecisionError(RuntimeError):
    """A run needs a person and none is there: fail the cell now rather than wait forever."""


class KernelDecider(InteractiveDecider):
    """Waits for a click, but only when a front end has shown that someone can click (see `someone_can_answer`)."""

    def __init__(self, host: NotebookHost) -> None:
        super().__init__()
        self.host = host

    async def _wait(self, request_id: str, request: Any) -> object | None:
        if not await self.host.someone_can_answer():
            self.host.unanswerable = request
            return None
        return await super()._wait(request_id, request)


class NotebookHost:
    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.config = NbAgent(parent=shell)
        self._noted_old_section = False  # said once per kernel that `Agent.<name>` config is not read
        if hasattr(shell, "configurables"):
            shell.configurables.append(self.config)
        self.overrides: dict[str, Any] = {}
        self.decider = KernelDecider(self)
        self.frontend_seen = False  # a run view reported being rendered: a person can click
        self.unanswerable: Any = None  # the request a headless kernel could not get answered
        self._store: Store | None = None
        # run id -> every output this kernel showed it in (display id, cell, execution count), oldest first: a run
        # continued in a later cell, or superseded, has each of its records brought up to date through these
        self.display_ids: dict[str, list[Shown]] = {}
        self.interrupt_notes: dict[str, list[str]] = {}  # run id -> display ids of its "Interrupted…" lines
        self.status_display: str | None = None  # the "loading…" line a run view may take over (see _shown)
        self.no_wait = False  # an `%agent` line that cannot await (direct.py): show, never wait to be drawn
        self.last_error: dict[str, str] | None = None  # the last exception of a cell, for %agent fix
        self.current_cell: str | None = None  # the cell and run being driven (for insert_code_cell)
        self.current_run: str | None = None
        from .outputs import install as capture_outputs
        from .parameters import Parameters

        self.outputs = capture_outputs(shell)  # what cells display, for {Out[n]} (outputs.py)
        self.parameters = Parameters()  # papermill's -p values (parameters.py)
        if self.cell_id() is None:  # papermill sends no cell ids; its cells run before %load_ext count too
            self.parameters.scan(getattr(shell, "user_ns", {}).get("In"), before=-1)
        events = getattr(shell, "events", None)
        if events is not None:
            events.register("post_run_cell", self._after_cell)
            events.register("post_run_cell", self._parameters_cell)

    def _parameters_cell(self, result: Any) -> None:
        """A papermill parameters cell (parameters.py), taken only when no cell id came with it: papermill sends
        none, JupyterLab and `nbagent run` always do."""
        source = getattr(getattr(result, "info", None), "raw_cell", "") or ""
        if source.lstrip().startswith("# Parameters") and self.cell_id() is None:
            self.parameters.observe(source, getattr(result, "execution_count", None))

    def _after_cell(self, result: Any) -> None:
        """Remember the last failing cell: its source, the exception and the traceback (for %agent fix)."""
        error = getattr(result, "error_in_exec", None)
        source = getattr(getattr(result, "info", None), "raw_cell", "") or ""
        if error is None or source.lstrip().startswith(("%agent", "%%agent")):
            return
        import traceback as tb

        from ..timeline import clip

        lines = tb.format_exception(type(error), error, error.__traceback__)
        text = "".join(lines)
        if len(text) > 8000:
            text = text[:2000] + "\n…\n" + text[-6000:]
        from .references import MAX_SOURCE

        if len(source) > MAX_SOURCE:  # {Err} and %agent fix bring the cell as {In[n]} does: capped, and said so
            source = source[:MAX_SOURCE] + f"\n… [cut: the cell has {len(source):,} characters]"
        self.last_error = {"type": type(error).__name__, "message": clip(str(error), 500), "traceback": text,
                           "source": source}

    def frontend_rendered(self) -> None:
        self.frontend_seen = True

    async def someone_can_answer(self) -> bool:
        """True once a front end has drawn a run view. Headless kernels (NBAGENT_HEADLESS=1) never can; in
        between, wait up to NBAGENT_FRONTEND_WAIT seconds (default 5) for the view to report in."""
        if os.environ.get("NBAGENT_HEADLESS") == "1":
            return False
        deadline = asyncio.get_running_loop().time() + float(os.environ.get("NBAGENT_FRONTEND_WAIT", "5"))
        while not self.frontend_seen and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        return self.frontend_seen

    # ------------------------------------------------------------------ where and what

    @property
    def notebook(self) -> Path:
        """The notebook's path: JupyterLab tells the kernel (`__session__`); `nbagent run` does too."""
        name = self.shell.user_ns.get("__session__") or os.environ.get("JPY_SESSION_NAME")
        if name and str(name).endswith(".ipynb"):
            path = Path(name)
            return path if path.is_absolute() else Path.cwd() / path
        return Path.cwd() / "agent.ipynb"  # documented fallback: a store named agent.nbagent in the cwd

    @property
    def folder(self) -> Path:
        return self.notebook.parent

    @property
    def store(self) -> Store:
        path = store_path_for(self.notebook)
        if self._store is None or self._store.path != path:
            self._store = Store(path)
        return self._store

    def cell_id(self) -> str | None:
        kernel = getattr(self.shell, "kernel", None)
        try:
            parent = kernel.get_parent() if kernel is not None else None
        except Exception:
            parent = None
        cell = ((parent or {}).get("metadata") or {}).get("cellId")
        return str(cell) if cell else None

    def settings(self, args: Any | None = None) -> dict[str, tuple[Any, str]]:
        from .options import old_section_note

        if not self._noted_old_section:
            note = old_section_note(getattr(self.shell, "config", {}))
            if note:
                self._noted_old_section = True
                print(note, file=sys.stderr)
        params = self.parameters.as_dict() if hasattr(self, "parameters") else None
        return {name: resolve(name, getattr(args, name, None) if args is not None else None, self.overrides,
                              self.config, params) for name in SETTINGS}

    def offline_cell(self, line: str) -> bool:
        """Whether this `%%agent` line runs an offline model (a script, a replay, `nbagent/...`): then it needs
        nothing of litellm's and does not wait for the warm-up to import it."""
        args = parse(cell_parser(), line)
        if args.replay is not None:
            return True
        model, script = (self.settings(args)[k][0] for k in ("model", "script"))
        return bool(script) or str(model or "").startswith("nbagent/")  # a script plays whatever the model's name

    def real_model_likely(self) -> bool:
        """Whether a cell without --model would use a real provider: a configured model that is not one of the
        offline ones, or (none configured, no script) a key or a local Ollama that `detect` would pick. The
        warm-up loads litellm ahead only then."""
        model, script = (self.settings()[k][0] for k in ("model", "script"))
        if model:
            return not str(model).startswith("nbagent/")
        if script:
            return False
        from ..models.detect import detect

        return detect() is not None

    def user_tools(self) -> list[Tool]:
        return [v for k, v in self.shell.user_ns.items() if isinstance(v, Tool) and not k.startswith("_")]

    def all_tools(self, mcp: str | None = None, *, approve: str | None = None, session: str | None = None,
                  cell_mcp: str | None = None, notes: bool = True) -> list[Tool]:
        """Built-in tools, the notebook's `@tool`s, then the MCP servers' tools: mcp.json beside the notebook and
        `mcp` (the cell's --mcp, else the `mcp` setting); each MCP problem is one line on stderr (docs/mcp.md).

        A server from a file starts only if the log trusts its entry, or `approve` is "all" (trusted now, in
        `session`'s chain); each other one is a line in the cell (`notes`) saying how to trust it (trust.py)."""
        from ..blobs import BlobStore
        from ..scope import Scope
        from ..tools.files import file_tools
        from ..tools.kernel import kernel_tools
        from .cells import insert_cell_tool

        blobs = BlobStore.of_store(store_path_for(self.notebook))  # file changes saved for %agent undo
        builtin = (file_tools(Scope(root=self.folder, base=self.folder), blobs) + kernel_tools(self.shell.user_ns)
                   + [insert_cell_tool(lambda: (self.current_cell, self.current_run))])
        names = {t.name for t in builtin}
        tools = builtin + [t for t in self.user_tools() if t.name not in names]
        from ..mcp import notebook_toolset
        from . import trust

        setting = mcp if mcp is not None else self.settings()["mcp"][0]
        name = session or self.settings()["session"][0]
        gate = trust.Gate(self.store, lambda: self.store.session(name, notebook=self.notebook.name), approve)
        found = notebook_toolset(self.folder, setting or None, taken={t.name for t in tools}, trusted=gate)
        for line in found.problems:
            print(redact(f"nbagent: {line}"), file=sys.stderr)
        if notes:
            own = (cell_mcp, str(self._path(cell_mcp))) if cell_mcp and not cell_mcp.lstrip().startswith("{") else None
            trust.show(found.untrusted, gate.trusts, approve, own)
        return tools + found.tools

    # ------------------------------------------------------------------ %%agent

    async def run_cell(self, line: str, body: str) -> None:
        args = parse(cell_parser(), self.shell.var_expand(line) if hasattr(self.shell, "var_expand") else line)
        if args.help:
            print(cell_parser().format_help())
            return
        prompt = body.strip()
        if not prompt:
            raise UsageError("%%agent: the cell has no request; write it below the %%agent line")
        from .references import Notebook, context_message, expand_all, notebook_message, too_big_notes

        notebook = Notebook.of(self.shell, self.outputs, self.last_error)  # {In[n]}, {Out[n]}, {Err}
        prompt, names, refs = expand_all(prompt, self.shell.user_ns, notebook)
        context = [m for m in [context_message(names, self.shell.user_ns), notebook_message(refs, notebook)] if m]
        show_notes(too_big_notes(refs, notebook))  # information, not an error: a display, not stderr
        await self.start_run(args, prompt, context)

    async def start_run(self, args: Any, prompt: str, context: list[dict[str, Any]]) -> None:
        self.parameters.check()  # a bad papermill value fails here, in one line
        cfg = {k: v for k, (v, _) in self.settings(args).items()}
        store = self.store
        session = store.session(cfg["session"], notebook=self.notebook.name)
        cell_id = self.cell_id()
        previous: Any = "auto"
        fork_of = None
        cell_runs = [r for r in store.list_runs(session.id) if cell_id and r.cell_id == cell_id
                     and r.parent_run_id is None]
        if args.new:
            previous = None
        elif cell_runs and cell_runs[-1].status != RunStatus.SUPERSEDED:
            fork_of = cell_runs[-1].id  # re-running a cell: start from before its last run
        replay = None
        if args.replay is not None:
            if args.replay:
                replay = store.resolve_run(args.replay)
            elif cell_runs:
                replay = cell_runs[-1].id
            else:
                raise UsageError("%%agent --replay: this cell has no recorded run; name one: --replay RUN")
        options = {k: cfg[k] for k in ("script", "approve", "max_steps", "budget") if cfg[k]}
        if cfg.get("mcp") and not str(cfg["mcp"]).lstrip().startswith("{"):
            options["mcp"] = cfg["mcp"]  # a file's name, so a resume finds the same servers (never inline JSON:
            # its headers may hold tokens, and the log keeps what it is given)
        if os.environ.get("NBAGENT_EXECUTION"):  # `nbagent run` counts only the runs its own kernel made
            options["execution"] = os.environ["NBAGENT_EXECUTION"]
        if cfg["script"]:
            options["script"] = str(self._path(cfg["script"]))
        agent = self.make_agent(cfg, session_name=cfg["session"], replay=replay,
                                recorded_from=cell_runs[-1].id if cell_runs else None, cell_mcp=args.mcp)
        from .references import for_model

        # images: parts for a model that takes them (a replay: as the recorded run's model did), else described
        context, notes = for_model(context, store.run_state(replay).model if replay else agent.model)
        show_notes(notes)
        tools = [t.strip() for t in args.tools.split(",")] if args.tools else None
        await self.drive(agent, lambda: agent.run(prompt, previous_run_id=previous, fork_of=fork_of,
                                                  cell_id=cell_id, tools=tools, options=options,
                                                  context=context))

    def _path(self, value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.folder / p

    def make_agent(self, cfg: dict[str, Any], *, session_name: str, replay: str | None = None,
                   recorded_from: str | None = None, cell_mcp: str | None = None) -> RuntimeAgent:
        decider = self.decider_for(cfg.get("approve") or "", recorded_from)
        script = self._path(cfg["script"]) if cfg.get("script") and not replay else None
        model = cfg.get("model") or None
        if replay is None and script is None and not model:
            from ..models.detect import NO_MODEL, detect

            found = detect()
            if found is None:
                raise UsageError("%%agent: " + NO_MODEL)
            model = found.model
        budget = Budget(max_steps=int(cfg.get("max_steps") or 50), max_cost=float(cfg.get("budget") or 0) or None)
        mcp = cfg.get("mcp") or None
        tools = self.all_tools(mcp, approve=cfg.get("approve") or None, session=session_name, cell_mcp=cell_mcp)
        from ..mcp import code_files, notebook_config

        # the MCP file the settings name starts commands at the next run, and the files of the folder its servers'
        # command lines name (`sh tools/serve.sh`) are what those commands run: writing any of them is code
        code = [str(self._path(mcp))] if mcp and not str(mcp).lstrip().startswith("{") else []
        code += code_files(notebook_config(self.folder, mcp))
        return RuntimeAgent(
            # --script implies the scripted model (its help says so), whatever model a default names
            model=None if script is not None else model,
            script=script, replay=replay, tools=tools, autonomy=cfg.get("autonomy") or "L1",
            decider=decider, store=self.store, session=session_name, budget=budget, stream=True,
            code_paths=code,  # runs_later.py: a write of one is WRITE_HIGH_RISK, no grant covers it
        )

    def decider_for(self, approve: str, recorded_from: str | None) -> Decider:
        if approve in ("all", "none", "low"):
            return PolicyDecider(approve, answer=os.environ.get("NBAGENT_ANSWER"))
        if approve == "recorded":
            if recorded_from is None:
                raise UsageError("--approve recorded: this cell has no earlier run whose decisions to reuse")
            from ..replay import recorded_events

            return RecordedDecider.from_events(recorded_events(self.store, recorded_from), recorded_from)
        return self.decider

    async def drive(self, agent: RuntimeAgent, start: Callable[[], Awaitable[RunResult]],
                    run_id: str | None = None) -> RunResult | None:
        """Show a live view, run, and leave the static record in the output whatever happens. A run continued
        here (`run_id` given) gets a line saying where it started, and its earlier records are updated."""
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
            raise HeadlessDecisionError(HEADLESS_MESSAGE.format(run_id=run_id, what=what))
        return result

    def _execution_count(self) -> int | None:
        """The running cell's number as JupyterLab shows it (notes.py: not `shell.execution_count`, one ahead)."""
        return execution_count(self.shell)

    def continuation_text(self, run_id: str) -> str:
        """Where a run continued in this cell started, and whether its record there is kept up to date."""
        state = self.store.run_state(run_id)
        here = self.cell_id()
        earlier = [s for s in self.display_ids.get(run_id, []) if s.cell_id != here or here is None]
        if earlier:
            first = next((s for s in earlier if s.cell_id == state.cell_id), earlier[0])
            where = _cell_label(first.cell_id, first.count)
            return (f"↪ continues run {run_id} from {where}; that cell's record is updated to match this one "
                    "when the run stops.")
        if state.cell_id and state.cell_id != here:
            return (f"↪ continues run {run_id}, started in {_cell_label(state.cell_id, None)} (an earlier kernel "
                    "showed it, so its record there may show an older state; this record is the latest).")
        return f"↪ continues run {run_id}."

    def _update_earlier(self, run_id: str, live: LiveDisplay) -> None:
        """Every earlier output of this run shows its state now (same display ids), then this one is remembered."""
        from IPython.display import update_display

        from ..ui.record import RunRecord

        shown = self.display_ids.setdefault(run_id, [])
        if shown and live.final_view is not None:
            record = RunRecord(live.final_view)
            for earlier in shown:
                if earlier.display_id != live.display_id:
                    update_display(record, display_id=earlier.display_id)
            # the earlier cells' "Interrupted… %agent resume" lines: the run was continued here, say so
            here = _cell_label(self.cell_id(), self._execution_count())
            for note_id in self.interrupt_notes.pop(run_id, []):
                update_display(InterruptNote(f"Interrupted here, then continued in {here}; the record above shows "
                                             f"where the run is now ({live.final_view.get('status')}).", done=True),
                               display_id=note_id)
        shown.append(Shown(live.display_id, self.cell_id(), self._execution_count()))

    def _refresh_records(self, run_ids: list[str]) -> None:
        """Every record of these runs in the notebook shows them as they are now (an undo just put their files
        back: "undone by", no Undo…). This kernel's own outputs through their display ids; the ones an earlier
        kernel made (before a restart, or in a reopened notebook) are out of its reach, so the records go to the lab
        extension too (comm target `nbagent.records`), which updates every older record of each run."""
        from IPython.display import update_display

        from ..ui.record import bundle
        from ..ui.viewstate import run_view

        records = []
        for run_id in run_ids:
            record = bundle(run_view(self.store, run_id))
            records.append(record)
            for s in self.display_ids.get(run_id) or []:
                update_display(record, raw=True, display_id=s.display_id)
        try:
            from comm import create_comm

            create_comm(target_name="nbagent.records", data={"records": records}).close()
        except Exception as exc:  # no front end to tell (a terminal, or a page without the lab extension)
            log.debug("no front end received the records: %s", exc)

    def _refresh_superseded(self, agent: RuntimeAgent) -> None:
        """Runs forked away get their static records re-rendered with the superseded banner, in place."""
        from IPython.display import update_display

        from ..ui.record import RunRecord
        from ..ui.viewstate import run_view

        for run_id, shown in list(self.display_ids.items()):
            state = self.store.run_state(run_id)
            if state.status == RunStatus.SUPERSEDED:
                record = RunRecord(run_view(self.store, run_id))
                for s in shown:
                    update_display(record, display_id=s.display_id)
                del self.display_ids[run_id]

    # ------------------------------------------------------------------ %agent

    async def run_line(self, line: str) -> Any:
        # `{name}` and `$name` expand as in any line magic (`%agent undo {run_id}`), as `%%agent`'s own line does
        args = parse(line_parser(), self.shell.var_expand(line) if hasattr(self.shell, "var_expand") else line)
        if args.help or not args.command:
            print(line_parser().format_help())
            return None
        return await getattr(self, "cmd_" + args.command)(args)

    async def cmd_status(self, args: Any) -> None:
        runs = self.store.list_runs()
        if not runs:
            print(f"no runs yet; the log will be {self.store.path}")
            return
        last = runs[-1]
        print(f"latest run {last.id}: {last.status.value} · {last.model} · {last.steps} tool call(s) · "
              f"{last.tokens} tokens · log {self.store.path}")
        for r in runs:
            state = self.store.run_state(r.id)
            if state.pending is not None:
                what = state.pending.question if state.pending.kind == "human_input" else \
                    f"approval of plan {state.pending.plan_id}"
                print(f"  {r.id} ({state.status.value}) waits for {what}: %agent approve|deny|refine|answer {r.id}")
            elif state.status == RunStatus.INTERRUPTED:
                print(f"  {r.id} was interrupted: %agent resume {r.id}")

    async def cmd_runs(self, args: Any) -> None:
        from ..cli import _run_row, short_ids, table
        from ..ui.viewstate import cell_labels

        runs = self.store.list_runs()
        if not runs:
            print("no runs yet")
            return
        names = {s["id"]: s["name"] for s in self.store.sessions.all()}
        short = short_ids([r.id for r in runs])
        rows = [["RUN", "SESSION", "CELL", "STATUS", "MODEL", "TOOL CALLS", "TOKENS", "COST", "STARTED"]]
        cells = cell_labels(r.cell_id for r in runs)  # the shortest unique form, as `nbagent runs` shows it
        rows += [_run_row(r, short[r.id], names, cells) for r in runs]
        print(table(rows, right={5, 6, 7}))

    async def cmd_show(self, args: Any) -> None:
        from ..cli import render_timeline

        run_id = self.store.resolve_run(args.run)
        print(render_timeline(self.store.run_state(run_id), self.store.run_events(run_id), self.store.path))

    async def cmd_log(self, args: Any) -> Any:
        from ..timeline import describe

        events = self.store.run_events(self.store.resolve_run(args.run)) if args.run else \
            self.store.query_events()
        rows = [{"ts": e.ts, "run": e.run_id, "seq": e.seq, "type": e.type, "detail": describe(e)} for e in events]
        try:
            import pandas as pd
        except ImportError:
            for r in rows:
                print(f"{r['ts'][:23]}  {str(r['run'])[:12]:12}  {r['seq']:>4}  {r['type']:<22} {r['detail']}")
            return None
        return pd.DataFrame(rows)

    def _waiting_run(self, run: str | None, command: str = "approve") -> str:
        """The run a decision is for: the one named, else the only one waiting. With several waiting, guessing
        could approve the wrong plan, so the user is asked to name one."""
        if run:
            return self.store.resolve_run(run)
        waiting = [(r, state) for r in self.store.list_runs()
                   if (state := self.store.run_state(r.id)).pending is not None]
        if not waiting:
            raise UsageError("no run is waiting for a decision; %agent status shows the runs")
        if len(waiting) == 1:
            return waiting[0][0].id
        usage = {"deny": "RUN reason", "refine": "RUN feedback", "answer": "RUN your answer"}.get(command, "RUN")
        lines = [f"{len(waiting)} runs are waiting for a decision; name the one you mean: %agent {command} {usage}"]
        for r, state in waiting:
            p = state.pending
            what = f"an answer to {p.question!r}" if p.kind == "human_input" else f"approval of plan {p.plan_id}"
            lines.append(f"  {r.id}  cell {r.cell_id or '-'}  waits for {what}")
        raise UsageError("\n".join(lines))

    async def _decide(self, run: str | None, verdict: Verdict | None = None, answer: str | None = None,
                      command: str = "approve") -> None:
        run_id = self._waiting_run(run, command)
        state = self.store.run_state(run_id)
        pending = state.pending
        if pending is None:
            raise UsageError(f"run {run_id} is not waiting for a decision ({state.status.value})")
        from ..deciders import Answer

        value = verdict if verdict is not None else Answer(text=answer or "", by="user")
        if self.decider.resolve(pending.request_id, value):
            print(f"delivered to the waiting run {run_id}")
            return
        agent = self.agent_for(run_id)
        agent.answer_pending(run_id, verdict=verdict, answer=answer)
        await self.drive(agent, lambda: agent.resume(run_id), run_id)

    def _split(self, words: list[str]) -> tuple[str | None, str]:
        if words and self._is_run(words[0]):
            return words[0], " ".join(words[1:])
        return None, " ".join(words)

    def _is_run(self, word: str) -> bool:
        try:
            self.store.resolve_run(word)
            return len(word) >= 6
        except StoreError:
            return False

    def _grant_spec(self, args: Any, run: str | None, effect: str) -> Any:
        """The grant a `%agent approve|deny --for ...` asks for, checked against the plan it decides: a pattern
        that covers none of the plan's calls is one line, and nothing is decided."""
        from .. import grants

        if args.reach is None:
            if args.paths or args.arg_patterns or args.expires:
                raise UsageError(f"%agent {'approve' if effect == 'allow' else 'deny'}: --path, --arg and --expires "
                                 "shape a grant; add --for run or --for session")
            return None
        pairs = {}
        for pair in args.arg_patterns or []:
            if "=" not in pair:
                raise UsageError(f"--arg {pair!r}: write NAME=GLOB, e.g. --arg mode=w")
            key, value = pair.split("=", 1)
            pairs[key.strip()] = value
        try:
            spec = grants.GrantSpec(scope=args.reach, paths=args.paths, arguments=pairs,
                                    expires_in=grants.parse_duration(args.expires) if args.expires else None)
            run_id = self._waiting_run(run, "approve" if effect == "allow" else "deny")
            state = self.store.run_state(run_id)
            pending = state.pending
            if pending is None or pending.kind != "approval":
                raise UsageError(f"run {run_id} is not waiting for an approval; a grant needs a plan to decide")
            tools = {t.name: t for t in self.all_tools(notes=False)}
            grants.for_plan(pending.steps, state.autonomy, spec, effect, tools)  # type: ignore[arg-type]
        except grants.GrantError as exc:
            raise UsageError(f"%agent {'approve' if effect == 'allow' else 'deny'}: {exc}") from None
        return spec

    async def cmd_approve(self, args: Any) -> None:
        grant = self._grant_spec(args, args.run, "allow")
        await self._decide(args.run, Verdict.approve(by="%agent approve", grant=grant))

    async def cmd_deny(self, args: Any) -> None:
        run, reason = self._split(args.words)
        grant = self._grant_spec(args, run, "reject")
        await self._decide(run, Verdict.deny(reason, by="%agent deny", grant=grant), command="deny")

    async def cmd_grants(self, args: Any) -> None:
        from ..grants import grants_table

        print(grants_table(self.store, everything=args.all))

    async def cmd_revoke(self, args: Any) -> None:
        from ..grants import GrantError, revoke

        try:
            print(revoke(self.store, args.grant, by="%agent revoke", reason=" ".join(args.reason)))
        except GrantError as exc:
            raise UsageError(f"%agent revoke: {exc}") from None

    async def cmd_refine(self, args: Any) -> None:
        run, feedback = self._split(args.words)
        if not feedback.strip():
            raise UsageError("%agent refine: say what to change, e.g. %agent refine use report.md instead")
        await self._decide(run, Verdict.refine(feedback, by="%agent refine"), command="refine")

    async def cmd_answer(self, args: Any) -> None:
        run, text = self._split(args.words)
        await self._decide(run, answer=text, command="answer")

    async def cmd_resume(self, args: Any) -> None:
        if args.run:
            run_id = self.store.resolve_run(args.run)
        else:
            candidates = [r.id for r in self.store.list_runs()
                          if r.status in (RunStatus.WAITING, RunStatus.INTERRUPTED, RunStatus.RUNNING)]
            if not candidates:
                raise UsageError("no run to resume; %agent status shows the runs")
            run_id = candidates[-1]
        agent = self.agent_for(run_id)
        await self.drive(agent, lambda: agent.resume(run_id), run_id)

    def agent_for(self, run_id: str) -> RuntimeAgent:
        """An agent able to continue a recorded run, after a restart too: settings come from its events."""
        state = self.store.run_state(run_id)
        opts = state.options
        cfg = {k: v for k, (v, _) in self.settings().items()}
        cfg.update(model=state.model, autonomy=state.autonomy.value, script=opts.get("script", ""),
                   max_steps=opts.get("max_steps", cfg["max_steps"]), budget=opts.get("budget", cfg["budget"]),
                   mcp=opts.get("mcp", cfg.get("mcp")))  # the run's own MCP servers, after a restart too
        if state.model == "nbagent/replay":
            raise UsageError(f"run {run_id} was a replay; re-run its cell to replay again")
        session = self.store.get_session(state.session_id)
        return self.make_agent(cfg, session_name=session.name)

    async def cmd_tools(self, args: Any) -> None:
        from ..tools.control import CONTROL_TOOLS

        tools = [*self.all_tools(approve=self.settings()["approve"][0] or None), *CONTROL_TOOLS.values()]
        width = max([20, *(len(t.name) for t in tools)])  # MCP tools' names (mcp__SERVER__TOOL) are longer
        for t in tools:
            server = getattr(t, "server", None)  # an MCP server's tool (nbagent/mcp.py): say which, and why that risk
            where = f"[MCP server {server}; {t.risk_reason}] " if server else ""  # type: ignore[attr-defined]
            print(f"{t.name:<{width}} {t.risk.value:<16} {where}{t.description}")

    async def cmd_trust(self, args: Any) -> None:
        from .trust import cmd_trust

        cmd_trust(self, args)

    async def cmd_mcp(self, args: Any) -> None:
        from .trust import cmd_mcp

        cmd_mcp(self, args)

    async def cmd_models(self, args: Any) -> None:
        from ..models.detect import NO_MODEL, candidates

        value, source = self.settings()["model"]
        script, script_source = self.settings()["script"]
        if value:
            print(f"model: {value} (from {source})")
        elif script:
            print(f"model: nbagent/scripted playing {script} (from {script_source})")
        found = candidates()
        for c in found:
            print(f"detected: {c.model} ({c.why})")
        if not value and not script:
            print(f"model: {found[0].model} (detected: {found[0].why})" if found else NO_MODEL)

    async def cmd_fix(self, args: Any) -> None:
        error = self.last_error
        if error is None:
            raise UsageError("%agent fix: no cell has failed in this kernel yet")
        extra = " ".join(args.words).strip()
        prompt = ("The cell below failed with " + f"{error['type']}: {error['message']}. Explain the cause in a "
                  "sentence, then propose a fix: a corrected cell (insert_code_cell) or, if the session's state is "
                  "what is wrong, a run_python step." + (f" {extra}" if extra else ""))
        context = [{"role": "user", "content": "The failing cell:\n```python\n" + error["source"].rstrip()
                    + "\n```\n\nThe traceback:\n```\n" + error["traceback"].rstrip() + "\n```"}]
        await self.start_run(cell_parser().parse_args([]), prompt, context)

    async def cmd_config(self, args: Any) -> None:
        for pair in args.pairs:
            print(set_override(self.overrides, pair))
        if not args.pairs:
            for name, (value, source) in self.settings().items():
                if name == "mcp" and str(value).lstrip().startswith("{"):  # inline JSON may hold tokens: not shown
                    value = "<inline JSON>"
                print(redact(f"{name:<10} = {value!r:<30} ({source})"))

    async def cmd_undo(self, args: Any) -> None:
        """`%agent undo RUN [--to] [--force]`: the same undo as `nbagent undo`, from the notebook's log (so it works
        after a kernel restart: everything it needs is in the log and its blob folder)."""
        from ..undo import UndoError, undo

        if await self._undo_panel(args, lambda: undo(self.store, args.run, to=args.to, force=args.force,
                                                     folder=self.folder, by="the Undo button")):
            return
        try:
            report = undo(self.store, args.run, to=args.to, force=args.force, folder=self.folder,
                          by="%agent undo")
        except UndoError as exc:
            raise UsageError(f"%agent undo: {exc}") from None
        print(report.text())
        if report.ok:
            self._refresh_records(list(report.runs))  # their records say "undone by", as after the panel's undo
        if not report.ok:
            raise UsageError("%agent undo: refused; nothing was changed (add --force to restore anyway)"
                             if report.conflicts else
                             "%agent undo: a restore failed (listed above); the undo put back what it had restored")

    async def _undo_panel(self, args: Any, run_undo: Callable[[], Any]) -> bool:
        """With a person at a front end, `%agent undo` shows what will change and undoes only when they confirm
        (the Undo panel, nbagent/ui/widget.py). True when the panel is shown; False (no kernel, headless, no front
        end drawing it within NBAGENT_FRONTEND_WAIT seconds) leaves the undo to the command itself."""
        if getattr(self.shell, "kernel", None) is None or os.environ.get("NBAGENT_HEADLESS") == "1":
            return False
        from IPython.display import display, update_display

        from ..undo import UndoError

        try:
            from ..ui.widget import UndoView, undo_offer

            offer = undo_offer(self.store, args.run, to=args.to, force=args.force, folder=self.folder)
        except UndoError as exc:
            raise UsageError(f"%agent undo: {exc}") from None
        except ImportError:
            return False
        display_id = f"nbagent-undo-{uuid.uuid4().hex}"
        # the panel replaces itself, through this id, by its outcome as HTML and text once the undo ran
        panel = UndoView(offer, run_undo, display_id=display_id)
        panel.on_rendered = self.frontend_rendered
        panel.on_done = lambda report: self._refresh_records(list(report.runs))
        display(panel, display_id=display_id)
        if self.frontend_seen or self.no_wait or await self.someone_can_answer():
            return True  # (no_wait: the panel changes nothing until clicked, so showing it unseen is safe)
        panel.close()
        update_display({"text/plain": ""}, raw=True, display_id=display_id)
        return False

    async def cmd_export(self, args: Any) -> Any:
        from ..ui.record import render_html, render_markdown
        from ..ui.viewstate import run_view

        run_id = self.store.resolve_run(args.run)
        view = run_view(self.store, run_id)
        text = {"json": lambda: json.dumps(view, indent=1, ensure_ascii=False), "html": lambda: render_html(view),
                "md": lambda: render_markdown(view)}[args.format]()
        if args.output:
            out = self._path(args.output)
            out.write_text(text, encoding="utf-8")
            print(f"wrote {out}")
            return None
        if args.format == "html":
            from IPython.display import HTML

            return HTML(text)
        print(text)
        return None
