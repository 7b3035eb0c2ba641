"""Loading the model library (litellm) in a person's kernel: in a plain background thread, changing nothing global.

What it costs: litellm and the openai SDK it calls are ~2.5 s of imports and ~150 MiB, and their first call loads
~0.4 s more (imported here too, `FIRST_CALL`). The offline models (`nbagent/scripted`, `function`, `replay`) never
need any of it, so nothing is loaded for them, nor for a kernel that only loads nbagent.

When it happens:
- At `%load_ext nbagent`, if a real provider's model is *configured* (`NbAgent.model` or `NBAGENT_MODEL`, not
  one of the offline ones), a daemon thread imports litellm at once, so that a `%%agent` cell run seconds later
  does not wait. An API key alone loads nothing ahead: a kernel where the agent is never used stays light.
- Otherwise the first `%%agent` cell that needs a real provider starts the same thread.
- A `%%agent` cell that needs litellm before the thread is done awaits it (the kernel keeps handling messages)
  and shows "loading the model library…" meanwhile; an interrupt ends the wait and the cell, and the thread goes
  on (an import cannot be stopped half-way without leaving the library broken).

What it does not do: no import hook, no wrapper around `sys.stdout`/`sys.stderr`, no trace function, no change to
the switch interval, no at-fork hook. A plain import thread costs a cell that computes meanwhile almost nothing
(an import mostly waits on files, and the thread that holds the GIL keeps it until its switch interval ends);
a cell that itself imports shares the interpreter with it, as any two threads do.

Where its output goes: the thread runs in a copy of the context of the cell that started it, and ipykernel routes
what a thread writes to `sys.stdout`/`sys.stderr` (warnings included) by that context, so whatever the import prints
lands in that cell, never in the cell running at the time. (Output a C library writes to the file descriptors
directly follows ipykernel's own rules.)

A fork while the thread imports: the child has no loading thread and may inherit the locks it held, so a child
that needs the library gets one line saying so instead of a hang; the parent's loading is untouched.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
import threading
import time
from typing import Any

__all__ = ["MODULES", "LoadFailed", "ready", "start", "started", "status", "wait"]

# what is imported, in order; the last is nbagent's model layer, which imports litellm (nbagent/llm.py)
MODULES: tuple[str, ...] = ("nbagent.llm",)
# then what litellm's first call imports (its proxy's file-id helpers, the stream builder's types, the openai client
# and handler): ~0.4 s that a first `%%agent` cell would otherwise spend. Internal names of litellm 1.106.2, so each
# is best-effort. Not its tokenizer: importing that sets TIKTOKEN_CACHE_DIR in os.environ for good, which litellm
# then does on the first call that counts tokens, not nbagent ahead of time.
FIRST_CALL = ("litellm.proxy.openai_files_endpoints.common_utils",
              "litellm.types.litellm_core_utils.streaming_chunk_builder_utils", "litellm.llms.openai.openai",
              "litellm.llms.openai_like.dynamic_config", "openai.resources.chat")


class LoadFailed(Exception):
    """The model library could not be loaded: one line that says what to install or do."""


_lock = threading.Lock()
_future: concurrent.futures.Future[None] | None = None
_pid: int | None = None  # the process that started the thread (a forked child has no such thread)
_times: dict[str, float] = {}


def _load() -> None:
    import importlib

    for name in MODULES:
        importlib.import_module(name)
    from ..llm import import_litellm

    import_litellm()
    for name in FIRST_CALL:
        try:
            importlib.import_module(name)
        except ImportError:  # moved in another litellm: the first call imports what it needs itself
            pass


def _run(future: concurrent.futures.Future[None]) -> None:
    began = time.perf_counter()
    try:
        _load()
    except BaseException as exc:
        _times["seconds"] = time.perf_counter() - began
        future.set_exception(exc)
    else:
        _times["seconds"] = time.perf_counter() - began
        future.set_result(None)


def start() -> bool:
    """Start loading in the background, once per process; False if it had started already."""
    global _future, _pid
    with _lock:
        if _future is not None and _pid == os.getpid():
            return False
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()  # a waiter's cancellation must never cancel the loading itself
        _future, _pid = future, os.getpid()
        _times.clear()
    context = contextvars.copy_context()  # its output goes to the cell that started it (see the docstring)
    threading.Thread(target=context.run, args=(_run, future), name="nbagent-load-model-library", daemon=True).start()
    return True


def started() -> bool:
    return _future is not None


def ready() -> bool:
    """Whether the library is loaded and a cell can call a model without waiting."""
    return _future is not None and _pid == os.getpid() and _future.done() and _future.exception() is None


def status() -> dict[str, Any]:
    """For tests, `%agent doctor`-like checks and the benchmark: the state and how long loading took."""
    if _future is None:
        state = "not started"
    elif _pid != os.getpid():
        state = "forked"
    elif not _future.done():
        state = "loading"
    else:
        state = "failed" if _future.exception() is not None else "ready"
    return {"state": state, "seconds": _times.get("seconds")}


async def wait() -> None:
    """Start loading if nothing has, and wait for it without blocking the kernel; raise LoadFailed if it failed."""
    if _future is not None and _pid is not None and _pid != os.getpid():
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
    except Exception as exc:
        raise LoadFailed(failure(exc)) from None


def _requirement(package: str) -> str:
    """nbagent's own requirement for `package` (its pinned version), else the bare name."""
    import re
    from importlib import metadata

    try:
        for req in metadata.requires("nbagent") or ():
            name = re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0]
            if name.lower().replace("_", "-") == package.lower().replace("_", "-") and "extra ==" not in req:
                return req.split(";")[0].strip()
    except metadata.PackageNotFoundError:
        pass
    return package


def failure(exc: BaseException) -> str:
    """One line for a failed load: what is missing and how to install it, or what went wrong."""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        package = exc.name.split(".")[0]
        return (f"nbagent: the model library could not be loaded: the package '{package}' is missing. Install it "
                f"in this kernel's environment (pip install {_requirement(package)!r}) and restart the kernel.")
    return f"nbagent: the model library could not be loaded: {type(exc).__name__}: {exc}"
