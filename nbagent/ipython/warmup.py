"""Warming up the first run while the kernel is idle, and yielding to every cell the user runs meanwhile.

On a fresh kernel the first `%%agent` cell used to spend seconds before its first model call importing litellm
and what its first call pulls in (its MCP handler, the token encoder, the run view's widget modules). The offline
models no longer need litellm (nbagent.llm calls them directly), but a real provider's first cell does.
`%load_ext nbagent` stays cheap: once its cell has ended, a daemon thread imports those modules while the kernel
waits for the next cell: first what every first run needs (nbagent's own modules, the widget, ~0.1 s), then,
only when a cell without `--model` would use a real provider (a configured model, an API key in the environment,
a local Ollama: `NotebookHost.real_model_likely`), litellm and what its first call loads (~2.5 s, ~190 MB). A
kernel set up for the offline models never loads litellm at all. `offline_ready()` says when the first part is
done: a cell that runs an offline model needs nothing from the second and does not wait for it (`wait_offline`).

A cell the user runs meanwhile neither waits for the warm-up nor is slowed by it. An import cannot be cut into steps
(litellm's own `__init__` runs ~1.5 s of module code in one import), and two threads share one GIL: a thread left to
import while a cell computes takes half the cell's time or more. So the warm-up thread traces its own calls
(`sys.settrace` in that thread only; the cell's thread is never traced) and, while a cell runs (IPython's
`pre_run_cell` to `post_run_cell` of the same cell, outermost first: `hold()` / `release()`), it stops at once and
then looks every 10-50 ms at whether the rest of the process uses the CPU. While it does, the thread waits, holding
no GIL: it costs the cell nothing. While it does not (the cell sleeps, waits on I/O or on a lock), the thread goes
on, again costing the cell nothing; while it goes on it stops for a few ms every 30 ms or so to look again, as the
CPU share a cell gets while the warm-up imports does not show whether it computes (`PROBE`). A cell that waits on
something the paused thread holds (a module it is half-way through importing, a library's lock) uses no CPU, so the
thread goes on and lets go of it: no deadlock, and no need to stop only between modules. A thread waiting on a
module lock the warm-up holds makes it go on whatever the CPU says (a cell may poll meanwhile, another thread may
compute). A cell importing `pkg.sub` while the warm-up is inside `pkg` first waits for `pkg` (`_guarded_import`),
since two threads entering a package's import cycle from both ends fail one of them. While the warm-up runs, the
GIL's switch interval is 0.5 ms instead of 5 ms, so that the threads that pass a kernel message along are not kept
waiting. That alone is not enough: an import makes system calls, each of which lets go of the GIL and takes it back
before the switch interval is up, so a thread waiting for the GIL never forces a switch and may wait for seconds
("convoy"; an interrupted cell's traceback, thousands of stat calls, took minutes). So while nothing holds it (the
kernel is idle, or a cell awaits it) the thread also lets go of the GIL for GAP every GIVE (0.2 ms every 5 ms:
`_give_way`). The price is the tracing: while the kernel is idle the warm-up takes ~10-40% longer
(docs/performance.md, `bench/warmup_bench.py`), a few % of it the giving way.
- a `%%agent` cell with a real provider needs litellm: it releases the warm-up and awaits it (the kernel keeps
  handling messages), showing "loading the model library (first run in this kernel)…" meanwhile; one with an
  offline model awaits only the first part, then holds the rest like any cell. An interrupt ends the wait:
  ipykernel cancels an awaiting cell, so the cell fails with CancelledError (as any interrupted top-level await
  does), the loading line is cleared, the cell holds the warm-up again for what it still runs (its traceback),
  and the warm-up goes on in the background.
- a cell that imports a module the warm-up is importing at that moment waits for that module, as any two threads
  importing do (Python's per-module import locks), and the warm-up runs on meanwhile, as above. An interrupt ends
  that wait too (KeyboardInterrupt): on POSIX a lock wait in the main thread returns when a signal arrives. Python
  documents lock waits as interruptible on POSIX only (`threading.Lock.acquire`); where they are not, a cell
  blocked on such an import ends only once the warm-up has finished that module, which the blocked cell lets it do.
- what the warm-up thread writes to sys.stdout or sys.stderr (a module that prints or warns while it is imported)
  goes to the log (`nbagent.ipython`, debug level) instead of to the cell running at that moment, where ipykernel
  would send it: while the warm-up runs, both are wrapped (`_Quiet`), which passes every other thread's writes on
  unchanged, and put back when it ends. Not covered: output written to the file descriptors directly (a C
  library's printf: ipykernel captures fds 1 and 2 for whatever cell runs), threads a module starts, and a cell
  that replaces sys.stdout itself meanwhile (`%%capture`, `redirect_stdout`) catches what the warm-up prints then.
A module that fails to import is left for the run to import (and report) as it always did. `NBAGENT_WARMUP=0`
turns the warm-up off.
"""

from __future__ import annotations

import _imp
import asyncio
import builtins
import contextlib
import importlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from importlib import _bootstrap  # its private names below are CPython's, absent from typeshed's stub
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
_state: dict[str, Any] = {"seconds": None, "offline_seconds": None, "failed": [], "litellm": None,
                          "paused": False, "pauses": 0, "probes": 0, "gave_way": 0, "paused_seconds": 0.0,
                          "yields": True}

# Yielding to the user's cells (see the module docstring).
EVERY = 200  # traced calls between two looks at the clocks (~0.1-0.3 ms of importing)
WINDOW = 0.004  # s: the least wall time a decision is made over, so that one scheduler tick does not decide it
BUSY = 0.2  # the rest of the process is computing when it used this share of a CPU over the last window
SWITCH = 0.0005  # s: the GIL's switch interval while the warm-up runs (Python's default is 0.005)
WAIT = (0.01, 0.05)  # s: how long a paused thread waits before it looks again, first and at most
# While a cell runs and the warm-up goes on (the cell seemed idle), the share of the CPU the cell gets is not a
# safe sign that it computes: an import makes system calls, each of which lets go of the GIL and takes it back
# before the switch interval is up, so a computing cell waiting for the GIL never forces a switch and may get as
# little as ~8% of the CPU on a loaded machine ("convoy"). So the warm-up also stops every PROBE seconds for
# WINDOW, which measures what the cell does when it has the GIL to itself (~12% of the warm-up's speed while a
# cell sleeps; a cell that computes again is slowed at most ~PROBE). A share above NOTICE (a sleeping cell's is
# ~0-2%: the kernel's own threads) is looked at at once.
PROBE = 0.03
NOTICE = 0.05
# A paused thread may hold a lock that a cell then waits on (a library's own lock taken during its import: logging's,
# say). A waiting cell uses no CPU, so the warm-up goes on, unless another thread computes meanwhile: then it goes on
# once the cell's thread has used no CPU for PATIENCE, which costs that computation at most a share of the warm-up.
PATIENCE = 0.5
_held = False  # a cell of the user's is running and does not need the warm-up done: the thread yields to it
_holds: list[int] = []  # the cells running, outermost first (ids of IPython's ExecutionInfo; %run runs cells)
_waived = False  # the running cell needs the warm-up done (a real provider's `%%agent` cell, a fork)
_cell = 0  # counts the executions that held the warm-up: a new one starts a new measurement
_cell_thread: int | None = None  # the thread the running cell runs in (IPython's main thread)
_resume = threading.Event()
_pace: dict[str, Any] = {"countdown": EVERY, "cell": -1, "t": 0.0, "others": 0.0, "probe": 0.0, "gave": 0.0}
# While nothing holds it, the thread still lets go of the GIL for GAP every GIVE seconds (`_give_way`).
GIVE = 0.005
GAP = 0.0002
_free = EVERY  # traced calls before the next look at the clock while nothing holds it


def enabled() -> bool:
    return os.environ.get("NBAGENT_WARMUP", "1").strip().lower() not in ("0", "false", "no", "off")


def _import(names: tuple[str, ...]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:
            _state["failed"].append(f"{name}: {exc}")
            log.debug("warm-up: %s not imported: %s", name, exc)


def _update() -> None:
    global _held
    _held = bool(_holds) and not _waived
    if _held:
        _resume.clear()
    else:
        _resume.set()


def hold(cell: object | None = None) -> None:
    """A cell starts: from now on the warm-up runs only while the rest of the process is not computing."""
    global _cell, _cell_thread
    _holds.append(id(cell))
    _cell += 1
    _cell_thread = threading.get_ident()
    _update()


def release(cell: object | None = None) -> None:
    """A cell has ended (`None`: the innermost); once the outermost has, the warm-up runs freely again. A cell that
    never held it (IPython ends an empty cell it never started) releases nothing."""
    global _waived
    key = id(cell) if cell is not None else (_holds[-1] if _holds else None)
    if key in _holds:
        del _holds[_holds.index(key):]  # with it, any cell it ran that did not end properly
    if not _holds:
        _waived = False
    _update()


@contextlib.contextmanager
def _waiting() -> Iterator[None]:
    """The running cell waits for the warm-up: it runs freely meanwhile."""
    global _waived
    before = _waived
    _waived = True
    _update()
    try:
        yield
    finally:
        _waived = before
        _update()


def _others_cpu() -> float:
    """CPU seconds used by every thread of the process but this one (called in the warm-up thread)."""
    return time.process_time() - time.thread_time()


def _trace(frame: Any, event: str, arg: Any) -> None:
    """The warm-up thread's trace function: called on each Python call it makes, never for other threads. It
    returns None, so no line is traced; a global read and a count is all it costs while no cell holds it."""
    global _free
    if _held:
        _step()
    else:
        _free -= 1
        if _free <= 0:
            _give_way()


def _give_way() -> None:
    """While nothing holds it (the kernel is idle, or a cell awaits the warm-up), let go of the GIL for GAP every
    GIVE. An import makes system calls, each of which lets go of the GIL and takes it back before the switch
    interval is up, so a thread waiting for the GIL never forces a switch and may wait for seconds: the kernel's
    threads (an execute reply, an interrupted cell's traceback, a widget's message) starve ("convoy")."""
    global _free
    _free = EVERY
    now = time.perf_counter()
    if now - _pace["gave"] >= GIVE:
        time.sleep(GAP)
        _pace["gave"] = time.perf_counter()


def _waited_on(owner: int) -> bool:
    """Whether a thread waits on a module import lock that thread `owner` holds (the cell importing what the
    warm-up is half-way through): then the warm-up must go on, whatever the CPU says (a cell may poll meanwhile)."""
    try:
        # thread id -> lock (3.11) or list of locks (3.12+)
        for value in list(_bootstrap._blocking_on.values()):  # type: ignore[attr-defined]
            for lock in value if isinstance(value, list) else [value]:
                if getattr(lock, "owner", None) == owner:
                    return True
    except Exception:  # importlib's internals changed: the CPU rule alone
        return False
    return False


def _thread_cpu(ident: int | None) -> float | None:
    """CPU seconds used by thread `ident`, where the platform can tell (Linux, macOS)."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))  # type: ignore[arg-type]
    except Exception:
        return None


def _step() -> None:
    pace = _pace
    pace["countdown"] -= 1
    if pace["countdown"] > 0:
        return
    if _imp.lock_held():  # finding a module holds the global import lock, which every other import needs: never
        pace["countdown"] = 1  # pause inside (brief); look again at the next call
        return
    pace["countdown"] = EVERY
    if pace["cell"] != _cell:  # a cell has just started: stop at once, then see whether it computes
        pace["cell"] = _cell
        _pause()
        return
    now, others = time.perf_counter(), _others_cpu()
    span = now - pace["t"]
    if span < WINDOW:
        return
    share = (others - pace["others"]) / span
    pace.update(t=now, others=others)
    if (share < NOTICE and now - pace["probe"] < PROBE) or _waited_on(threading.get_ident()):
        return
    if share >= BUSY:
        _pause()
    else:  # a probe: a short first look, paid while the cell is idle
        _state["probes"] += 1
        _pause(WINDOW)


def _pause(first: float = WAIT[0]) -> None:
    """Wait, holding no GIL, while a cell runs and the process computes; go on as soon as either stops. A cell
    that waits (sleep, I/O, a lock or a module this thread holds) uses no CPU, so it never waits on this pause.
    `first`: how long before the first look (a probe's is short: it is paid while the cell is idle)."""
    started = time.perf_counter()
    _state["paused"] = True
    _state["pauses"] += 1
    wait = first
    cell = _cell_thread
    cell_cpu, since = _thread_cpu(cell), started
    try:
        while _held:
            t, others = time.perf_counter(), _others_cpu()
            _resume.wait(wait)
            if not _held or _waited_on(threading.get_ident()):
                break
            now = time.perf_counter()
            if _others_cpu() - others < BUSY * (now - t):
                break  # the cell is waiting on something: going on costs it nothing
            used = _thread_cpu(cell) if cell == _cell_thread else None
            if used is None or cell_cpu is None or used - cell_cpu > 0.001:
                cell, cell_cpu, since = _cell_thread, _thread_cpu(_cell_thread), now
            elif now - since >= PATIENCE:  # the cell's thread waits while others compute: maybe on this thread
                _state["gave_way"] += 1
                break
            wait = min(max(wait * 2, WAIT[0]), WAIT[1])
    finally:
        _state["paused"] = False
        _state["paused_seconds"] = round(_state["paused_seconds"] + time.perf_counter() - started, 3)
        now = time.perf_counter()
        _pace.update(t=now, others=_others_cpu(), probe=now)


_builtin_import: Any = None  # builtins.__import__ as it was when the warm-up started


def _guarded_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
    """builtins.__import__ while the warm-up runs. A cell importing `pkg.sub` while the warm-up is half-way through
    `pkg` would import `sub` itself, and if `sub` imports `pkg` back while the warm-up goes on to import `sub`, the
    two threads meet in a cycle that Python breaks by failing one side (a KeyError, a half-made module). So a cell
    first waits for each enclosing package the warm-up is half-way through (the warm-up goes on meanwhile: the cell
    waits on its lock), then imports as usual."""
    if level == 0 and _thread is not None and threading.get_ident() != _thread.ident:
        with contextlib.suppress(Exception):  # importlib's internals changed: import as usual
            _finish_packages(name)
    return _builtin_import(name, globals, locals, fromlist, level)


def _finish_packages(name: str) -> None:
    parts = name.split(".")
    for end in range(1, len(parts) + 1):
        package = ".".join(parts[:end])
        module = sys.modules.get(package)
        if module is None:
            return
        if getattr(getattr(module, "__spec__", None), "_initializing", False):
            ref = _bootstrap._module_locks.get(package)  # type: ignore[attr-defined]
            lock = ref() if ref is not None else None
            if _thread is not None and getattr(lock, "owner", None) == _thread.ident:
                _bootstrap._lock_unlock_module(package)  # type: ignore[attr-defined]


def _work(real_model: Callable[[], bool] | None = None) -> None:
    # A debugger's or coverage's tracer in this thread is left alone (then the warm-up does not yield).
    traced = sys.gettrace() is None
    _state["yields"] = traced
    if traced:
        sys.settrace(_trace)
    # A thread that wants the GIL waits up to the switch interval (5 ms) before the one holding it must let go.
    # Each message the kernel handles meanwhile (an execute request, a widget's click) passes between threads
    # several times, so while this thread imports, the interval is shorter; it is put back after.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, SWITCH))
    try:
        _warm(real_model)
    finally:
        if sys.getswitchinterval() == min(interval, SWITCH):  # unless someone else has set it meanwhile
            sys.setswitchinterval(interval)
        if builtins.__import__ is _guarded_import:  # unless someone else has wrapped it meanwhile
            builtins.__import__ = _builtin_import
        _unhush()
        if traced:
            sys.settrace(None)


def _warm(real_model: Callable[[], bool] | None) -> None:
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


class _Quiet:
    """sys.stdout or sys.stderr while the warm-up runs. ipykernel sends what any thread writes to the cell running
    at that moment (a thread of its own has no parent of its own), so what a module prints or warns while the
    warm-up imports it would show in whatever cell the user runs meanwhile. What the warm-up thread writes goes to
    the log instead (`nbagent.ipython`, debug); every other thread's writes, and everything else, go to the stream
    it stands for, as before. It is put back when the warm-up ends, unless something has replaced it meanwhile;
    kept by someone (a logging handler made during the warm-up), it still passes everything on."""

    def __init__(self, stream: Any, name: str) -> None:
        self._stream = stream
        self._name = name

    def write(self, text: str) -> Any:
        if _thread is None or threading.current_thread() is not _thread:
            return self._stream.write(text)
        global _logging
        if not _logging and text.strip():  # not what a handler of that log writes to this stream (a loop)
            _logging = True
            try:
                log.debug("warm-up %s: %s", self._name, text.rstrip("\n"))
            finally:
                _logging = False
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if _thread is None or threading.current_thread() is not _thread:
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


_logging = False  # the warm-up thread is writing to the log what it printed
_quiet: dict[str, _Quiet] = {}  # the streams swapped while the warm-up runs, by name


def _hush() -> None:
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _Quiet):
            _quiet[name] = _Quiet(stream, name)
            setattr(sys, name, _quiet[name])


def _unhush() -> None:
    for name, quiet in list(_quiet.items()):
        if getattr(sys, name) is quiet:  # unless someone else has replaced it meanwhile
            setattr(sys, name, quiet._stream)
    _quiet.clear()


def start(real_model: Callable[[], bool] | None = None) -> bool:
    """Start the warm-up thread (once per kernel). False when it is off, already done or not needed."""
    global _thread
    if _thread is not None or not enabled() or "litellm.responses.mcp.chat_completions_handler" in sys.modules:
        return False
    _thread = threading.Thread(target=_work, args=(real_model,), name="nbagent-warmup", daemon=True)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork)
    global _builtin_import
    _builtin_import, builtins.__import__ = builtins.__import__, _guarded_import
    _hush()
    _thread.start()
    return True


def _before_fork() -> None:
    """A cell that forks (multiprocessing's default on Linux) while the warm-up is half-way through a module would
    leave the child that module's import lock, owned by a thread the child does not have: the child's first import
    of it would hang. So a fork first lets the warm-up finish (the only cell it can delay, and only until then),
    unless the warm-up itself waits on a module this thread is importing (a fork from inside an import): then it
    cannot finish first, and the fork goes ahead as it would without nbagent."""
    if not running() or threading.current_thread() is _thread:
        return
    with _waiting():
        while running() and not _thread_waits_on(threading.get_ident()):
            join(0.02)


def _thread_waits_on(owner: int) -> bool:
    """Whether the warm-up thread waits on a module lock that thread `owner` holds."""
    try:
        value = _bootstrap._blocking_on.get(_thread.ident) if _thread is not None else None  # type: ignore[attr-defined]
        return any(getattr(lock, "owner", None) == owner for lock in (value if isinstance(value, list) else [value]))
    except Exception:
        return False


def running() -> bool:
    return _thread is not None and _thread.is_alive()


def join(timeout: float | None = None) -> None:
    """Block until the warm-up is done (tests, `bench/`). The blocked cell uses no CPU, so the warm-up runs on."""
    if _thread is not None:
        _thread.join(timeout)


async def wait() -> None:
    """Await the warm-up without blocking the kernel's event loop (comm messages, interrupts). The cell needs it
    done, so it holds it no longer while it waits. An interrupt (ipykernel cancels the awaiting cell) ends the
    wait, and the cell holds the warm-up again for whatever it runs next (its traceback, its own code): left
    running freely, an import makes the cell's thread wait for the GIL (the convoy in the module docstring)."""
    with _waiting():
        while running():
            await asyncio.sleep(0.05)


def offline_ready() -> bool:
    """True when what an offline model's run needs is imported (or no warm-up runs): such a run can start while
    litellm is still being imported, as it imports nothing of litellm's."""
    return not running() or _offline.is_set()


async def wait_offline() -> None:
    """Await the first part of the warm-up only (nbagent's own modules, ~0.1 s): for a cell with an offline model,
    which then holds the rest (litellm's import) like any other cell while it runs."""
    with _waiting():
        while not offline_ready():
            await asyncio.sleep(0.01)


def status() -> dict[str, Any]:
    """For tests and `bench/`: whether it ran, how long it took, what could not be imported."""
    return {"started": _thread is not None, "running": running(), **_state}


class Hooks:
    """The shell events that start the warm-up after the `%load_ext` cell and hold it while a cell runs."""

    def __init__(self, shell: Any, real_model: Callable[[], bool] | None = None) -> None:
        self.shell = shell
        self.pending = True
        self.real_model = real_model

    def pre_run_cell(self, info: Any) -> None:
        # Every cell holds the warm-up; an nbagent cell that needs it done awaits it (host._warmed_up), which lets
        # it run freely until that cell ends. Silent executions (a variable inspector's) are brief and not counted.
        hold(info)

    def post_run_cell(self, result: Any) -> None:  # IPython calls it however the cell ended (error, interrupt)
        info = getattr(result, "info", None)
        if result is None or id(info) in _holds:
            release(info)
        elif self.pending and not _holds:  # the loading cell itself has ended: the kernel is about to be idle
            self.pending = False
            start(self.real_model)


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
    events.register("pre_run_cell", _hooks.pre_run_cell)
    events.register("post_run_cell", _hooks.post_run_cell)
