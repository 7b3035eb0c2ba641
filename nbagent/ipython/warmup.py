"""Warming up the first run while the kernel is idle.

On a fresh kernel the first `%%agent` cell used to spend seconds before its first model call importing litellm
(even the offline models are served through it) and what its first call pulls in (its MCP handler, the token
encoder, the run view's widget modules). `%load_ext nbagent` stays cheap: once its cell has ended, a daemon thread
imports those modules while the kernel waits for the next cell.

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
from typing import Any

log = logging.getLogger("nbagent.ipython")

# What a first run imports beyond `%load_ext` (measured with `python -X importtime` on a first scripted run):
# litellm itself (through nbagent.llm, which sets its environment first), then what its first completion loads.
MODULES = (
    "litellm.responses.mcp.chat_completions_handler",
    "litellm.litellm_core_utils.default_encoding",
    "litellm.proxy.openai_files_endpoints.common_utils",
    "tenacity",
    "nbagent.models.provider",
    "nbagent.models.scripted",
    "nbagent.models.function",
    "nbagent.models.replay",
    "nbagent.replay",
    "nbagent.tools.files",
    "nbagent.ui.widget",
)

_thread: threading.Thread | None = None
_state: dict[str, Any] = {"seconds": None, "failed": []}


def enabled() -> bool:
    return os.environ.get("NBAGENT_WARMUP", "1").strip().lower() not in ("0", "false", "no", "off")


def _work() -> None:
    started = time.perf_counter()
    try:
        from ..llm import import_litellm

        import_litellm()
    except Exception as exc:  # no mcp, no litellm...: the first run raises the same error, where it is reported
        _state["failed"].append(f"litellm: {exc}")
        log.debug("warm-up: litellm not imported: %s", exc)
        return
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:
            _state["failed"].append(f"{name}: {exc}")
            log.debug("warm-up: %s not imported: %s", name, exc)
    _state["seconds"] = round(time.perf_counter() - started, 3)


def start() -> bool:
    """Start the warm-up thread (once per kernel). False when it is off, already done or not needed."""
    global _thread
    if _thread is not None or not enabled() or "litellm.responses.mcp.chat_completions_handler" in sys.modules:
        return False
    _thread = threading.Thread(target=_work, name="nbagent-warmup", daemon=True)
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


def status() -> dict[str, Any]:
    """For tests and `bench/`: whether it ran, how long it took, what could not be imported."""
    return {"started": _thread is not None, "running": running(), **_state}


class Hooks:
    """The shell events that start the warm-up after the `%load_ext` cell and keep other cells from overlapping it."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.pending = True

    def post_run_cell(self, result: Any) -> None:
        if self.pending:  # the cell that loaded nbagent has ended: the kernel is about to be idle
            self.pending = False
            start()

    def pre_run_cell(self, info: Any) -> None:
        if not running():
            return
        source = (getattr(info, "raw_cell", "") or "").lstrip()
        if source.startswith("%%agent") or source.startswith("%agent"):
            return  # nbagent's own cells await the warm-up first thing, showing that they do
        join()


_hooks: Hooks | None = None


def install(shell: Any) -> None:
    """Called by `%load_ext nbagent`: the warm-up starts when the loading cell ends (never during it)."""
    global _hooks
    events = getattr(shell, "events", None)
    if events is None or not enabled():
        return
    if _hooks is not None and _hooks.shell is shell:
        return
    _hooks = Hooks(shell)
    events.register("post_run_cell", _hooks.post_run_cell)
    events.register("pre_run_cell", _hooks.pre_run_cell)
