"""A notebook's MCP servers start only after a person trusts them (docs/mcp.md, "Trust").

An `mcp.json` that came with a cloned repository names commands, and the first `%%agent` cell would run them. So
a server whose entry comes from a file (mcp.json beside the notebook, or a file named by `--mcp`, `%agent config
mcp=`, `NbAgent.mcp`, `NBAGENT_MCP`) starts only once a person trusted that exact entry: `%agent trust NAME` (or
`--all`), or `--approve all` for a headless run. Each trust is an `mcp_server_trusted` event in the session's chain
of the notebook's log (the server, its file, the entry's digest, what it runs, who said yes). It stays in force
for later runs and kernels, whatever their approval policy, until the entry changes (another digest), or a file
of the notebook's folder it runs does (a script the entry names: its content is part of the digest, so a script
the agent or a collaborator's pull rewrote is not started until trusted again).

An untrusted server is not started: the cell shows one line per server (a display, not stderr) saying what it
would run and how to trust it, and the run goes on without its tools. Inline JSON is the person's own words and
needs no trust.

The log travels with the notebook (a repository may ship `NAME.nbagent/` beside it), and anyone can append a
well-chained event to it. So each trust carries a seal: an HMAC of the server, its file and its entry's digest
under a key that belongs to this user and lives outside every project (`$XDG_DATA_HOME/nbagent/trust.key`, made on
first use, readable by the user only). Only trusts sealed with this user's key count: a trust that came with a
cloned repository, was written on another machine, or was appended by hand is asked about again.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import html
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbagent.events.model import McpServerTrusted
from nbagent.ipython.options import UsageError
from nbagent.mcp import Entry, Loaded, entry_part, needs_trust, notebook_config, what_it_runs

if TYPE_CHECKING:
    from nbagent.ipython.hoststate import HostState
    from nbagent.store import Store

EVENT = McpServerTrusted.event_type


def _redact(text: str) -> str:
    from nbagent.secrets.redactor import Redactor

    return Redactor().text(text)


def recorded(store: Store) -> list[McpServerTrusted]:
    """Every trust in the notebook's log, oldest first (read from the sessions' own chains: a few events)."""
    out: list[McpServerTrusted] = []
    for session_id in store.session_names():
        out.extend(e.payload for e in store.session_events(session_id) if isinstance(e.payload, McpServerTrusted))
    return out


def key_path() -> Path:
    """Where this user's trust key lives: outside every project, so no repository can ship it
    (nbagent/store/seal.py)."""
    from nbagent.store import seal as _seal

    return _seal.key_path()


def _key() -> bytes:
    """This user's trust key, made on first use; read without blocking and only from a regular file of this user's,
    not a link, of at least 32 bytes (else `seal.KeyFileError`, one line: never an empty or shipped key)."""
    from nbagent.store import seal as _seal

    return _seal.key()


def seal(server: str, source: str, digest: str) -> str:
    return hmac.new(_key(), "\0".join((server, source, digest)).encode(), hashlib.sha256).hexdigest()


def sealed(t: McpServerTrusted) -> bool:
    """A trust this user gave here (its seal verifies under this user's key)."""
    return bool(t.seal) and hmac.compare_digest(str(t.seal), seal(t.server, t.source, t.digest))


def state(trusts: list[McpServerTrusted], entry: Entry) -> str:
    """"trusted" (this very entry and the files it runs, sealed by this user), "files" (this entry, but a file it
    runs changed), "changed" (this server of this file, another entry), or "untrusted"."""
    same = [t for t in trusts if t.server == entry.name and t.source == entry.source and sealed(t)]
    if any(t.digest == entry.digest for t in same):
        return "trusted"
    if any(entry_part(t.digest) == entry_part(entry.digest) for t in same):
        return "files"
    return "changed" if same else "untrusted"


def _files_changed(entry: Entry) -> str:
    names = ", ".join(entry.files[:3]) + (", ..." if len(entry.files) > 3 else "")
    return "a file it runs changed since it was trusted" + (f" ({names})" if names else "")


def record(store: Store, session_id: str, entry: Entry, by: str) -> McpServerTrusted:
    """Write the trust of one entry to the session's chain of the log, sealed with this user's key."""
    payload = McpServerTrusted(server=entry.name, source=entry.source, digest=entry.digest,
                               command=_redact(entry.command), by=by,
                               seal=seal(entry.name, entry.source, entry.digest))
    store.append(payload, session_id=session_id)
    return payload


class Gate:
    """`notebook_toolset(trusted=...)` for one listing: an entry the log trusts starts; with `approve="all"` (the
    headless policy that says yes to everything) an untrusted one is trusted now, recorded `by="policy:all"`;
    nothing else starts (none and low do not: starting a server runs a command, WRITE_HIGH_RISK)."""

    def __init__(self, store: Store, session: Any, approve: str | None) -> None:
        self.store, self.session, self.approve = store, session, approve or ""

    @functools.cached_property
    def trusts(self) -> list[McpServerTrusted]:
        """The log's trusts, read when a listing first meets a server (a notebook without one never reads them)."""
        return recorded(self.store)

    def __call__(self, entry: Entry) -> bool:
        if state(self.trusts, entry) == "trusted":
            return True
        if self.approve == "all":
            self.trusts.append(record(self.store, self.session().id, entry, by="policy:all"))
            return True
        return False


def line(entry: Entry, why: str, approve: str | None, option: str = "") -> str:
    """The one line shown for a server that was not started: what it would run and how to trust it. `option`:
    what `%agent trust` needs besides the name (`--mcp FILE` for a file only the cell's own option names)."""
    reason = {"changed": "its entry changed since it was trusted", "files": _files_changed(entry)}.get(
        why, "no one has trusted this entry")
    if approve in ("none", "low"):
        reason += f" (--approve {approve} does not: starting a server runs a command, WRITE_HIGH_RISK)"
    elif approve == "recorded":
        reason += " (--approve recorded starts only servers the log trusts)"
    sets = f" ({entry.risk})" if entry.risk else ""  # a risk the entry lowers is part of what is trusted
    return _redact(f"nbagent: MCP server {entry.name!r} ({entry.source}) was not started: it would run "
                   f"`{entry.command}`{sets}, and {reason}. To trust it: %agent trust {entry.name}{option} (or --all); "
                   "headless: nbagent run --approve all")


class TrustNote:
    """One server left out, in the cell's output: a display (text and HTML), so it reads as part of the run."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {"text/plain": self.text, "text/html": f'<p class="nbagent-trust"><strong>⚠</strong> '
                                                      f"{html.escape(self.text)}</p>"}

    def __repr__(self) -> str:
        return self.text


def show(untrusted: list[Entry], trusts: list[McpServerTrusted], approve: str | None,
         cell_mcp: tuple[str, str] | None = None) -> None:
    """One line per server that was not started, as displays in the cell. `cell_mcp`: the cell's own `--mcp`, as
    written and as the file read, so the line says to name it to `%agent trust` too."""
    if not untrusted:
        return
    from IPython.display import display

    for entry in untrusted:
        option = f" --mcp {shlex.quote(cell_mcp[0])}" if cell_mcp and entry.source == cell_mcp[1] else ""
        display(TrustNote(line(entry, state(trusts, entry), approve, option)))


# ---------------------------------------------------------------------------------------------------- %agent


def _config(host: HostState, mcp: str | None) -> Loaded:
    setting = mcp if mcp is not None else host.settings()["mcp"][0]
    loaded = notebook_config(host.folder, setting or None)
    for problem in loaded.problems:
        print(_redact(f"nbagent: {problem}"), file=sys.stderr)
    return loaded


def cmd_trust(host: HostState, args: Any) -> None:
    """`%agent trust NAME ... | --all [--mcp FILE]`: record a person's trust of these servers' entries."""
    loaded = _config(host, args.mcp)
    pending = {e.name: e for e in needs_trust(loaded)}
    if not args.names and not args.all:
        raise UsageError("%agent trust: name the servers to trust (%agent trust NAME), or --all; %agent mcp lists "
                         "them")
    chosen: list[Entry] = []
    for name in args.names:
        if name in pending:
            chosen.append(pending[name])
        elif name in loaded.servers:
            why = "is disabled" if loaded.servers[name].disabled else "is inline JSON: it starts as given"
            print(f"MCP server {name!r} {why}; nothing to trust")
        else:
            known = ", ".join(sorted(pending)) or "none from a file"
            raise UsageError(f"%agent trust: no MCP server {name!r} is configured for this notebook (servers from "
                             f"files: {known}); %agent mcp lists them, --mcp FILE names another config")
    if args.all:
        chosen += [e for e in pending.values() if e not in chosen]
    if not chosen and args.all:
        print("no MCP server from a file is configured for this notebook; nothing to trust")
    trusts = recorded(host.store)
    session = host.store.session(host.settings()["session"][0], notebook=host.notebook.name)
    for entry in chosen:
        if state(trusts, entry) == "trusted":
            print(_redact(f"MCP server {entry.name!r} ({entry.source}) is trusted already: `{entry.command}`"))
            continue
        trusts.append(record(host.store, session.id, entry, by="%agent trust"))
        runs = f" (and what it runs: {', '.join(entry.files)})" if entry.files else ""
        sets = f" ({entry.risk})" if entry.risk else ""
        print(_redact(f"trusted MCP server {entry.name!r} ({entry.source}): `{entry.command}`{sets}; it starts at "
                      f"the next %%agent cell (or %agent tools); an edit of its entry{runs} is asked about again"))


def cmd_mcp(host: HostState, args: Any) -> None:
    """`%agent mcp [--mcp FILE]`: each configured server, where it comes from, what it runs, and its trust."""
    loaded = _config(host, args.mcp)
    if not loaded.servers:
        print("no MCP server is configured for this notebook (mcp.json beside it, or the mcp setting)")
        return
    trusts = recorded(host.store)
    entries = {e.name: e for e in needs_trust(loaded)}
    for name, config in loaded.servers.items():
        entry = entries.get(name)
        if config.disabled:
            status = "disabled"
        elif entry is None:
            status = "inline JSON: starts as given"
        else:
            status = {"trusted": "trusted",
                      "changed": f"changed since it was trusted: %agent trust {name}",
                      "files": f"{_files_changed(entry)}: %agent trust {name}",
                      "untrusted": f"not trusted: %agent trust {name}"}[state(trusts, entry)]
        print(_redact(f"{name:<16} {status}  [{loaded.sources.get(name)}] {what_it_runs(config)}"))
