"""Warming up the first run while the kernel is idle.

On a fresh kernel the first `%%agent` cell used to spend seconds before its first model call importing litellm
and what its first call pulls in (its MCP handler, the token encoder, the run view's widget modules). The offline
models no longer need litellm (nbagent.llm calls them directly), but a real provider's first cell does.
`%load_ext nbagent` stays cheap: once its cell has ended, a daemon thread imports those modules while the kernel
waits for the next cell: first what every first run needs (nbagent's own modules, the widget, ~0.1 s), then,
only when a cell without `--model` would use a real provider (a configured model, an API key in the environment,
a local Ollama: `NotebookHost.real_model_likely`), litellm and what its first call loads (~2.5 s, ~190 MB). A
kernel set up for the offline models never loads litellm at all. `offline_ready()` says when the first part is
done: a cell that runs an offline model needs nothing from the second and does not wait for it (`wait_offline`).

Two threads importing at once could meet in a circular import (Python then hands one of them a half-initialised
module) or, with some C extensions, wait on each other. So the warm-up never overlaps other work of the kernel:
- a `%%agent` cell that starts before it is done awaits it first (the kernel keeps handling messages, an
  interrupt ends the wait), and shows "loading the model library (first run in this kernel)…" meanwhile;
- any other cell waits for it (`pre_run_cell`) before its code runs.
The thread only imports; it never needs the main thread, so a wait always ends. A module that fails to import
is left for the run to import (and report) as it always did. `NBAGENT_WARMUP=0` turns the warm-up off.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("nbagent.ipython")

# What any first run imports beyond `%load_ext` (measured with `python -X importtime` on a first scripted run),
# none of which imports litellm: imported first.
OWN_MODULES = (
    "tenacity",
    "nbagent.models.provider",
    "nbagent.models.scripted",
    "nbagent.models.function",
    "nbagent.models.replay",
    "nbagent.replay",
    "nbagent.tools.files",
    "nbagent.ui.widget",
)
# Then litellm itself (through nbagent.llm, which sets its environment first) and what its first completion loads.
MODULES = (
    "litellm.responses.mcp.chat_completions_handler",
    "litellm.litellm_core_utils.default_encoding",
    "litellm.proxy.openai_files_endpoints.common_utils",
)

_thread: threading.Thread | None = None
_offline = threading.Event()  # OWN_MODULES are imported
_state: dict[str, Any] = {"seconds": None, "offline_seconds": None, "failed": [], "litellm": None}


def enabled() -> bool:
    return os.environ.get("NBAGENT_WARMUP", "1").strip().lower() not in ("0", "false", "no", "off")


def _import(names: tuple[str, ...]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:
            _state["failed"].append(f"{name}: {exc}")
            log.debug("warm-up: %s not imported: %s", name, exc)


def _work(real_model: Callable[[], bool] | None = None) -> None:
    started = time.perf_counter()
    try:
        _import(OWN_MODULES)
    finally:
        _state["offline_seconds"] = round(time.perf_counter() - started, 3)
        _offline.set()
    try:
        wanted = real_model() if real_model is not None else True
    except Exception as exc:  # settings that cannot be read: warm up as before
        log.debug("warm-up: could not tell whether a real model is configured: %s", exc)
        wanted = True
    if not wanted:
        _state["litellm"] = "skipped: no real model configured (the offline models do not need it)"
        _state["seconds"] = round(time.perf_counter() - started, 3)
        return
    _state["litellm"] = "imported"
    try:
        from ..llm import import_litellm

        import_litellm()
    except Exception as exc:  # no mcp, no litellm...: the first run raises the same error, where it is reported
        _state["failed"].append(f"litellm: {exc}")
        log.debug("warm-up: litellm not imported: %s", exc)
        return
    _import(MODULES)
    _state["seconds"] = round(time.perf_counter() - started, 3)


def start(real_model: Callable[[], bool] | None = None) -> bool:
    """Start the warm-up thread (once per kernel). False when it is off, already done or not needed."""
    global _thread
    if _thread is not None or not enabled() or "litellm.responses.mcp.chat_completions_handler" in sys.modules:
        return False
    _thread = threading.Thread(target=_work, args=(real_model,), name="nbagent-warmup", daemon=True)
    _thread.start()
    return True


def running() -> bool:
    return _thread is not None and _thread.is_alive()


def join() -> None:
    """Block until the warm-up is done (for cells that are not nbagent's)."""
    if _thread is not None:
        _thread.join()


async def wait() -> None:
    """Await the warm-up without blocking the kernel's event loop (comm messages, interrupts)."""
    while running():
        await asyncio.sleep(0.05)


def offline_ready() -> bool:
    """True when what an offline model's run needs is imported (or no warm-up runs): such a run can start while
    litellm is still being imported, as it imports nothing of litellm's."""
    return not running() or _offline.is_set()


async def wait_offline() -> None:
    """Await the first part of the warm-up only (nbagent's own modules, ~0.1 s): for a cell with an offline model."""
    while not offline_ready():
        await asyncio.sleep(0.01)


def status() -> dict[str, Any]:
    """For tests and `bench/`: whether it ran, how long it took, what could not be imported."""
    return {"started": _thread is not None, "running": running(), **_state}


class Hooks:
    """The shell events that start the warm-up after the `%load_ext` cell and keep other cells from overlapping it."""

    def __init__(self, shell: Any, real_model: Callable[[], bool] | None = None) -> None:
        self.shell = shell
        self.pending = True
        self.real_model = real_model

    def post_run_cell(self, result: Any) -> None:
        if self.pending:  # the cell that loaded nbagent has ended: the kernel is about to be idle
            self.pending = False
            start(self.real_model)

    def pre_run_cell(self, info: Any) -> None:
        if not running():
            return
        source = (getattr(info, "raw_cell", "") or "").lstrip()
        if source.startswith("%%agent") or source.startswith("%agent"):
            return  # nbagent's own cells await the warm-up first thing, showing that they do
        join()


_hooks: Hooks | None = None


def install(shell: Any, real_model: Callable[[], bool] | None = None) -> None:
    """Called by `%load_ext nbagent`: the warm-up starts when the loading cell ends (never during it).
    `real_model()` (asked in the warm-up's thread) says whether litellm is worth loading ahead."""
    global _hooks
    events = getattr(shell, "events", None)
    if events is None or not enabled():
        return
    if _hooks is not None and _hooks.shell is shell:
        return
    _hooks = Hooks(shell, real_model)
    events.register("post_run_cell", _hooks.post_run_cell)
    events.register("pre_run_cell", _hooks.pre_run_cell)
