"""What a person's trust in a server entry covers, and which entries need one.

In a notebook a server whose entry came from a file starts only once a person trusted that exact entry: its
canonical JSON and the files of the folder it runs (`entry_digest`). The trust itself is recorded by
nbagent/ipython/trust.py; this module only says what is asked about (`needs_trust`, `what_it_runs`).
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field

from nbagent.mcp.config import Loaded, ServerConfig, without_userinfo
from nbagent.mcp.server_files import entry_files


class Entry(BaseModel):
    """A server entry read from a file, as a person is asked to trust it: starting it runs `command`."""

    name: str
    source: str  # the file
    digest: str  # entry_digest: what a trust covers
    command: str  # what_it_runs
    files: list[str] = Field(default_factory=list)  # the files of the notebook's folder it runs (entry_files), found
    risk: str = ""  # the risks the entry sets for its tools, in words (risk_words): trusting it decides them too


MAX_HASHED = 8 * 1024 * 1024  # a file it runs larger than this counts by its size and time of change, not read


def entry_digest(config: ServerConfig, folder: str | Path | None = None) -> str:
    """What a person's trust covers: sha256 of the entry's canonical JSON (every key nbagent acts on), so an edited
    entry (another argument, env value or risk) is asked about again; and, given the notebook's folder, `+` and a
    sha256 of the files of the folder it runs (`entry_files`: their names and contents), so a script edited after
    the trust (by the agent, a collaborator's git pull) is not started until trusted again. An entry naming no file
    there has the first part alone."""
    import hashlib

    from nbagent.events.model import canonical_json

    text = hashlib.sha256(canonical_json(config.model_dump(mode="json")).encode("utf-8")).hexdigest()
    found = _file_states(config, folder)
    if not found:
        return text
    return text + "+" + hashlib.sha256(canonical_json(found).encode("utf-8", "surrogatepass")).hexdigest()


def entry_part(digest: str) -> str:
    """The part of a digest that covers the entry's JSON (without the files it runs)."""
    return digest.split("+", 1)[0]


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
        return f"a connection to {without_userinfo(config.url)}"
    words = [f"{k}={v}" for k, v in config.env.items()] + [config.command or "", *config.args]
    return shlex.join(words) + (f" (in {config.cwd})" if config.cwd else "")


def risk_words(config: ServerConfig) -> str:
    """The risks an entry sets for its tools, as the person asked to trust it reads them (`its "risk" sets
    git_checkout to WRITE_LOW_RISK`): a cloned repository's entry could lower a risk, and a trust is a yes to it."""
    if not config.risk:
        return ""
    shown = [f"{'every other tool' if k == '*' else k} to {v.value}" for k, v in list(config.risk.items())[:8]]
    more = len(config.risk) - len(shown)
    return "its \"risk\" sets " + ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def needs_trust(loaded: Loaded, folder: str | Path | None = None) -> list[Entry]:
    """The enabled servers whose entry came from a file: in a notebook each starts only once trusted. Their digest
    covers the files of the notebook's folder (`folder`, else the one the config was read from) they run."""
    where = folder if folder is not None else loaded.folder
    out = []
    for name, config in loaded.servers.items():
        if name in loaded.files and not config.disabled:
            files = [os.path.relpath(p, where) for p in entry_files(config, where) if p.is_file()] if where else []
            out.append(Entry(name=name, source=loaded.files[name], digest=entry_digest(config, where),
                             command=what_it_runs(config), files=files, risk=risk_words(config)))
    return out


def code_files(loaded: Loaded, folder: str | Path | None = None) -> list[str]:
    """Every file of the notebook's folder the configured stdio servers run (`entry_files`, existing or not), for
    the runtime's `code_paths`: writing one changes what a server runs at its next start."""
    where = folder if folder is not None else loaded.folder
    return list(dict.fromkeys(str(p) for c in loaded.servers.values() for p in entry_files(c, where)))
