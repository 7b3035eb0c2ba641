"""MCP configuration: the `mcpServers` JSON read into `ServerConfig`s, one problem line per bad entry.

Reading a config never starts anything: `read` and `parse` collect the servers and the problems (a file that is not
JSON, an entry with both or neither of command and url), and a server's credential-shaped values become known
secrets as the entry is read, so an error echoing them is redacted everywhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from nbagent.events.levels import Risk

DEFAULT_TIMEOUT = 30.0


class MCPConfigError(ValueError):
    """A configuration that cannot be used; the message is one line naming the file and what is wrong."""


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

        from nbagent.secrets.redactor import remember, secret_key, url_secrets

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

    Args:
        data: the parsed JSON document.
        source: where it came from, as the problem lines name it.
        loaded: what earlier sources gave (added to, and returned); None starts afresh.
        file: the file the document was read from (its servers then need a person's trust in a notebook).
    """
    loaded = loaded or Loaded()
    servers = data.get("mcpServers", data.get("servers")) if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        loaded.problems.append(f"MCP config {source}: expected a JSON object with an \"mcpServers\" object")
        return loaded
    for name, entry in servers.items():
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
    """Read one source: a dict, inline JSON text (starting with `{`), or a file (relative to `folder`).

    Args:
        source: the dict, the JSON text or the file's path.
        folder: where a relative path is read from; also kept as the config's folder when it has none yet.
        loaded: what earlier sources gave (added to, and returned); None starts afresh.
        label: how problem lines name a dict or inline JSON (a file is named by its path).
    """
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
    """The servers of one file; raises MCPConfigError (one line per problem) when anything is wrong.

    Args:
        path: the config file (`{"mcpServers": {...}}`).
    """
    loaded = read(path)
    if loaded.problems:
        raise MCPConfigError("\n".join(loaded.problems))
    return loaded.servers


def without_userinfo(url: str | None) -> str:
    """A URL as shown in a line: without `user:password@` (a server's problems and its trust prompt name it)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url or "")
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "") if parts.username or parts.password else parts.netloc
    return urlunsplit(parts._replace(netloc=netloc))
