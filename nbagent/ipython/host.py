"""The agent inside a kernel: `%%agent` cells and `%agent` lines, one `NotebookHost` per IPython shell.

The host owns what a notebook shares between cells: the store beside the notebook, the interactive decider
that widget clicks resolve, the option overrides of `%agent config`, and which run each cell last made (a
re-run cell forks the conversation from before that run). Each run is shown by a `LiveDisplay`: the run view
widget while it runs, replaced through the same display id by the static record when it ends.

This module holds the host's state and what every cell shares: where the notebook is, its settings and tools,
and `_shown`, which fails a cell with one redacted line. What the host does lives beside it, one module each,
as the bases of `NotebookHost`: the `%%agent` cell path (agent_cell.py), the `%agent` commands (commands.py), and
the notes that keep a run's outputs up to date (notes.py). Their names are re-exported here.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbagent.ipython import entry
from nbagent.ipython.agent_cell import HEADLESS_MESSAGE, CellPath, HeadlessDecisionError
from nbagent.ipython.commands import Commands
from nbagent.ipython.notes import RecordNotes, Shown
from nbagent.ipython.options import SETTINGS, NbAgent, UsageError, cell_parser, line_parser, parse, resolve

# `%load_ext` imports this module, so it and its bases import only what loading needs; the runtime, store and
# deciders come with a first run (FIRST_RUN_MODULES below: while it waits for the model process, or once the kernel is
# idle, loading.py), or when a cell or command first uses them.
if TYPE_CHECKING:
    from nbagent.ipython.kernel_decider import KernelDecider
    from nbagent.store import Store
    from nbagent.tools.base import Tool

__all__ = ["HEADLESS_MESSAGE", "HeadlessDecisionError", "NotebookHost", "UsageError", "install"]


def install(shell: Any) -> NotebookHost:
    """The host of `shell`, made on the first `%load_ext nbagent` in it, and made this kernel's (entry.current)."""
    host = entry.installed()
    if host is None or host.shell is not shell:
        host = NotebookHost(shell)
        entry.set_current(host)
    return host


class NotebookHost(CellPath, Commands, RecordNotes):
    """What one IPython shell shares between its nbagent cells (see the module's docstring)."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.config = NbAgent(parent=shell)
        self.noted_old_section = False  # said once per kernel that `Agent.<name>` config is not read
        if hasattr(shell, "configurables"):
            shell.configurables.append(self.config)
        self.overrides: dict[str, Any] = {}
        self._decider: KernelDecider | None = None
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
        from nbagent.ipython.agent_cells import Registry

        self.agent_cells = Registry()  # the cells run_cell and replace_cell wrote in this kernel (agent_cells.py)
        from nbagent.ipython.reproduce import NEXT

        self.reproduce_next = NEXT  # cell id -> the run it reproduces next (%agent reproduce RUN; reproduce.py)
        self.rerun_noted: str | None = None  # the execution that said "asking again" first (agent_cell.note_rerun)
        from nbagent.ipython.rerun import Reruns

        self.reruns = Reruns()  # the agent's cells that re-runs of their %%agent cells superseded (rerun.py)
        from nbagent.ipython.outputs import install as capture_outputs
        from nbagent.ipython.parameters import Parameters

        self.outputs = capture_outputs(shell)  # what cells display, for {Out[n]} (outputs.py)
        self.parameters = Parameters()  # papermill's -p values (parameters.py)
        if self.cell_id() is None:  # papermill sends no cell ids; its cells run before %load_ext count too
            self.parameters.scan(getattr(shell, "user_ns", {}).get("In"), before=-1)
        events = getattr(shell, "events", None)
        if events is not None:
            events.register("post_run_cell", self._after_cell)
            events.register("post_run_cell", self._parameters_cell)
            # (IPython has counted the cell when pre_run_cell fires: it takes the count before)
            events.register("pre_run_cell", lambda info: self.agent_cells.before_cell(info, shell.execution_count - 1))

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

        from nbagent.ui.timeline import clip

        lines = tb.format_exception(type(error), error, error.__traceback__)
        text = "".join(lines)
        if len(text) > 8000:
            text = text[:2000] + "\n…\n" + text[-6000:]
        from nbagent.ipython.references import MAX_SOURCE

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
        from nbagent.ipython.options import env_seconds

        deadline = asyncio.get_running_loop().time() + env_seconds("NBAGENT_FRONTEND_WAIT", 5.0)
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
    def decider(self) -> KernelDecider:
        """The decider the notebook's cells share (clicks and `%agent approve` resolve it), made on first use."""
        if self._decider is None:
            from nbagent.ipython.kernel_decider import KernelDecider

            self._decider = KernelDecider(self)
        return self._decider

    @property
    def store(self) -> Store:
        from nbagent.store import Store, store_path_for

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
        from nbagent.ipython.options import old_section_note

        if not self.noted_old_section:
            note = old_section_note(getattr(self.shell, "config", {}))
            if note:
                self.noted_old_section = True
                print(note, file=sys.stderr)
        params = self.parameters.as_dict() if hasattr(self, "parameters") else None
        settings = {name: resolve(name, getattr(args, name, None) if args is not None else None, self.overrides,
                                  self.config, params) for name in SETTINGS}
        from nbagent.ipython.options import env_seconds

        env_seconds("NBAGENT_FRONTEND_WAIT", 5.0)  # said with the other settings, before a run would wait on it
        return settings

    def cell_needs_model_library(self, line: str) -> bool:
        """Whether this `%%agent` line calls a real provider through litellm: not a script, a replay or an
        `nbagent/` model, and a model named, configured or found (`detect`), as `make_agent` will choose it."""
        args = parse(cell_parser(), line)
        if args.reproduce is not None or self.settings(args)["rerun"][0] == "reproduce" or \
                self.cell_id() in self.reproduce_next:
            return False
        model, script = (self.settings(args)[k][0] for k in ("model", "script"))
        if script:
            return False  # a script plays whatever the model's name
        if model:
            return not str(model).startswith("nbagent/")
        from nbagent.models.detect import detect

        return detect() is not None

    def line_needs_model_library(self, line: str) -> bool:
        """Whether this `%agent` line goes on with a run (approve, resume...) that calls a real provider, or in a
        kernel where litellm is loading or would be: it then waits for it behind the loading line rather than
        importing it in the kernel's thread."""
        from nbagent.ipython import loading
        from nbagent.ipython.direct import DRIVES_A_RUN

        try:
            command = parse(line_parser(), line).command
        except Exception:
            return False
        if command not in DRIVES_A_RUN:
            return False
        if loading.started() or self.model_configured():
            return True
        from nbagent.events.state import RunStatus

        # a run it may go on with (one that waits or was interrupted) calls a real provider (e.g. its cell's --model)
        return any(r.status in (RunStatus.WAITING, RunStatus.INTERRUPTED, RunStatus.RUNNING)
                   and r.model and not str(r.model).startswith("nbagent/") for r in self.store.list_runs())

    def model_expected(self) -> bool:
        """Whether `%load_ext` starts the model process once the kernel is idle (loading.py): a real provider's model
        is configured, or a provider's key is in the environment (the model named in the cell then answers without
        waiting for litellm) and no script or offline model is configured. Neither: nothing starts until a cell
        needs it."""
        if self.model_configured():
            return True
        try:
            model, script = (self.settings()[k][0] for k in ("model", "script"))
        except Exception:  # a setting that does not parse: the first cell says so; nothing is loaded ahead
            return False
        if script or str(model or "").startswith("nbagent/"):
            return False
        from nbagent.models.detect import provider_key_set

        return provider_key_set() is not None

    def model_configured(self) -> bool:
        """Whether a real provider's model is configured (`NbAgent.model`, `NBAGENT_MODEL`): `%load_ext` then
        starts the model process once the kernel is idle (loading.py), as it does for a provider's key
        (`model_expected`)."""
        try:
            model, script = (self.settings()[k][0] for k in ("model", "script"))
        except Exception:  # a setting that does not parse: the first cell says so; nothing is loaded ahead
            return False
        return bool(model) and not script and not str(model).startswith("nbagent/")

    def user_tools(self) -> list[Tool]:
        from nbagent.tools.base import Tool

        return [v for k, v in self.shell.user_ns.items() if isinstance(v, Tool) and not k.startswith("_")]

    def all_tools(self, mcp: str | None = None, *, approve: str | None = None, session: str | None = None,
                  cell_mcp: str | None = None, notes: bool = True) -> list[Tool]:
        """Built-in tools, the notebook's `@tool`s, then the MCP servers' tools: mcp.json beside the notebook and
        `mcp` (the cell's --mcp, else the `mcp` setting); each MCP problem is one line on stderr (docs/mcp.md).

        A server from a file starts only if the log trusts its entry, or `approve` is "all" (trusted now, in
        `session`'s chain); each other one is a line in the cell (`notes`) saying how to trust it (trust.py)."""
        from nbagent.ipython.agent_cells import list_cells_tool, replace_cell_tool
        from nbagent.ipython.cells import insert_cell_tool
        from nbagent.ipython.run_cell import run_cell_tool
        from nbagent.ipython.run_python import run_python_tool
        from nbagent.scope.rules import Scope
        from nbagent.store import store_path_for
        from nbagent.store.blobs import BlobStore
        from nbagent.tools.files import file_tools
        from nbagent.tools.kernel import kernel_tools

        blobs = BlobStore.of_store(store_path_for(self.notebook))  # file changes saved for %agent undo
        where = lambda: (self.current_cell, self.current_run)  # noqa: E731
        # run_cell is offered; run_python still runs scripts and recordings naming it, executed as run_cell's code is
        # (run_python.py: no thread, no redirected stdout), in the place the runtime's own run_python had
        kernel = [t for t in kernel_tools(self.shell.user_ns) if t.name != "run_python"] + [run_python_tool(
            self.shell, where)]
        kernel[-1].offered = False
        builtin = (file_tools(Scope(root=self.folder, base=self.folder), blobs) + kernel
                   + [insert_cell_tool(where), run_cell_tool(self.shell, where, self.agent_cells, blobs.put,
                                                                 reruns=self.reruns),
                      list_cells_tool(self.shell, self.agent_cells),
                      replace_cell_tool(self.shell, self.agent_cells, where, blobs.put, reruns=self.reruns)])
        names = {t.name for t in builtin}
        tools = builtin + [t for t in self.user_tools() if t.name not in names]
        from nbagent.ipython import trust
        from nbagent.mcp import notebook_toolset

        setting = mcp if mcp is not None else self.settings()["mcp"][0]
        name = session or self.settings()["session"][0]
        gate = trust.Gate(self.store, lambda: self.store.session(name, notebook=self.notebook.name), approve)
        found = notebook_toolset(self.folder, setting or None, taken={t.name for t in tools}, trusted=gate)
        for line in found.problems:
            print(entry.redact(f"nbagent: {line}"), file=sys.stderr)
        if notes and found.untrusted:
            own = (cell_mcp, str(self._path(cell_mcp))) if cell_mcp and not cell_mcp.lstrip().startswith("{") else None
            trust.show(found.untrusted, gate.trusts, approve, own)
        return tools + found.tools

    def _path(self, value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.folder / p

