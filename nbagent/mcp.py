"""MCP tool servers as ordinary tools: each tool of a configured server becomes a `Tool` named `mcp__NAME__TOOL`.

Configuration is the common `mcpServers` JSON (docs/mcp.md):

    {"mcpServers": {
        "time": {"command": "python", "args": ["-m", "mcp_server_time"], "env": {}, "timeout": 30,
                 "risk": {"convert_time": "WRITE_LOW_RISK"}},
        "remote": {"url": "http://127.0.0.1:8000/mcp", "headers": {"Authorization": "Bearer ..."}}}}

A tool's risk comes from its MCP annotations (`readOnlyHint: true` -> READ_ONLY, `destructiveHint: false` ->
WRITE_LOW_RISK, anything else WRITE_HIGH_RISK) unless the server's `risk` map names it. The runtime calls these
tools like any other (autonomy table, approvals, authorization, budgets, redaction, log): nothing here decides
whether a call may run.

In a notebook, a server whose entry comes from a file starts only once a person trusted that exact entry
(`notebook_toolset(trusted=...)`, the trust itself is recorded by nbagent/ipython/trust.py); inline JSON and
`tools(...)` in Python are the caller's own words and start as given.

Servers start once per process, lazily (when their tools are first listed), and stop with the process. Their
sessions live on one background thread with its own event loop, so a server that hangs never blocks the
caller's loop; each call waits at most the server's `timeout` (30 s by default) and then is a `ToolError` the
model sees. A server that crashed, hung or stopped answering is started again at the next listing (the next
run). This module imports no IPython or widget code.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextvars
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .levels import Risk
from .tools.base import Tool, ToolError

DEFAULT_TIMEOUT = 30.0
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what the model providers accept as a function name (fullmatch)
_NAME_PART = re.compile(r"[A-Za-z0-9_-]+")
PREFIX = "mcp__"

log = logging.getLogger(__name__)


class MCPConfigError(ValueError):
    """A configuration that cannot be used; the message is one line naming the file and what is wrong."""


# ---------------------------------------------------------------------------------------------------- configuration


class ServerConfig(BaseModel):
    """One entry of `mcpServers`: a command to run (stdio) or a URL (streamable HTTP)."""

    model_config = ConfigDict(extra="ignore")

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    type: str | None = None
    timeout: float = Field(DEFAULT_TIMEOUT, gt=0, le=3600)
    risk: dict[str, Risk] = Field(default_factory=dict)
    disabled: bool = False

    @field_validator("risk", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: v.upper() if isinstance(v, str) else v for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> ServerConfig:
        from urllib.parse import urlsplit

        from .secrets import remember, secret_key, url_secrets

        # a token, key or password a config gives a server is a secret from here on: echoed in an error, it is
        # redacted everywhere (by name only: a PATH or a Content-Type would otherwise vanish from every log line);
        # so is the password of a URL anywhere in it (`postgresql://admin:PW@db` as an argument, a DATABASE_URL),
        # since a server may print the password alone
        texts = [self.command or "", *self.args, *self.env.values(), *self.headers.values(), self.url or ""]
        # ...but only a value shaped like one: a secret-named env value holding a command ("touch x;") would
        # otherwise be blanked wherever it appears, hiding part of what the server runs from the person asked to
        # trust it (attack b12); a token has no spaces and no shell syntax
        remember(*(v for k, v in self.env.items() if secret_key(k) and _credential_shaped(v)),
                 *(v for k, v in self.headers.items() if secret_key(k) or k.lower() == "cookie"),
                 urlsplit(self.url or "").password, *(p for t in texts for p in url_secrets(t)))
        if bool(self.command) == bool(self.url):
            raise ValueError("give either \"command\" (a server run over stdio) or \"url\" (streamable HTTP)")
        kind = (self.type or "").lower().replace("_", "-")
        if kind in ("sse",):
            raise ValueError("the SSE transport is not supported; use a streamable HTTP \"url\"")
        if kind not in ("", "stdio", "http", "streamable-http", "streamablehttp"):
            raise ValueError(f"unknown \"type\" {self.type!r} (stdio or http)")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"


def _credential_shaped(value: str) -> bool:
    """A value that could be a token or a password: one word, no shell syntax."""
    return bool(value) and not any(c.isspace() or c in ";&|`$<>()" for c in value)


class Loaded(BaseModel):
    """Servers read from the configuration sources, and one line per problem found on the way."""

    servers: dict[str, ServerConfig] = Field(default_factory=dict)
    sources: dict[str, str] = Field(default_factory=dict)  # server name -> where it was configured
    # server name -> the file its entry was read from; absent for inline JSON and dicts (the caller's own words)
    files: dict[str, str] = Field(default_factory=dict)
    problems: list[str] = Field(default_factory=list)
    folder: str | None = None  # the notebook's folder: entries' relative cwd and files are read from it


def parse(data: Any, source: str, loaded: Loaded | None = None, file: str | None = None) -> Loaded:
    """Add the servers of one `{"mcpServers": {...}}` document to `loaded`; a bad entry is a problem line.
    `file`: the file the document was read from (its servers then need a person's trust in a notebook)."""
    loaded = loaded or Loaded()
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers", data.get("servers")), dict):
        loaded.problems.append(f"MCP config {source}: expected a JSON object with an \"mcpServers\" object")
        return loaded
    for name, entry in data.get("mcpServers", data.get("servers")).items():
        try:
            server = ServerConfig.model_validate(entry)
        except ValidationError as exc:
            why = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'entry'}: {e['msg']}".replace("Value error, ", "")
                            for e in exc.errors()[:3])
            loaded.problems.append(f"MCP server {name!r} ({source}): {why}")
            continue
        loaded.servers[name] = server  # a later source replaces an earlier entry of the same name
        loaded.sources[name] = source
        if file is not None:
            loaded.files[name] = file
        else:
            loaded.files.pop(name, None)
    return loaded


def read(source: str | Path | dict[str, Any], folder: Path | None = None, loaded: Loaded | None = None,
         label: str | None = None) -> Loaded:
    """Read one source: a dict, inline JSON text (starting with `{`), or a file (relative to `folder`)."""
    loaded = loaded or Loaded()
    if folder is not None and loaded.folder is None:
        loaded.folder = str(folder)
    if isinstance(source, dict):
        return parse(source, label or "the MCP config", loaded)
    text_source = str(source).strip()
    if text_source.startswith("{"):
        where = label or "inline MCP config"
        text = text_source
    else:
        path = Path(text_source).expanduser()
        if not path.is_absolute() and folder is not None:
            path = folder / path
        where = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            loaded.problems.append(f"MCP config {where}: no such file")
            return loaded
        except (OSError, UnicodeDecodeError) as exc:
            loaded.problems.append(f"MCP config {where}: cannot be read ({exc})")
            return loaded
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        loaded.problems.append(f"MCP config {where}: not valid JSON: {exc.msg} at line {exc.lineno}, "
                               f"column {exc.colno}")
        return loaded
    return parse(data, where, loaded, file=None if text_source.startswith("{") else where)


def load_config(path: str | Path) -> dict[str, ServerConfig]:
    """The servers of one file; raises MCPConfigError (one line per problem) when anything is wrong."""
    loaded = read(path)
    if loaded.problems:
        raise MCPConfigError("\n".join(loaded.problems))
    return loaded.servers


# ---------------------------------------------------------------------------------------------------- trust


class Entry(BaseModel):
    """A server entry read from a file, as a person is asked to trust it: starting it runs `command`."""

    name: str
    source: str  # the file
    digest: str  # entry_digest: what a trust covers
    command: str  # what_it_runs
    files: list[str] = Field(default_factory=list)  # the files of the notebook's folder it runs (entry_files), found


MAX_HASHED = 8 * 1024 * 1024  # a file it runs larger than this counts by its size and time of change, not read


def entry_digest(config: ServerConfig, folder: str | Path | None = None) -> str:
    """What a person's trust covers: sha256 of the entry's canonical JSON (every key nbagent acts on), so an edited
    entry (another argument, env value or risk) is asked about again; and, given the notebook's folder, `+` and a
    sha256 of the files of the folder it runs (`entry_files`: their names and contents), so a script edited after
    the trust (by the agent, a collaborator's git pull) is not started until trusted again. An entry naming no file
    there has the first part alone."""
    import hashlib

    from .events import canonical_json

    text = hashlib.sha256(canonical_json(config.model_dump(mode="json")).encode("utf-8")).hexdigest()
    found = _file_states(config, folder)
    if not found:
        return text
    return text + "+" + hashlib.sha256(canonical_json(found).encode("utf-8", "surrogatepass")).hexdigest()


def entry_part(digest: str) -> str:
    """The part of a digest that covers the entry's JSON (without the files it runs)."""
    return digest.split("+", 1)[0]


def _server_cwd(config: ServerConfig, folder: Path | None) -> Path | None:
    """The folder the server starts in (Server._transport): its cwd, relative to the notebook's folder, or that."""
    if not config.cwd:
        return folder
    path = Path(config.cwd).expanduser()
    return path if path.is_absolute() or folder is None else folder / path


def _inside(path: Path, root: Path) -> bool:
    lexical, top = os.path.normpath(path), os.path.normpath(root)
    real, real_top = os.path.realpath(path), os.path.realpath(root)
    return any(p != t and p.startswith(t.rstrip(os.sep) + os.sep) for p, t in ((lexical, top), (real, real_top)))


# a command that runs the file its first argument names (`sh tools/serve.sh`, `node server.js`)
_INTERPRETER = re.compile(r"(?:(?:ba|da|z|k|c|tc|fi)?sh|python[0-9.]*|pypy[0-9.]*|node(?:js)?|deno|bun|ruby|perl|"
                          r"php|rscript|julia|lua(?:jit)?|pwsh|powershell|tsx|ts-node|groovy|tclsh|wish)(?:\.exe)?",
                          re.IGNORECASE)
# names of files that are code or that configure what runs (a data file a server writes, its database or its log,
# is none of these: its every change would otherwise undo the trust)
_CODE_SUFFIX = re.compile(r"\.(?:sh|bash|zsh|ksh|fish|py|pyw|pyz|pyc|ipy|js|mjs|cjs|ts|mts|cts|jsx|tsx|rb|pl|pm|php|"
                          r"lua|r|jl|ps1|psm1|bat|cmd|exe|com|jar|class|go|java|kt|kts|scala|swift|dart|ex|exs|tcl|groovy|"
                          r"wasm|so|dll|dylib|appimage|json|jsonc|json5|toml|ya?ml|ini|cfg|conf|env)$", re.IGNORECASE)


# an interpreter's options that take a value (the word after them is no script): python -W/-X, node -r (a module it
# loads: kept as code), sh -o; and the ones whose value is the code itself (-c/-e/--eval) or a module (-m)
_VALUE_OPTIONS = frozenset({"-W", "-X", "-o", "-O", "--require", "-r", "--import", "--loader", "-I"})
_CODE_OPTIONS = frozenset({"-c", "-e", "--eval", "-p", "--print"})
_PATHS = ("PATH",)
_MODULE_PATHS = ("PYTHONPATH", "NODE_PATH", "PERL5LIB", "RUBYLIB")
MAX_FOLDER_FILES = 500  # code files of one folder a server's modules come from, counted in its trust


def entry_files(config: ServerConfig, folder: str | Path | None) -> list[Path]:
    """The files inside the notebook's folder a stdio entry runs or may run, existing or not (a file that appears
    changes what runs too). Starting the server runs or reads them, so they are code (the host gives them to the
    runtime's runs-later rule) and their contents are part of the trust:

    - the command: a path, or a name looked up on the entry's own PATH (its `env`), then the kernel's;
    - an interpreter's script (its first word that is neither an option nor an option's value), every argument or
      `--option=value` named as code or configuration (`.sh`, `.py`, `.json`, `.toml`...) or executable, every
      path-like word of `-c`/`-e` code, a `-r` module;
    - a `-m module`: the module or package where Python looks first (the server's folder: one of the same name
      there shadows an installed one), every code file of that package;
    - the folders a script, a package, or the entry's PYTHONPATH / NODE_PATH name: their code files (and
      `sitecustomize.py`), at most MAX_FOLDER_FILES each.

    A data file it names (`--db-path data.db`, a log) is none of them."""
    if folder is None or not config.command:
        return []
    import shlex

    root = Path(folder)
    cwd = _server_cwd(config, root) or root
    command = config.command
    words: list[tuple[str, bool]] = []  # (word, counts whatever its name)
    dirs: list[Path] = []  # folders whose code files count
    env_path = config.env.get("PATH")
    if os.sep in command or "/" in command:
        words.append((command, True))
    else:
        for entry in (env_path or "").split(os.pathsep):
            if entry:
                words.append((str(Path(entry) / command), True))  # existing or not: one made there would run
        found = sys.executable if command in ("python", "python3") else shutil.which(command)
        words.append((found or str(Path(sys.executable).parent / command), True))
    for key in _MODULE_PATHS:
        for entry in (config.env.get(key) or "").split(os.pathsep):
            if entry:
                dirs.append(Path(entry))
                words += [(str(Path(entry) / "sitecustomize.py"), True), (str(Path(entry) / "usercustomize.py"), True)]
    script = _INTERPRETER.fullmatch(os.path.basename(command)) is not None
    args = list(config.args)[:256]
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg:
            continue
        if arg.startswith("-"):
            if "=" in arg:
                words.append((arg.split("=", 1)[1], False))
            if arg in _CODE_OPTIONS and i < len(args):  # `sh -c TEXT`: the paths its code names
                try:
                    tokens = shlex.split(args[i])
                except ValueError:
                    tokens = args[i].split()
                words += [(t, True) for t in tokens if "/" in t or _CODE_SUFFIX.search(t)]
                i, script = i + 1, False
            elif arg == "-m" and i < len(args):
                module = args[i].replace(".", "/")
                words += [(module + ".py", True), (module + "/__init__.py", True), (module + "/__main__.py", True)]
                dirs.append(Path(module))
                i, script = i + 1, False
            elif arg in _VALUE_OPTIONS and i < len(args):
                words.append((args[i], arg in ("--require", "-r", "--import", "--loader")))
                i += 1
            continue
        if script:
            words.append((arg, True))
            dirs.append(Path(arg).parent)  # the script's own folder comes first on its import path
            script = False
        else:
            words.append((arg, False))
    out: list[Path] = []
    for word, always in words:
        if not word or "\0" in word or "\n" in word:
            continue
        path = Path(word).expanduser()
        path = path if path.is_absolute() else cwd / path
        try:
            if path in out or path.is_dir() or not _inside(path, root):
                continue
            if always or _CODE_SUFFIX.search(path.name) or (path.is_file() and os.stat(path).st_mode & 0o111):
                out.append(path)
        except (OSError, ValueError):
            continue
    for d in dirs:
        out += [p for p in _code_in(d if d.is_absolute() else cwd / d, root) if p not in out]
    return out


def _code_in(folder: Path, root: Path) -> list[Path]:
    """The code files of a folder inside the notebook's (and its sub-folders), at most MAX_FOLDER_FILES."""
    try:
        if not folder.is_dir() or not (_inside(folder, root) or os.path.realpath(folder) == os.path.realpath(root)):
            return []
    except OSError:
        return []
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not d.endswith(".nbagent"))
        for name in sorted(filenames):
            if _CODE_SUFFIX.search(name):
                out.append(Path(dirpath) / name)
                if len(out) >= MAX_FOLDER_FILES:
                    return out
    return out


def _file_states(config: ServerConfig, folder: str | Path | None) -> list[list[str]]:
    """[name, state] for each file of `entry_files` that exists: sha256 of its content, read bounded (over
    MAX_HASHED, or unreadable: its size and time of change); not a regular file: its kind."""
    import hashlib
    import stat

    out: list[list[str]] = []
    for path in entry_files(config, folder):
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            continue  # absent: another state than present, since the name is not in the list
        name = os.path.relpath(path, folder) if folder is not None else str(path)
        if not stat.S_ISREG(st.st_mode):
            out.append([name, f"not a regular file ({stat.S_IFMT(st.st_mode):o})"])
            continue
        by_size = f"size {st.st_size}, changed {st.st_mtime_ns}"
        if st.st_size > MAX_HASHED:
            out.append([name, by_size])
            continue
        try:  # never blocks on a FIFO swapped in since the stat; reads what it opened, bounded
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            out.append([name, "unreadable, " + by_size])
            continue
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                out.append([name, "not a regular file"])
                continue
            data = f.read(MAX_HASHED + 1)
        out.append([name, by_size if len(data) > MAX_HASHED else "sha256 " + hashlib.sha256(data).hexdigest()])
    return out


def what_it_runs(config: ServerConfig) -> str:
    """What starting the server does, as shown to the person asked to trust it: the command line with its
    environment and folder (`K=V command args (in sub/)`), or the URL without `user:password@`."""
    import shlex

    if config.url:
        return f"a connection to {_no_userinfo(config.url)}"
    words = [f"{k}={v}" for k, v in config.env.items()] + [config.command or "", *config.args]
    return shlex.join(words) + (f" (in {config.cwd})" if config.cwd else "")


def needs_trust(loaded: Loaded, folder: str | Path | None = None) -> list[Entry]:
    """The enabled servers whose entry came from a file: in a notebook each starts only once trusted. Their digest
    covers the files of the notebook's folder (`folder`, else the one the config was read from) they run."""
    where = folder if folder is not None else loaded.folder
    out = []
    for name, config in loaded.servers.items():
        if name in loaded.files and not config.disabled:
            files = [os.path.relpath(p, where) for p in entry_files(config, where) if p.is_file()] if where else []
            out.append(Entry(name=name, source=loaded.files[name], digest=entry_digest(config, where),
                             command=what_it_runs(config), files=files))
    return out


def code_files(loaded: Loaded, folder: str | Path | None = None) -> list[str]:
    """Every file of the notebook's folder the configured stdio servers run (`entry_files`, existing or not), for
    the runtime's `code_paths`: writing one changes what a server runs at its next start."""
    where = folder if folder is not None else loaded.folder
    return list(dict.fromkeys(str(p) for c in loaded.servers.values() for p in entry_files(c, where)))


# ---------------------------------------------------------------------------------------------------- risk


def annotation_risk(annotations: Any) -> tuple[Risk, str]:
    """(risk, why) from a tool's MCP annotations (an object with read_only_hint / destructive_hint, or a dict)."""

    def hint(*names: str) -> Any:
        for n in names:
            value = annotations.get(n) if isinstance(annotations, dict) else getattr(annotations, n, None)
            if value is not None:
                return value
        return None

    if annotations is not None:
        if hint("read_only_hint", "readOnlyHint") is True:
            return Risk.READ_ONLY, "readOnlyHint: true"
        if hint("destructive_hint", "destructiveHint") is False:
            return Risk.WRITE_LOW_RISK, "destructiveHint: false"
    return Risk.WRITE_HIGH_RISK, "no readOnlyHint or destructiveHint: false"


# ---------------------------------------------------------------------------------------------------- background loop


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


def _background() -> _Background:
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


def _no_userinfo(url: str | None) -> str:
    """A URL as shown in a line: without `user:password@`."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url or "")
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "") if parts.username or parts.password else parts.netloc
    return urlunsplit(parts._replace(netloc=netloc))


# ---------------------------------------------------------------------------------------------------- servers


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
        cwd = _server_cwd(self.config, self.folder)
        params = StdioServerParameters(command=self._executable(), args=list(self.config.args),
                                       env=dict(self.config.env) or None, cwd=str(cwd) if cwd else None)
        return stdio_client(params, errlog=self._stderr), None

    # ------------------------------------------------------------------ life (on the background loop)

    async def _serve(self, ready: asyncio.Future[list[Any]]) -> None:
        _current.set(self)
        self._stop = asyncio.Event()
        try:
            from mcp import Client
            from mcp.types import Implementation

            from ._version import __version__

            transport, http = self._transport()
            try:
                async with Client(transport, read_timeout_seconds=self.config.timeout,
                                  client_info=Implementation(name="nbagent", version=__version__)) as client:
                    tools = await self._list(client)
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
            self._starting = _background().submit(self._ensure())
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
        what = f"command `{self.command_line()}`" if self.config.command else f"URL {_no_userinfo(self.config.url)}"
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
        future = _background().submit(self._call(tool, arguments))
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


# ---------------------------------------------------------------------------------------------------- results


def _summary(kind: str, mime: str | None, data: str | bytes | None) -> str:
    size = len(data or "") * 3 // 4 if isinstance(data, str) else len(data or b"")
    return f"[{kind} {mime or ''}, about {size:,} bytes: not shown to the model]".replace(" ,", ",")


def _part(part: Any) -> Any:
    """One content block as JSON-able data: text as is, images and audio as a short summary."""
    kind = getattr(part, "type", None)
    if kind == "text":
        return part.text
    if kind in ("image", "audio"):
        return _summary(kind, getattr(part, "mime_type", None), getattr(part, "data", None))
    if kind == "resource":
        res = part.resource
        text = getattr(res, "text", None)
        if text is not None:
            return {"resource": str(res.uri), "text": text}
        return {"resource": str(res.uri), "content": _summary("blob", getattr(res, "mime_type", None),
                                                              getattr(res, "blob", None))}
    if kind == "resource_link":
        return {"resource_link": str(part.uri), "name": getattr(part, "name", None)}
    try:
        return part.model_dump(mode="json", by_alias=True, exclude_none=True)
    except Exception:
        return repr(part)[:500]


def convert_result(server: str, tool: str, result: Any) -> Any:
    """An MCP CallToolResult as a tool result: the structured content when there is some, else the text (or a
    list of the parts when some are not text). An error result raises a ToolError with its text."""
    content = list(getattr(result, "content", None) or [])
    parts = [_part(p) for p in content]
    if getattr(result, "is_error", False):
        text = " ".join(p if isinstance(p, str) else json.dumps(p) for p in parts).strip() or "the tool failed"
        raise ToolError(f"MCP server {server!r}, tool {tool!r}: {text}")
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        return structured
    if all(isinstance(p, str) for p in parts):
        return "\n".join(parts)
    return parts


# ---------------------------------------------------------------------------------------------------- tools


class MCPTool(Tool):
    """A server's tool: the server's JSON schema, risk from its annotations or the config."""

    server: str
    remote_name: str
    risk_reason: str
    code_files: list[str]


def _make_tool(server: Server, listed: Any) -> MCPTool:
    remote = listed.name

    async def call(**arguments: Any) -> Any:
        return await server.call(remote, arguments)

    override = server.config.risk.get(remote, server.config.risk.get(PREFIX + server.name + "__" + remote))
    if override is None:
        override = server.config.risk.get("*")
    if override is not None:
        risk, why = override, f"\"risk\" in {server.source}"
    else:
        risk, why = annotation_risk(getattr(listed, "annotations", None))
    schema = dict(getattr(listed, "input_schema", None) or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    schema.pop("$schema", None)
    # one line: a description with line breaks could print rows of its own in `%agent tools`
    description = " ".join((listed.description or getattr(listed, "title", None) or "").split())
    if len(description) > 2000:
        description = description[:2000] + "…"
    tool = MCPTool(call, name=f"{PREFIX}{server.name}__{remote}", description=description, risk=risk,
                   parameters=schema)
    tool.server, tool.remote_name, tool.risk_reason = server.name, remote, why
    # the files of the folder its server runs (entry_files): a runtime may count writing them as code (code_paths)
    tool.code_files = [str(p) for p in entry_files(server.config, server.folder)]
    # the server resolves a relative path from its own working folder: the scope judges it from there too
    if server.config.command and server.config.cwd:
        cwd = Path(server.config.cwd).expanduser()
        tool.base = cwd.as_posix() if cwd.is_absolute() else server.config.cwd.replace("\\", "/")
    return tool


_servers: dict[str, Server] = {}
_servers_lock = threading.Lock()


def _key(name: str, config: ServerConfig, folder: Path | None) -> str:
    """Which running server a listing reuses: the same entry, folder and files it runs (an edited script is a new
    server: the old process, running the old script, is stopped)."""
    return json.dumps([name, config.model_dump(mode="json"), str(folder or ""), entry_digest(config, folder)],
                      sort_keys=True)


def _server(name: str, config: ServerConfig, source: str, folder: Path | None) -> Server:
    key = _key(name, config, folder)
    with _servers_lock:
        server = _servers.get(key)
        if server is None:
            # the same server with an edited entry: the old process is stopped (in the background), not kept
            for old_key, old in list(_servers.items()):
                if old.name == name and old.folder == folder and old.source == source and old._task is not None:
                    del _servers[old_key]
                    _background().submit(old._stop_session())
            server = _servers[key] = Server(name, config, source, folder)
        return server


class Toolset(BaseModel):
    """The tools of the configured servers, and one line for each problem (the servers that failed, ...)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    tools: list[Any] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    untrusted: list[Entry] = Field(default_factory=list)  # servers from files left out: nobody trusted the entry


def toolset(loaded: Loaded, folder: Path | None = None, taken: Iterable[str] = ()) -> Toolset:
    """Start every enabled server (in parallel, each bounded by its timeout) and make its tools. `taken` names
    tools that exist already: an MCP tool of the same name is left out, with a line saying so."""
    out = Toolset(problems=list(loaded.problems))
    try:
        from mcp import Client  # noqa: F401  (the client of mcp 2.x)
    except ImportError:
        from importlib.metadata import PackageNotFoundError, version

        try:
            have = f"mcp {version('mcp')} is installed"
        except PackageNotFoundError:
            have = "mcp is not installed"
        if loaded.servers:
            out.problems.append(f"MCP servers need the mcp package 2.3 or newer ({have}): pip install 'mcp>=2.3'")
        return out
    wanted: list[Server] = []
    for name, config in loaded.servers.items():
        if config.disabled:
            continue
        if not _NAME_PART.fullmatch(name) or "__" in name:
            out.problems.append(f"MCP server {name!r} ({loaded.sources.get(name)}): the name cannot be part of a "
                                "tool name (letters, digits, _ and - only, no \"__\"); its tools are left out")
            continue
        wanted.append(_server(name, config, loaded.sources.get(name, "the MCP config"), folder))
    starts = [(s, s.start()) for s in wanted]
    for server, future in starts:
        try:
            server.wait_started(future, server.config.timeout + 15)
        except MCPConfigError as exc:
            out.problems.append(str(exc))
    seen: dict[str, str] = {n: "nbagent" for n in taken}
    for server, _ in starts:
        if server.state != "running":
            continue
        for listed in server.listed:
            remote = getattr(listed, "name", "")
            name = f"{PREFIX}{server.name}__{remote}"
            if not TOOL_NAME.fullmatch(name):
                out.problems.append(f"MCP server {server.name!r}: tool {remote!r} is left out: {name!r} is not a "
                                    "valid tool name (letters, digits, _ and -, at most 64 characters)")
                continue
            if name in seen:
                other = seen[name]
                out.problems.append(f"MCP tool name collision: {name!r} of server {server.name!r} is left out; "
                                    + ("a tool of nbagent or the notebook has that name" if other == "nbagent"
                                       else f"server {other!r} has a tool of that name"))
                continue
            seen[name] = server.name
            out.tools.append(_make_tool(server, listed))
        listed = {getattr(t, "name", None) for t in server.listed}
        long_form = {f"{PREFIX}{server.name}__{n}" for n in listed}
        for key in server.config.risk:
            if key != "*" and key not in listed and key not in long_form:
                out.problems.append(f"MCP server {server.name!r} ({server.source}): \"risk\" names {key!r}, which "
                                    "is not one of its tools")
    return out


def tools(*sources: str | Path | dict[str, Any], folder: str | Path | None = None,
          on_problem: Callable[[str], None] | None = None) -> list[Tool]:
    """The MCP tools of the given configs (files, inline JSON or dicts), for `Agent(tools=...)`:

        agent = Agent(model=..., tools=[*nbagent.mcp.tools("mcp.json"), my_tool])

    Each problem (a file that is not JSON, a server that does not start, a name collision) is one line given to
    `on_problem` (default: printed to stderr); the tools that could be made are returned either way. The servers
    start without the trust step a notebook asks for (`notebook_toolset`): naming a file here is the caller's own
    choice, so read a file that came with someone else's repository before passing it."""
    base = Path(folder) if folder is not None else Path.cwd()
    loaded = Loaded()
    for s in sources:
        read(s, base, loaded)
    result = toolset(loaded, base)
    from .secrets import Redactor

    report = on_problem or (lambda line: print(f"nbagent: {line}", file=sys.stderr))
    redactor = Redactor()  # a line quotes what a server printed, which may be a secret (its config's, the env's)
    for line in result.problems:
        report(redactor.text(line))
    return list(result.tools)


def notebook_config(folder: Path, setting: str | None = None) -> Loaded:
    """What a notebook configures: `mcp.json` beside it, then the `mcp` setting (a file or inline JSON: the cell's
    `--mcp`, `%agent config mcp=`, `NbAgent.mcp`, `NBAGENT_MCP`), whose servers replace those of the same name."""
    loaded = Loaded(folder=str(folder))
    beside = folder / "mcp.json"
    if beside.exists():
        read(beside, folder, loaded)
    if setting:
        read(setting, folder, loaded, label="the mcp setting (inline JSON)")
    return loaded


def notebook_toolset(folder: Path, setting: str | None = None, taken: Iterable[str] = (),
                     trusted: Callable[[Entry], bool] | None = None) -> Toolset:
    """The tools of what a notebook configures (`notebook_config`). A server whose entry came from a file (a
    cloned repository's mcp.json) starts only when `trusted(entry)` says a person trusted that very entry; the
    others are left out, listed in `untrusted`, and nothing of theirs runs. Inline JSON is the person's own words."""
    loaded = notebook_config(folder, setting)
    held = [e for e in needs_trust(loaded, folder) if trusted is None or not trusted(e)]
    for entry in held:
        del loaded.servers[entry.name]
    out = toolset(loaded, folder, taken) if loaded.servers or loaded.problems else Toolset()
    out.untrusted = held
    return out


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

__all__ = ["Entry", "MCPConfigError", "MCPTool", "Server", "ServerConfig", "Toolset", "annotation_risk",
           "code_files", "convert_result", "entry_digest", "entry_files", "entry_part", "load_config", "needs_trust",
           "notebook_config", "notebook_toolset", "read", "shutdown", "tools", "toolset", "what_it_runs"]
