"""How a cell enters nbagent: the one host of this kernel (`current`; `install`, in host.py, makes it), the awaits a
transformed `%%agent` cell or `%agent` line makes (`run_cell`, `run_line`: transform.py), and `shown`, which runs a
cell's work and fails the cell with one redacted line. Below the host and its parts, which all call it; it imports
none of them (their type only, for annotations).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from nbagent.ipython.loading import LoadFailed
from nbagent.ipython.options import UsageError

if TYPE_CHECKING:
    from nbagent.ipython.host import NotebookHost

__all__ = ["FIRST_RUN_MODULES", "LOADING", "RunFailed", "RunInterrupted", "current", "installed", "redact",
           "run_cell", "run_line", "scrub", "set_current", "shown"]

_host: NotebookHost | None = None
log = logging.getLogger("nbagent.ipython")


def set_current(host: NotebookHost) -> None:
    """The host `%load_ext` made for this kernel's shell (host.install)."""
    global _host
    _host = host


def installed() -> NotebookHost | None:
    """This kernel's host, or None before `%load_ext nbagent`."""
    return _host


class RunFailed(RuntimeError):
    """The cell's run failed: the cell fails as a person's failing cell does, so Run All, `jupyter execute`,
    papermill and `nbagent run` stop there, in the one line its record gives (after the record)."""


class RunInterrupted(RuntimeError):
    """The cell was interrupted (the stop button, `nbagent run`'s Ctrl-C or --timeout) while its run went on: the
    cell fails, as an interrupted cell does, so the cells queued after it do not run. The run is saved."""


def current() -> NotebookHost:
    if _host is None:
        raise UsageError("nbagent is not loaded in this kernel: run %load_ext nbagent first")
    return _host


async def run_cell(line: str, body: str) -> Any:
    return await shown(lambda: current().run_cell(line, body),
                        needs_model=lambda: current().cell_needs_model_library(line), hold=True,
                        before=lambda: current().note_rerun(line))


async def run_line(line: str) -> Any:
    return await shown(lambda: current().run_line(line), needs_model=lambda: current().line_needs_model_library(line))


def _expected() -> tuple[type[BaseException], ...]:
    """The errors a cell shows as one line: nbagent's own, about what the cell or the log says."""
    from nbagent.ipython.references import UnknownVariable
    from nbagent.models.base import ModelScriptError
    from nbagent.runtime import RunStateError
    from nbagent.store import StoreError

    return (UsageError, StoreError, RunStateError, ModelScriptError, UnknownVariable, ValueError, RunFailed,
            RunInterrupted)


LOADING = "nbagent: loading the model library (first run in this kernel)…"


class _Status:
    """A one-line status shown in the cell before the run view (replaced by it through the same display id)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        import html

        return {"text/plain": self.text, "text/html": f"<p><em>{html.escape(self.text)}</em></p>"}


# What a first run imports in the kernel beyond what `%load_ext` did: the runtime (its events, grants, deciders,
# store and model layer's kernel side), the live view and its widget library, the record's Markdown renderer and
# sanitiser, the file, cell and MCP tools, undo and verification. They are nbagent's own modules and dependencies,
# imported by the cell that runs the agent while it waits for the model process (_prepare), or on the kernel's
# event loop while it is idle once the process is loading (loading.py), never by a thread. In the order they build
# on each other, so that each step is one module's own import (the largest, nbagent.events.model, ~0.08 s). pydantic's
# `_dataclasses` is what its JSON schemas (the tools' parameters) import on first use.
FIRST_RUN_MODULES = (
    "pydantic._internal._dataclasses", "nbagent.events.ids", "nbagent.tools.base", "nbagent.secrets.redactor",
    "nbagent.events.model",
    "nbagent.events.state", "nbagent.gate.grant_terms", "nbagent.gate.grants", "nbagent.gate.deciders",
    "nbagent.scope.rules", "filelock",
    "tinydb", "nbagent.store.eventlog", "nbagent.store", "nbagent.models.llm", "nbagent.models",
    "nbagent.runtime.context",
    "nbagent.runtime", "nbagent.ipython.kernel_decider", "nbagent.ipython.references", "nbagent.ui.viewstate",
    "nbagent.ui.record", "nbagent.ipython.live", "nbagent.ui.widget", "markdown_it", "nh3",
    "nbagent.ui.record_markdown", "nbagent.tools.files", "nbagent.ipython.run_cell", "nbagent.ipython.run_python",
    "nbagent.ipython.trust",
    "nbagent.mcp", "nbagent.undo.files", "nbagent.store.verify", "nbagent.runtime.recording", "nbagent.runtime.results",
    "nbagent.runtime.cell_images")


async def _prepare() -> None:
    """Import what the run will need while the cell waits for the model process anyway (~0.5 s of imports that a
    first answer would otherwise pay after the ~2.5 s wait). One module at a time, so an interrupt ends the wait
    between two (the interrupt is the cell's); a module that fails here is left to fail where the run imports it."""
    from nbagent.ipython.loading import import_one

    for name in FIRST_RUN_MODULES:
        import_one(name)
        await asyncio.sleep(0)


async def _loaded(needs_model: bool) -> str | None:
    """Wait until the model library is loaded (loading.py), for a cell that calls a real provider; say so meanwhile.
    Returns the display id of that status line, for the run view to take over, or None when nothing waited."""
    from nbagent.ipython import loading

    if not needs_model or loading.ready():
        return None
    import uuid

    from IPython.display import display

    display_id = f"nbagent-{uuid.uuid4().hex}"
    display(_Status(LOADING), display_id=display_id)
    try:
        loading.start()  # (wait() would start it too) first, so that the process imports beside what follows
        state = loading.status()
        if state["state"] == "loading" and state["where"] == "process":
            await _prepare()  # not beside a thread's import: two imports in one interpreter share its locks
        await loading.wait()
    except BaseException:  # interrupted (ipykernel cancels the awaiting cell) or failed: nothing is loading here
        from IPython.display import update_display

        update_display({"text/plain": ""}, raw=True, display_id=display_id)
        raise
    return display_id


async def shown(start: Callable[[], Awaitable[Any]], needs_model: Callable[[], bool] | None = None,
                 hold: bool = False, before: Callable[[], None] | None = None) -> Any:
    """Run a cell's work. An nbagent error (bad options, an unknown `{name}`, no run waiting...) fails the cell
    with one clear line and no traceback, so Run All and `nbagent run` stop there; whatever the cell shows is
    redacted. With `hold` (an `%%agent` cell), its runs' start and end are committed just after its reply. `before`
    shows the cell's first line (asking again: reproduce.py) ahead of the loading line."""
    _own_imports_checked()
    try:
        needed = needs_model() if needs_model is not None else False
    except Exception:  # options that do not parse: the cell reports them once it runs
        needed = False
    if before is not None:
        try:
            if needed:  # the model process starts first: the line reads the log (its first import) meanwhile
                from nbagent.ipython import loading

                loading.start()
            before()
        except Exception:  # options or a log that fail, or a load that fails: the cell says so once it runs
            log.debug("the cell's first line was not shown ahead of the loading line", exc_info=True)
    try:
        status = await _loaded(needed)
    except LoadFailed as exc:
        raise _one_line(exc) from None
    if _host is not None:
        _host.status_display = status
    # (in a kernel only: its loop runs on after the cell; a terminal IPython's stops at each cell's end)
    hold = hold and _host is not None and getattr(_host.shell, "kernel", None) is not None
    if hold:
        from nbagent.store.commits import HELD, Hold

        cell_hold = Hold(asyncio.get_running_loop())
        held = HELD.set(cell_hold)
    try:
        return await start()
    except _expected() as exc:
        raise _one_line(exc) from None
    except Exception as exc:
        shown = scrub(exc)
        if shown is exc:
            raise
        raise shown from None
    finally:
        if hold:
            cell_hold.open = False
            HELD.reset(held)
            store = _host._store if _host is not None else None
            if store is not None and store.pending():
                _after_reply(store.commit)
        if _host is not None and _host.status_display is not None:  # no run view took the status line's place
            from IPython.display import update_display

            update_display({"text/plain": ""}, raw=True, display_id=_host.status_display)
            _host.status_display = None


def _own_imports_checked() -> None:
    """Before a cell imports anything of nbagent's runtime: a module in the working folder that would be imported in
    place of one of nbagent's dependencies (a cloned repository's `pydantic.py`) fails the cell in one line naming
    the file, and never runs (nbagent/shadowing.py)."""
    from nbagent.shadowing import ShadowedLibrary, check

    try:
        check("nbagent")
    except ShadowedLibrary as exc:  # (not _one_line: its redactor's imports are what must not run; the line holds
        text = str(exc)               # only a path and package names)
        exc._render_traceback_ = lambda: [f"\x1b[0;31mShadowedLibrary\x1b[0m: {text}"]  # type: ignore[attr-defined]
        raise exc from None


def _after_reply(commit: Callable[[], None]) -> None:
    """Run the cell's commit (store/commits.py: `HELD`) once the cell has answered. ipykernel finds the cell's
    task done in the loop's next turn and sends the reply in that same turn, so a callback that schedules the
    commit from that turn runs it in the one after the reply. (Were ipykernel to wait between the two, the commit
    would simply come before the reply.) A commit that fails says so on stderr; what failed waits for the next."""
    loop = asyncio.get_running_loop()

    def commit_now() -> None:
        try:
            commit()
        except Exception as exc:
            print(redact(f"nbagent: the run's end is in the log but could not be made durable yet ({exc}); "
                         "the next cell tries again"), file=sys.stderr)

    loop.call_soon(loop.call_soon, commit_now)


def _one_line(exc: BaseException) -> BaseException:
    """`exc` (redacted) shown as one line, `Name: message`, without a traceback."""
    text = redact(str(exc)).rstrip()
    shown = scrub(exc)
    name = type(exc).__name__
    shown._render_traceback_ = lambda: [f"\x1b[0;31m{name}\x1b[0m: {text}"]  # type: ignore[attr-defined]
    return shown


def redact(text: str) -> str:
    """Text for the cell's output, with the secrets of this kernel's environment taken out (see
    nbagent.secrets.redactor)."""
    from nbagent.secrets.redactor import Redactor

    return Redactor().text(text)


def scrub(exc: BaseException) -> BaseException:
    """The exception to show in the cell: `exc` with its messages (and those it was raised from) redacted.

    If some text still leaks after the args are redacted (a class that formats its message itself), a
    RuntimeError with the redacted text of `exc` is shown instead, without the chain."""
    from nbagent.secrets.redactor import Redactor

    r = Redactor()
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = str(e)
        if r.text(text) != text:
            # args that cannot be set leave the text as it was: the check below then shows a RuntimeError instead
            with contextlib.suppress(Exception):
                e.args = tuple(r.redact(a) if isinstance(a, str | list | tuple | dict) else a for a in e.args)
            if r.text(str(e)) != str(e):  # its chain is not shown: the first message says enough
                return RuntimeError(f"{type(exc).__name__}: {r.text(str(exc))}")
        e = e.__cause__ or e.__context__
    return exc
