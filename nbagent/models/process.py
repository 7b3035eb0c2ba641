"""The model library in a process of its own: a kernel calls litellm through a child process, not in itself.

Why: litellm and the openai SDK are ~150 MiB and ~2.5 s of imports, their first streamed call loads a tokenizer
(~40 MiB), and importing them changes process-wide state (an import finder, environment variables, logging
handlers, threads). In a person's kernel none of that belongs: the kernel keeps only nbagent's own ~25 MiB, a
computing cell never shares its interpreter with the import, a fork or a debugger in the kernel never meets a
half-imported library, and a crash in the provider's code cannot take the kernel down. Plain Python (scripts,
`nbagent run`'s own process) calls litellm in-process as before; only a kernel (nbagent/ipython/loading.py) starts
this process.

The protocol: JSON lines. The kernel writes requests to the child's stdin; the child answers on a private copy of
its stdout (fd 1 itself points at stderr, so whatever a library prints never corrupts the protocol):

    -> {"id": 3, "op": "complete", "kwargs": {...litellm.acompletion's...}, "stream": true, "env": {...}}
    <- {"id": 3, "token": "Hel"} ... {"id": 3, "result": [response_dict, cost]}  or  {"id": 3, "error": [...]}
    -> {"id": 4, "op": "call", "name": "token_counter", "kwargs": {...}, "env": {...}}
    <- {"id": 4, "result": 42}
    -> {"id": 3, "op": "cancel"}                      (an interrupted cell: the child cancels that call)

The first line the child writes is {"op": "ready"} once litellm is imported, or {"op": "failed", "error": [...]}.
`env` is the kernel's `os.environ` (sent when it changed): a key set in a cell after loading is the one used. An
error is its exception chain (class name, module, HTTP status, message, whether it is a connection error or a
timeout); the kernel raises the same names again (`RemoteError`), so retries, refusals for length and messages
read the same as in-process.

The child runs `python -P -m nbagent.models.process` (no working folder on its path: a cloned repository's module is
never imported), in a session of its own (a kernel interrupt is not sent to it: the kernel cancels the request
instead), and ends when its stdin closes (the kernel ended, however it ended).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import importlib
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["CALLS", "ModelProcess", "RemoteError", "current", "existing", "start"]

# the variables litellm sets in this process for itself, kept when the kernel's environment replaces this one's
LIBRARY_OWN = frozenset({"TIKTOKEN_CACHE_DIR"})
CALLS = frozenset({"get_model_info", "token_counter", "encode", "decode", "supports_vision", "validate_environment"})
_MESSAGE_MAX = 20_000


# ============================================================================================= the kernel's side


class RemoteError(Exception):
    """An exception raised in the model process, raised again in the kernel under the same class name."""

    status_code: int | None = None


_classes: dict[tuple[str, str, bool, bool], type[RemoteError]] = {}


def _rebuild(chain: list[dict[str, Any]]) -> BaseException:
    """The exception chain the child described, outermost first, as exceptions linked by __cause__."""
    inner: BaseException | None = None
    for item in reversed(chain):
        if item.get("missing"):  # a package the process could not import: the kernel names what to install
            missing = ModuleNotFoundError(str(item.get("message") or ""), name=str(item["missing"]))
            missing.__cause__ = inner
            inner = missing
            continue
        key = (str(item.get("type") or "Error"), str(item.get("module") or ""), bool(item.get("connection")),
               bool(item.get("timeout")))
        cls = _classes.get(key)
        if cls is None:
            bases: tuple[type, ...] = (RemoteError,)
            bases += (ConnectionError,) if key[2] else ()
            bases += (TimeoutError,) if key[3] else ()
            cls = _classes[key] = type(key[0], bases, {"__module__": key[1] or __name__})
        exc = cls(str(item.get("message") or ""))
        status = item.get("status_code")
        exc.status_code = status if isinstance(status, int) else None
        exc.__cause__ = inner
        inner = exc
    return inner or RemoteError("the model process failed without saying why")


def _undebugged() -> contextlib.AbstractContextManager[Any]:
    """A debugger attached to the kernel (debugpy, JupyterLab's) rewrites the command of every Python process the
    kernel starts so that it runs under the debugger too, and that process then waits for a debugging client that
    never comes: the model process would never load. debugpy's own switch for one call of this thread turns that
    off (a vendored module's name: where it is not, there is nothing to turn off)."""
    monkey = sys.modules.get("_pydev_bundle.pydev_monkey")
    skip = getattr(monkey, "skip_subprocess_arg_patch", None)
    return skip() if callable(skip) else contextlib.nullcontext()


class ModelProcess:
    """The kernel's handle on its model process: start it, wait until it is ready, call it."""

    def __init__(self, modules: tuple[str, ...] = ()) -> None:
        self.modules = modules
        self.pid = os.getpid()  # the process that started it: a forked child must start its own
        self.loaded: concurrent.futures.Future[float] = concurrent.futures.Future()
        self.loaded.set_running_or_notify_cancel()
        self._pending: dict[int, Callable[[dict[str, Any]], None]] = {}
        self._ids = itertools.count(1)
        self._write = threading.Lock()
        self._env_sent: dict[str, str] | None = None
        self.ended: str | None = None  # why the process is gone, once it is
        with _undebugged():
            self.proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "nbagent.models.process", *modules], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=None, start_new_session=True, close_fds=True)
        threading.Thread(target=self._read, name="nbagent-model-process", daemon=True).start()

    # ---------------------------------------------------------------- reading

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            op = msg.get("op")
            if op == "ready":
                self.loaded.set_result(float(msg.get("seconds") or 0.0))
            elif op == "failed":
                self.loaded.set_exception(_rebuild(msg.get("error") or []))
            else:
                handler = self._pending.get(msg.get("id"))
                if handler is not None:
                    handler(msg)
        code = self.proc.wait()
        self.ended = f"the model process ended (exit code {code})"
        if not self.loaded.done():
            self.loaded.set_exception(RuntimeError(f"{self.ended} before the model library was loaded"))
        for handler in list(self._pending.values()):
            handler({"error": [{"type": "ModelProcessEnded", "message": self.ended, "connection": True}]})

    # ---------------------------------------------------------------- writing

    def _send(self, msg: dict[str, Any]) -> None:
        env = dict(os.environ)
        if env != self._env_sent:
            msg["env"] = env
        data = (json.dumps(msg, default=str) + "\n").encode("utf-8")
        with self._write:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError) as exc:
                raise _rebuild([{"type": "ModelProcessEnded", "message": self.ended or str(exc),
                                 "connection": True}]) from None
            if "env" in msg:
                self._env_sent = env

    def alive(self) -> bool:
        return self.ended is None and self.proc.poll() is None

    # ---------------------------------------------------------------- calls

    def call(self, name: str, timeout: float = 120.0, **kwargs: Any) -> Any:
        """litellm.NAME(**kwargs) in the process, waited for synchronously (counting tokens, a model's
        information: fractions of a millisecond once loaded)."""
        self.loaded.result(timeout)
        n = next(self._ids)
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def handle(msg: dict[str, Any]) -> None:
            if done.done():
                return
            if "error" in msg:
                done.set_exception(_rebuild(msg["error"]))
            else:
                done.set_result(msg.get("result"))

        self._pending[n] = handle
        try:
            self._send({"id": n, "op": "call", "name": name, "kwargs": kwargs})
            return done.result(timeout)
        finally:
            self._pending.pop(n, None)

    async def complete(self, kwargs: dict[str, Any], on_token: Callable[[str], None] | None,
                       within: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None = None
                       ) -> tuple[Any, Any]:
        """One litellm.acompletion in the process: (the response as a dict, its cost); tokens go to `on_token`
        as they arrive, in the awaiting task (so in its cell's context). `within` is the call's deadline
        (llm.deadline), from the request on (not the wait for the process to load): past it the call is cancelled
        there, which closes its connection."""
        if not self.loaded.done():  # (when it is, the request leaves now, before anything else the loop has)
            waiter = asyncio.wrap_future(self.loaded)
            while not waiter.done():  # wake often: an interrupt must end the wait (see loading.wait)
                await asyncio.wait({waiter}, timeout=0.1)
        self.loaded.result()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        n = next(self._ids)

        def handle(msg: dict[str, Any]) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, msg)

        self._pending[n] = handle
        finished = False
        try:
            async with within() if within is not None else contextlib.nullcontext():
                self._send({"id": n, "op": "complete", "kwargs": kwargs, "stream": on_token is not None})
                while True:
                    msg = await _next(queue)
                    if "token" in msg:
                        if on_token is not None:
                            on_token(msg["token"])
                        continue
                    finished = True
                    if "error" in msg:
                        raise _rebuild(msg["error"])
                    response, cost = msg.get("result") or ({}, None)
                    return response, cost
        finally:
            self._pending.pop(n, None)
            if not finished and self.alive():  # interrupted (a cancelled cell), or on_token failed: stop it there
                with contextlib.suppress(Exception):  # the process ended meanwhile: nothing to cancel
                    self._send({"id": n, "op": "cancel"})

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()


async def _next(queue: asyncio.Queue[dict[str, Any]]) -> dict[str, Any]:
    """The next message, waking every 0.1 s: ipykernel 7.4 turns an interrupt into a cancellation from another thread
    without waking the cell's event loop, so a wait on a silent server would not end until the server spoke (see
    loading.wait). Not asyncio.wait_for: in 3.11 it returns a result that came just as the task was cancelled and
    drops the cancellation, and with tokens coming all the time the stop button was lost."""
    getter = asyncio.ensure_future(queue.get())
    try:
        while not getter.done():
            await asyncio.wait({getter}, timeout=0.1)
        return getter.result()
    finally:
        getter.cancel()  # (done already, or cancelled with the awaiting task: a message left in the queue is unread)


_process: ModelProcess | None = None
_lock = threading.Lock()
_wanted: tuple[str, ...] | None = None  # set by a kernel (nbagent/ipython/loading.py): the modules to load


def want(modules: tuple[str, ...]) -> None:
    """This process is a kernel: its model calls go to a model process, started on first need if none runs."""
    global _wanted
    _wanted = modules


def start(modules: tuple[str, ...] = ()) -> ModelProcess:
    """This process's model process, started if there is none alive (a forked child starts its own)."""
    global _process
    with _lock:
        if _process is None or _process.pid != os.getpid() or (_process.loaded.done() and not _process.alive()) \
                or _failed(_process):
            _process = ModelProcess(modules)
        return _process


def _failed(p: ModelProcess) -> bool:
    return p.loaded.done() and p.loaded.exception() is not None


def existing() -> ModelProcess | None:
    """This process's model process as it is (ended or not), without starting one."""
    p = _process
    return p if p is not None and p.pid == os.getpid() else None


def current() -> ModelProcess | None:
    """The model process model calls go to in this process (a kernel's), or None: litellm is called in-process.
    One that ended after it was ready (killed, out of memory) is started again."""
    p = _process
    if p is None or p.pid != os.getpid():
        return start(_wanted) if _wanted is not None else None
    if p.loaded.done() and p.loaded.exception() is None and not p.alive():
        return start(p.modules)
    return p


# ============================================================================================= the child's side


def _describe(exc: BaseException) -> list[dict[str, Any]]:
    from nbagent.models.reply import causes

    out = []
    for e in causes(exc):
        status = getattr(e, "status_code", None)
        out.append({"type": type(e).__name__, "module": type(e).__module__,
                    "status_code": status if isinstance(status, int) else None,
                    "message": str(e)[:_MESSAGE_MAX], "connection": isinstance(e, ConnectionError),
                    "timeout": isinstance(e, TimeoutError),
                    # a missing package: its name, for the one line that says what to install
                    **({"missing": e.name} if isinstance(e, ModuleNotFoundError) and e.name else {})})
    return out


async def _read_to_end(stream: Any) -> None:
    with contextlib.suppress(Exception):  # the answer is given: what litellm's end of stream does is its own
        [_ async for _ in stream]  # the chunks after the usage (none, or litellm's last), dropped


class _Child:
    def __init__(self, out: Any) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.rest: set[asyncio.Task[None]] = set()  # the ends of answered streams (stream.call's `rest`)
        self.litellm: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.early: list[bytes] = []  # requests that came while loading
        self.lines: asyncio.Queue[bytes] = asyncio.Queue()

    def later(self, stream: Any) -> None:
        """Read an answered stream to its end on this process's loop, after the answer has gone (stream.call's
        `rest`): a task kept until it ends."""
        task = asyncio.get_running_loop().create_task(_read_to_end(stream))
        self.rest.add(task)
        task.add_done_callback(self.rest.discard)

    def send(self, msg: dict[str, Any]) -> None:
        line = json.dumps(msg, default=str) + "\n"
        with self.lock:
            self.out.write(line)
            self.out.flush()

    def load(self, modules: list[str]) -> None:
        began = time.perf_counter()
        for name in modules:
            importlib.import_module(name)
        from nbagent.models.library import FIRST_CALL, import_litellm

        self.litellm = import_litellm()
        for name in FIRST_CALL:
            try:
                importlib.import_module(name)
            except ImportError:  # moved in another litellm: the first call imports it itself
                continue
        # The imports leave ~370,000 objects the collector tracks, nearly all of which live as long as the process.
        # The first full collection would walk them all, and the allocations of the first call are what set it
        # off: it would stall the first answer for ~0.2 s (and a later call, now and then). Frozen, collections
        # skip them. This process is nbagent's own, so its collector is ours to tune; the kernel's is never touched.
        gc.freeze()
        self.send({"op": "ready", "seconds": time.perf_counter() - began})

    def environ(self, msg: dict[str, Any]) -> None:
        """This process's environment becomes exactly the kernel's: every variable as the kernel has it, none the
        kernel lacks (whatever set it here: a dotfile a library read, a library's own default), except the few the
        library sets for itself and needs (LIBRARY_OWN: tiktoken's cache folder, else it downloads encodings)."""
        env = msg.get("env")
        if isinstance(env, dict):
            env = {str(k): str(v) for k, v in env.items()}
            for key in list(os.environ):
                if key not in env and key not in LIBRARY_OWN:
                    os.environ.pop(key, None)
            os.environ.update(env)

    async def handle(self, msg: dict[str, Any]) -> None:
        n = msg.get("id")
        try:
            if msg.get("op") == "complete":
                from nbagent.models.stream import call, cost_of, response_dict

                kwargs = msg["kwargs"]
                on_token = (lambda t: self.send({"id": n, "token": t})) if msg.get("stream") else None
                resp = await call(self.litellm, kwargs, kwargs["messages"], on_token, rest=self.later)
                result: Any = [response_dict(resp), cost_of(self.litellm, resp, kwargs["model"])]
            elif msg.get("op") == "call" and msg.get("name") in CALLS:
                value = getattr(self.litellm, msg["name"])(**(msg.get("kwargs") or {}))
                result = list(value) if msg["name"] == "encode" else value
            else:
                raise ValueError(f"the model process does not do {msg.get('op')!r} {msg.get('name') or ''}")
            self.send({"id": n, "result": result})
        except asyncio.CancelledError:
            return
        except BaseException as exc:  # every failure goes back to the kernel, described
            self.send({"id": n, "error": _describe(exc)})
        finally:
            self.tasks.pop(n, None)  # type: ignore[arg-type]

    def read(self) -> None:
        """stdin, line by line, into the event loop once it runs (buffered until then). At its end the kernel is
        gone, whatever it was doing: the process ends at once, even half-way through loading."""
        for raw in sys.stdin.buffer:
            with self.lock:
                loop = self.loop
                if loop is None:
                    self.early.append(raw)
                    continue
            loop.call_soon_threadsafe(self.lines.put_nowait, raw)
        os._exit(0)  # nothing of litellm's (its logging workers, atexit hooks) keeps the process alive

    @staticmethod
    def warm() -> None:
        """Load the tokenizer litellm prices every stream with as it starts (a first streamed answer would spend
        ~0.3 s on it), while no call waits: here it costs the kernel nothing."""
        try:
            importlib.import_module("litellm.litellm_core_utils.default_encoding")
        except Exception:  # moved in another litellm: the first call loads what it needs
            return

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        with self.lock:  # one step: a line the reader forwards from now on comes after those it kept
            self.loop = loop
            for raw in self.early:
                self.lines.put_nowait(raw)
            self.early.clear()
        loop.run_in_executor(None, self.warm)  # while requests are served
        while True:
            raw = await self.lines.get()
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            self.environ(msg)  # in order: a later request's environment never reaches an earlier one
            if msg.get("op") == "cancel":
                task = self.tasks.get(msg.get("id"))
                if task is not None:
                    task.cancel()
                continue
            self.tasks[msg.get("id")] = loop.create_task(self.handle(msg))


def main(argv: list[str]) -> None:
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # what a library prints (sys.stdout writes to fd 1) goes to stderr, never into the protocol
    child = _Child(out)
    threading.Thread(target=child.read, name="nbagent-model-process-stdin", daemon=True).start()
    try:
        child.load(argv)
    except BaseException as exc:  # SystemExit too: a module may exit at import
        child.send({"op": "failed", "error": _describe(exc)})
        os._exit(1)
    asyncio.run(child.serve())


if __name__ == "__main__":
    main(sys.argv[1:])
