"""Loading the model library (litellm) for a person's kernel: in a process of its own, changing nothing in the kernel.

What it costs: litellm and the openai SDK it calls are ~2.5 s of imports and ~150 MiB, and their first streamed call
loads ~0.4 s more and a tokenizer (~40 MiB). The offline models (`nbagent/scripted`, `function`, `replay`) never need
any of it, so nothing is loaded for them, nor for a kernel that only loads nbagent.

Where: in the kernel's model process (nbagent/models/process.py), a child `python -P -m nbagent.models.process` that
imports
litellm and makes the model calls; the kernel sends it requests and gets the streamed tokens, the response and its
cost back. The kernel itself never imports litellm: no import in its interpreter while a person's cells run, no
import finder, environment variable, logging handler or thread of litellm's in it, nothing a fork or a debugger
could meet half-done, and its memory stays nbagent's own. The process ends with the kernel. Where no such process
can be started (an interpreter embedded in another program, whose `sys.executable` is not Python, or
`NBAGENT_MODEL_PROCESS=0`), litellm is imported in a plain background thread of the kernel instead (below).

When it happens:
- After `%load_ext nbagent`, where a person has shown they will call a provider: a real provider's model is
  *configured* (`NbAgent.model` or `NBAGENT_MODEL`, not one of the offline ones), or a provider's key is in the
  environment (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY, GOOGLE_API_KEY: models/detect.py), with no
  script or offline model configured (host.model_expected; asked at each idle moment, so a key a later cell sets
  counts from then on). Then once the kernel is idle (no cell has run for IDLE_S; `start_when_idle`), so that a
  `%%agent --model ...` cell run seconds later does not wait, and the cells Run All sends right after `%load_ext`
  do not share the machine with it. Neither: nothing loads ahead, and a kernel that loads nbagent without a key
  starts no process. While the kernel stays idle, it then imports the kernel-side modules a first run needs
  (`_Idle.import_ahead`).
- Otherwise the first `%%agent` cell that needs a real provider starts it.
- A `%%agent` cell that needs the library before it is loaded awaits it (the kernel keeps handling messages) and
  shows "loading the model library…" meanwhile; an interrupt ends the wait and the cell, and the loading goes on.
  While it waits on a process, that cell imports the kernel-side modules its run needs (entry._prepare), so the
  first answer does not pay for them after the wait (`%load_ext` imports none of them: they are ~0.4 s).

A fork of the kernel: a child that needs the library starts a model process of its own (the parent's is the
parent's). A load that failed (a package missing, a module that raised or exited at import) is one line in the
waiting cell, and the next cell that needs the library tries again; so does a cell after the process ended.

The thread, where there is no process: it imports litellm in a copy of the context of the cell that started it
(ipykernel routes what a thread prints by that context, so the import's output lands in that cell), with no import
hook, stream wrapper, trace function, switch interval or fork hook. A child forked while it imports gets one line
saying so instead of a hang. A cell that swaps `sys.stdout` itself (`%%capture`) or records warnings while the thread
imports catches what the import prints or warns then, as it would a print from any other thread. A module in the
working folder that would be imported in place of one of the library's installed packages stops that load before
anything is imported (nbagent/shadowing.py); the process never has the working folder on its path.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import importlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["IDLE_S", "MODULES", "LoadFailed", "import_one", "ready", "start", "start_when_idle", "started", "status",
           "wait"]

IDLE_S = 0.5  # how long the kernel must have been idle before loading starts ahead of need

# what is imported, in order; the last is nbagent's model layer, which imports litellm (nbagent/models/llm.py)
MODULES: tuple[str, ...] = ("nbagent.models.llm",)


class LoadFailed(Exception):
    """The model library could not be loaded: one line that says what to install or do."""


_lock = threading.Lock()
_future: concurrent.futures.Future[Any] | None = None
_pid: int | None = None  # the process that started loading (a forked child has neither its thread nor its process)
_times: dict[str, float] = {}
_in_process = False  # whether this load is the thread's (no model process could be started)


def use_process() -> bool:
    """Whether the library goes in a model process: unless `NBAGENT_MODEL_PROCESS=0`, or this interpreter is
    embedded in a program that is not Python (its `sys.executable` cannot run `-m nbagent.models.process`)."""
    import sys

    from nbagent.ipython.options import env_flag

    if not env_flag("NBAGENT_MODEL_PROCESS", True):
        return False
    exe = sys.executable or ""
    return os.access(exe, os.X_OK) and os.path.basename(exe).lower().startswith(("python", "pypy"))


def _load() -> None:
    for name in MODULES:
        importlib.import_module(name)
    from nbagent.models.library import FIRST_CALL, import_litellm

    import_litellm()
    for name in FIRST_CALL:
        with contextlib.suppress(ImportError):  # moved in another litellm: the first call imports it itself
            importlib.import_module(name)


def _run(future: concurrent.futures.Future[None]) -> None:
    began = time.perf_counter()
    importlib.invalidate_caches()  # a package installed since a failed try is found
    try:
        _load()
    except BaseException as exc:
        _times["seconds"] = time.perf_counter() - began
        future.set_exception(exc)
    else:
        _times["seconds"] = time.perf_counter() - began
        future.set_result(None)


def start(context: contextvars.Context | None = None) -> bool:
    """Start loading in the background, once per process; False if it had started already. The thread runs in
    `context` (default: the caller's), which decides the cell its output goes to."""
    global _future, _pid, _in_process
    with _lock:
        if _future is not None and not _failed(_future) and not _process_gone():
            # loading, loaded, or orphaned in a forked child (wait() says so); a failed load is tried again
            return False
        if use_process():
            from nbagent.models import process as modelproc

            modelproc.want(MODULES)  # a model call made another way in this kernel (Agent.run) goes there too
            try:
                process = modelproc.start(MODULES)
            except OSError as exc:  # cannot start a process here: the thread does it
                import logging

                logging.getLogger(__name__).debug("no model process (%s): loading in a thread", exc)
            else:
                _future, _pid, _in_process = process.loaded, os.getpid(), False
                _times.clear()
                return True
        _in_process = True
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()  # a waiter's cancellation must never cancel the loading itself
        _future, _pid = future, os.getpid()
        _times.clear()
    context = (context or contextvars.copy_context()).copy()  # its output goes to that cell (see the docstring)
    threading.Thread(target=context.run, args=(_run, future), name="nbagent-load-model-library", daemon=True).start()
    return True


class _Idle:
    """Starts loading once no cell has run for IDLE_S, from the kernel's own event loop: IPython's pre/post_run_cell
    events say when a cell runs, and a timer on the loop (no thread) fires when the kernel has been idle long enough.
    A cell that needs the library before then starts it itself (wait()).

    Once the model process is loading, the idle kernel also imports `ahead` (the kernel-side modules a first run
    needs, host.FIRST_RUN_MODULES), one module per turn of the loop and only while no cell runs: a cell sent
    meanwhile waits for one module's import at most, and what is left waits for the next idle moment (or is
    imported by the cell that runs the agent). Not beside the thread that imports litellm where there is no
    process: two imports in one interpreter share its import locks. Not when the working folder holds a module
    that would stand in for one of nbagent's installed dependencies (nbagent/shadowing.py): what nobody chose to
    run must not run because nbagent was loaded, so those imports wait for a cell that runs the agent."""

    def __init__(self, shell: Any, loop: asyncio.AbstractEventLoop, ahead: tuple[str, ...],
                 when: Callable[[], bool] | None = None) -> None:
        self.shell, self.loop, self.ahead, self.when = shell, loop, ahead, when
        self.context = contextvars.copy_context()  # the `%load_ext` cell's: what the import prints goes there
        self.running = 0  # cells running (a cell may run another: get_ipython().run_cell)
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None
        shell.events.register("pre_run_cell", self.cell_started)
        shell.events.register("post_run_cell", self.cell_ended)

    def cell_started(self, *_: Any) -> None:
        self.running += 1
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def cell_ended(self, *_: Any) -> None:
        self.running = max(0, self.running - 1)
        if self.running == 0 and self.timer is None and (self.task is None or self.task.done()):
            self.timer = self.loop.call_later(IDLE_S, self.idle)

    def idle(self) -> None:
        self.timer = None
        if self.running:
            return
        if _future is None:
            if not self._wanted():
                return  # not yet: a later cell may set a provider's key (the next idle moment asks again)
            start(self.context)
        if _in_process or not self.left():
            self.stop()
            return
        self.task = self.loop.create_task(self.import_ahead(), context=self.context.copy())

    def _wanted(self) -> bool:
        try:
            return self.when is None or bool(self.when())
        except Exception:  # a setting that does not parse: the first cell says so; nothing is loaded ahead
            return False

    def left(self) -> list[str]:
        import sys

        return [name for name in self.ahead if name not in sys.modules]

    async def import_ahead(self) -> None:
        from nbagent.shadowing import ShadowedLibrary, check

        try:
            check("nbagent")
        except ShadowedLibrary:
            self.stop()
            return
        for name in self.left():
            await asyncio.sleep(0)  # a cell sent meanwhile runs first
            if self.running:
                return  # the next idle moment goes on (cell_ended)
            try:
                import_one(name)
            except KeyboardInterrupt:  # meant for a request being handled (a silent one, a comm's): stop here
                # rather than let it out of this task, where it would end the kernel's event loop
                self.stop()
                return
        self.stop()

    def stop(self) -> None:
        for name, callback in (("pre_run_cell", self.cell_started), ("post_run_cell", self.cell_ended)):
            with contextlib.suppress(ValueError):
                self.shell.events.unregister(name, callback)


def import_one(name: str) -> None:
    """Import one module a run will need; one that fails is left to fail, with its own message, where the run
    imports it (an interrupt is not caught: the caller decides where it goes)."""
    try:
        importlib.import_module(name)  # (one already imported: a dictionary lookup)
    except Exception:
        import logging

        logging.getLogger(__name__).debug("not imported ahead: %s", name, exc_info=True)


_idle: _Idle | None = None


def start_when_idle(shell: Any, ahead: tuple[str, ...] = (), when: Callable[[], bool] | None = None) -> None:
    """Start loading once the kernel is idle (see _Idle) and `when()` says the library will be needed (asked at each
    idle moment until it does: a cell may set a provider's key), then import `ahead` while it stays idle; at once
    (if `when()`) where there is no running event loop to time it (a terminal IPython) or no cell events. Loaded
    from a silent request (the lab extension's), it starts once the person's first cell has ended."""
    global _idle
    if _future is not None or _idle is not None:
        return
    try:
        loop = asyncio.get_running_loop()
        _idle = _Idle(shell, loop, ahead, when)  # `%load_ext` runs in a cell: its post_run_cell arms the timer
    except (RuntimeError, AttributeError):
        if when is None or when():
            start()


def _failed(future: concurrent.futures.Future[None]) -> bool:
    return future.done() and future.exception() is not None


def _orphaned() -> bool:
    """A forked child of a process that was loading in a thread: the thread is not in this process, so it never
    finishes. (A child of a kernel with a model process starts its own.)"""
    return _in_process and _future is not None and _pid != os.getpid() and not _future.done()


def _process_gone() -> bool:
    """The model process this load made is not this process's (a forked child) or has ended: load again."""
    if _in_process or _future is None:
        return False
    from nbagent.models import process as modelproc

    process = modelproc.existing()
    return process is None or process.loaded is not _future or (_future.done() and not process.alive())


def started() -> bool:
    return _future is not None


def ready() -> bool:
    """Whether the library is loaded and a cell can call a model without waiting (in a forked child too)."""
    return _future is not None and _future.done() and _future.exception() is None and not _process_gone()


def status() -> dict[str, Any]:
    """For tests, `%agent doctor`-like checks and the benchmark: the state and how long loading took."""
    if _future is None:
        state = "not started"
    elif _orphaned() or (not _in_process and _pid != os.getpid()):
        state = "forked"  # the load is the parent's (its thread, or its process): a cell here loads it again
    elif _process_gone():
        state = "ended"
    elif not _future.done():
        state = "loading"
    else:
        state = "failed" if _future.exception() is not None else "ready"
    seconds = _times.get("seconds")
    if seconds is None and not _in_process and state == "ready" and _future is not None:
        seconds = _future.result()  # the process says how long its import took
    return {"state": state, "seconds": seconds, "where": "thread" if _in_process else "process"}


async def wait() -> None:
    """Start loading if nothing has, and wait for it without blocking the kernel; raise LoadFailed if it failed."""
    if _orphaned():
        raise LoadFailed("nbagent: this process was forked while the model library was loading, and a forked "
                         "child cannot finish that import: run the agent in the parent process")
    start()
    assert _future is not None
    waiter = asyncio.wrap_future(_future)
    while not waiter.done():
        # wake every 0.1 s: ipykernel 7.4 turns an interrupt into a cancellation from another thread without waking
        # the cell's event loop, so a cell blocked in one long await would not end until that await did
        await asyncio.wait({waiter}, timeout=0.1)
    try:
        waiter.result()
    except (asyncio.CancelledError, KeyboardInterrupt):
        raise
    except BaseException as exc:  # SystemExit too: a module may exit at import (an unsupported Python...)
        raise LoadFailed(failure(exc)) from None


def _requirement(package: str) -> str:
    """nbagent's own requirement for `package` (its pinned version), else the bare name."""
    from importlib import metadata

    from packaging.requirements import InvalidRequirement, Requirement  # ipykernel's dependency
    from packaging.utils import canonicalize_name

    with contextlib.suppress(metadata.PackageNotFoundError, InvalidRequirement):
        for text in metadata.requires("nbagent") or ():
            req = Requirement(text)
            if canonicalize_name(req.name) == canonicalize_name(package) and req.marker is None:
                return str(req)
    return package


def failure(exc: BaseException) -> str:
    """One line for a failed load: what is missing and how to install it, or what went wrong."""
    from nbagent.shadowing import ShadowedLibrary

    if isinstance(exc, ShadowedLibrary):
        return str(exc)
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        package = exc.name.split(".")[0]
        return (f"nbagent: the model library could not be loaded: the package '{package}' is missing. Install it "
                f"in this kernel's environment (pip install {_requirement(package)!r}), then run the cell again.")
    text = " ".join(str(exc).split())  # one line, whatever the message's own lines
    text = text if len(text) <= 300 else text[:299] + "…"
    return (f"nbagent: the model library could not be loaded: {type(exc).__name__}: {text}. The next %%agent "
            "cell tries again.")
