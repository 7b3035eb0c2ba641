"""Starting and talking to MCP servers: one background event loop where every session lives, one `Server`
per configured entry, and the registry that reuses a running server across listings.

A server that hangs never blocks the caller's loop: each call waits at most the server's `timeout` and then is
a `ToolError`. A server that crashed, hung or stopped answering is started again at the next listing.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import contextvars
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import Any

from nbagent.mcp.config import MCPConfigError, ServerConfig, without_userinfo
from nbagent.mcp.results import convert_result
from nbagent.mcp.server_files import server_cwd
from nbagent.mcp.trust import entry_digest
from nbagent.tools.base import ToolError

_current = contextvars.ContextVar[Any]("nbagent_mcp_server", default=None)


class _Background:
    """One thread with its own event loop, where every server's session lives (anyio on asyncio)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="nbagent-mcp", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Any) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)


_bg: _Background | None = None
_bg_lock = threading.Lock()


def background_loop() -> _Background:
    """The one background thread and event loop every server's session lives on (started again if it died)."""
    global _bg
    with _bg_lock:
        if _bg is None or not _bg.thread.is_alive():
            _bg = _Background()
        return _bg


class _Noise(logging.Handler):
    """The mcp package logs a line the server sent that is not JSON-RPC; keep it with the server that sent it."""

    def emit(self, record: logging.LogRecord) -> None:
        server = _current.get()
        if server is not None:
            detail = ""
            exc = record.exc_info[1] if record.exc_info else None
            if exc is not None:
                try:  # the line itself, when pydantic kept it
                    detail = repr(exc.errors()[0]["input"])[:120]  # type: ignore[attr-defined]
                except Exception:
                    detail = str(exc).splitlines()[0][:120]
            server.noise.append(detail or record.getMessage()[:120])


_noise_handler = _Noise(level=logging.WARNING)
logging.getLogger("mcp").addHandler(_noise_handler)


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    exc = _leaf(exc)
    text = " ".join(str(exc).split()) or type(exc).__name__  # one line, whatever the library's message holds
    return text if len(text) <= 300 else text[:300] + "…"


class Server:
    """One configured server: started on first use, its session held open on the background loop."""

    def __init__(self, name: str, config: ServerConfig, source: str, folder: Path | None) -> None:
        self.name = name
        self.config = config
        self.source = source
        self.folder = folder
        self.state = "new"  # new, running, failed, stopped
        self.error: str | None = None
        self.listed: list[Any] = []
        self.noise: deque[str] = deque(maxlen=5)
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[Any] | None = None
        self._stderr: Any = None
        self._lock = threading.Lock()
        self._starting: concurrent.futures.Future[Any] | None = None
        # whether the server asked for nbagent's roots (the notebook's folder) since it last started: the
        # reference filesystem server then reads paths against that folder alone (rules.py)
        self.roots_asked = False
        self._asked: asyncio.Event | None = None
        self._rule: Any = None

    def rule(self) -> Any:
        """How this server reads its tools' arguments (rules.Rule), made once."""
        if self._rule is None:
            from nbagent.mcp.rules import Rule

            self._rule = Rule(self.name, self.config, self.folder, roots_asked=lambda: self.roots_asked)
        return self._rule

    async def _roots(self, context: Any) -> Any:
        """The roots nbagent declares to a stdio server: the notebook's folder, the only one (MCP roots; a server
        that honours them, as the reference filesystem server does, keeps to it)."""
        from mcp.types import ListRootsResult, Root

        self.roots_asked = True
        if self._asked is not None:
            self._asked.set()
        assert self.folder is not None  # declared only with a folder
        return ListRootsResult(roots=[Root(uri=Path(os.path.realpath(self.folder)).as_uri(), name="notebook")])

    def __repr__(self) -> str:
        return f"Server({self.name!r}, {self.state})"

    # ------------------------------------------------------------------ what it runs

    def command_line(self) -> str:
        if self.config.url:
            return self.config.url
        return " ".join([self.config.command or "", *self.config.args])

    def _executable(self) -> str:
        """The command: "python"/"python3" is the process's own interpreter; other names are looked up on PATH,
        then beside the interpreter (a virtual environment's console scripts, e.g. mcp-server-time)."""
        command = self.config.command or ""
        if command in ("python", "python3") and sys.executable:
            return sys.executable
        if os.sep in command or shutil.which(command):
            return command
        beside = Path(sys.executable).parent / command
        return str(beside) if beside.exists() else command

    def stderr_tail(self, lines: int = 5, size: int = 4000) -> str:
        f = self._stderr
        if f is None:
            return ""
        try:
            end = os.fstat(f.fileno()).st_size
            data = os.pread(f.fileno(), size, max(0, end - size))
        except (OSError, ValueError):
            return ""
        text = data.decode("utf-8", "replace").strip().splitlines()
        return " | ".join(t.strip() for t in text[-lines:] if t.strip())[:600]

    def _details(self) -> str:
        bits = []
        tail = self.stderr_tail()
        if tail:
            bits.append(f"its stderr ends: {tail}")
        if self.noise:
            bits.append(f"it wrote a line that is not JSON-RPC to stdout: {self.noise[-1]}")
        return "; ".join(bits)

    def _transport(self) -> Any:
        if self.config.url:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            http = create_mcp_http_client(headers=dict(self.config.headers))
            return streamable_http_client(self.config.url, http_client=http), http
        from mcp.client.stdio import StdioServerParameters, stdio_client

        if self._stderr is not None:
            self._stderr.close()
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 (kept open)
        cwd = server_cwd(self.config, self.folder)
        params = StdioServerParameters(command=self._executable(), args=list(self.config.args),
                                       env=dict(self.config.env) or None, cwd=str(cwd) if cwd else None)
        return stdio_client(params, errlog=self._stderr), None

    # ------------------------------------------------------------------ life (on the background loop)

    async def _serve(self, ready: asyncio.Future[list[Any]]) -> None:
        _current.set(self)
        self._stop = asyncio.Event()
        self.roots_asked, self._asked = False, asyncio.Event()
        try:
            from mcp import Client
            from mcp.types import Implementation

            from nbagent._version import __version__
            from nbagent.mcp.rules import kind_of

            transport, http = self._transport()
            roots = self._roots if self.config.command and self.folder is not None else None
            try:
                async with Client(transport, read_timeout_seconds=self.config.timeout, list_roots_callback=roots,
                                  client_info=Implementation(name="nbagent", version=__version__)) as client:
                    tools = await self._list(client)
                    if roots is not None and kind_of(self.config) == "filesystem":
                        # it asks for the roots right after starting: wait for that (bounded), so how it reads a
                        # path is settled before a call is judged
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._asked.wait(), min(self.config.timeout, 10))
                    self._client = client
                    if not ready.done():
                        ready.set_result(tools)
                    await self._stop.wait()
            finally:
                if http is not None:
                    await http.aclose()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                self._failed(f"the session ended: {_describe(exc)}")
        finally:
            self._client = None
            if self.state == "running":
                self.state = "stopped"

    @staticmethod
    async def _list(client: Any, cache_mode: str = "use") -> list[Any]:
        tools: list[Any] = []
        cursor = None
        for _ in range(100):  # pages
            page = await client.list_tools(cursor=cursor, cache_mode=cache_mode)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def _start(self) -> list[Any]:
        if self._task is not None and not self._task.done():  # a session left from before it failed
            await self._stop_session()
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[list[Any]] = loop.create_future()
        self._task = loop.create_task(self._serve(ready), context=contextvars.copy_context())
        try:
            tools = await asyncio.wait_for(asyncio.shield(ready), self.config.timeout)
        except BaseException as exc:
            task = self._task
            task.cancel()
            with _suppress():
                await asyncio.wait_for(asyncio.shield(task), 10)
            if isinstance(exc, TimeoutError):
                raise TimeoutError(f"it did not answer within {self.config.timeout:g} s") from None
            raise
        return tools

    async def _stop_session(self) -> None:
        if self._stop is not None:
            self._stop.set()
        task = self._task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), 8)
            except BaseException:
                task.cancel()
                with _suppress():
                    await asyncio.wait_for(asyncio.shield(task), 4)

    async def _call(self, tool: str, arguments: dict[str, Any]) -> Any:
        client = self._client
        if client is None or self.state == "failed":
            raise ToolError(self._not_running())
        try:
            return await asyncio.wait_for(client.call_tool(tool, arguments), self.config.timeout)
        except TimeoutError:
            why = f"no answer within {self.config.timeout:g} s (the server's \"timeout\")"
            self._failed(why)
            asyncio.get_running_loop().create_task(self._stop_session())
            raise ToolError(self._error_text(tool, why)) from None
        except ToolError:
            raise
        except Exception as exc:
            from mcp.shared.exceptions import MCPError
            from mcp.types import CONNECTION_CLOSED

            leaf = _leaf(exc)
            # an error answer (unknown tool, bad parameters) leaves the session up; a closed connection does not
            closed = leaf.code == CONNECTION_CLOSED if isinstance(leaf, MCPError) else not isinstance(leaf, ValueError)
            why = _describe(exc)
            if closed:
                why = f"the connection to the server closed ({why}): its process may have exited"
                self._failed(why)
            raise ToolError(self._error_text(tool, why)) from None

    # ------------------------------------------------------------------ from other threads

    async def _ensure(self) -> list[Any]:
        """The tools of a running server that still answers a ping; else (never started, failed, its process gone
        since) a fresh start."""
        client = self._client
        if client is not None and self.state == "running":
            try:  # a fresh listing: proves it answers (ping is gone from the 2026 protocol) and sees changed tools
                return await asyncio.wait_for(self._list(client, "refresh"), min(self.config.timeout, 5))
            except Exception:
                self._failed("it stopped answering")
        self.noise.clear()
        return await self._start()

    def start(self) -> concurrent.futures.Future[Any]:
        """Make sure it runs (non-blocking): the future gives its tools, after a start when one is needed."""
        with self._lock:
            if self._starting is not None and not self._starting.done():
                return self._starting
            self._starting = background_loop().submit(self._ensure())
            return self._starting

    def wait_started(self, future: concurrent.futures.Future[Any], timeout: float) -> None:
        """Block until the start ends (bounded); raise MCPConfigError with one clear line when it failed."""
        try:
            tools = future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            self._failed(f"it did not answer within {self.config.timeout:g} s")
            raise MCPConfigError(self._start_error(self.error or "")) from None
        except concurrent.futures.CancelledError:
            self._failed("its start was cancelled")
            raise MCPConfigError(self._start_error(self.error or "")) from None
        except Exception as exc:
            self._failed(_describe(exc))
            raise MCPConfigError(self._start_error(self.error or "")) from None
        with self._lock:
            self.listed = list(tools)
            self.state, self.error = "running", None

    def _failed(self, why: str) -> None:
        self.state, self.error = "failed", why

    def _start_error(self, why: str) -> str:
        what = f"command `{self.command_line()}`" if self.config.command else f"URL {without_userinfo(self.config.url)}"
        details = self._details()
        return (f"MCP server {self.name!r} ({self.source}) did not start: {why}; {what}"
                + (f"; {details}" if details else ""))

    def _not_running(self) -> str:
        why = f" ({self.error})" if self.error else ""
        return (f"MCP server {self.name!r} is not running{why}; it is started again at the next run"
                + (f"; {d}" if (d := self._details()) else ""))

    def _error_text(self, tool: str, why: str) -> str:
        details = self._details()
        return f"MCP server {self.name!r}, tool {tool!r}: {why}" + (f"; {details}" if details else "")

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """Call a tool from any event loop (the runtime's): bridged to the background loop, bounded in time."""
        if self._client is None or self.state == "failed":
            raise ToolError(self._not_running())
        future = background_loop().submit(self._call(tool, arguments))
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(future), self.config.timeout + 15)
        except TimeoutError:
            future.cancel()
            raise ToolError(self._error_text(tool, f"no answer within {self.config.timeout:g} s")) from None
        except asyncio.CancelledError:
            future.cancel()
            raise
        return convert_result(self.name, tool, result)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the session and the server's process (bounded; safe to call from any thread but the loop's)."""
        bg = _bg
        if bg is None or not bg.thread.is_alive() or self._task is None:
            return
        with _suppress():
            bg.submit(self._stop_session()).result(timeout=timeout)
        self.state = "stopped"
        if self._stderr is not None:
            with _suppress():
                self._stderr.close()
            self._stderr = None


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return exc[0] is not None and not issubclass(exc[0], KeyboardInterrupt | SystemExit)


_servers: dict[str, Server] = {}
_servers_lock = threading.Lock()


def _key(name: str, config: ServerConfig, folder: Path | None) -> str:
    """Which running server a listing reuses: the same entry, folder and files it runs (an edited script is a new
    server: the old process, running the old script, is stopped)."""
    return json.dumps([name, config.model_dump(mode="json"), str(folder or ""), entry_digest(config, folder)],
                      sort_keys=True)


def running_server(name: str, config: ServerConfig, source: str, folder: Path | None) -> Server:
    """The process's one `Server` for this entry (a listing reuses it; an edited entry's old server is stopped)."""
    key = _key(name, config, folder)
    with _servers_lock:
        server = _servers.get(key)
        if server is None:
            # the same server with an edited entry: the old process is stopped (in the background), not kept
            for old_key, old in list(_servers.items()):
                if old.name == name and old.folder == folder and old.source == source and old._task is not None:
                    del _servers[old_key]
                    background_loop().submit(old._stop_session())
            server = _servers[key] = Server(name, config, source, folder)
        return server


def running_servers() -> list[Server]:
    """The servers this process holds now (started or not), for a look at their state."""
    with _servers_lock:
        return list(_servers.values())


def shutdown() -> None:
    """Stop every server (at exit: bounded, never hangs the process's exit)."""
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    bg = _bg
    if bg is None or not bg.thread.is_alive():
        return
    futures = [bg.submit(s._stop_session()) for s in servers if s._task is not None]
    concurrent.futures.wait(futures, timeout=10)
    for s in servers:
        s.state = "stopped"
        if s._stderr is not None:
            with _suppress():
                s._stderr.close()
    bg.loop.call_soon_threadsafe(bg.loop.stop)


atexit.register(shutdown)
