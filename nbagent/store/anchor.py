"""Each chain's head, kept outside the project: what `tables.json` cannot vouch for.

The checkpoints in `tables.json` live beside the log, unkeyed: whoever cuts a `grant_revoked` off the end of a
session's chain can also delete tables.json (rebuilt from the log) or write the earlier seq and hash into it, and
the revoked grant answered again while `nbagent verify` said "every chain intact". So the store also writes the
head of a chain (last seq and hash) to a file in this user's data folder (`$XDG_DATA_HOME/nbagent/anchors/`, beside
the trust key, nbagent/store/seal.py), which a repository can neither carry nor edit: at every event of a session's own
chain (grants, revokes, MCP trusts: rare) and at each checkpoint of a run (waits, decisions, ends).

One file per store, named by the hash of the store folder's real path, holding one JSON line per head written:
`{"chain", "seq", "hash", "store"}` (`store`: the store's identity, from its meta.json). An append is one
`write(2)`, as for the log; the last line of a chain is its anchor. A chain shorter than its anchor, or different
at the anchor's seq, was cut or replaced (`integrity.chain_sound`, `nbagent verify`), whatever tables.json says.

The file is keyed by the path alone, so editing meta.json does not escape it; a chain the anchor knows but the log
does not have at all is named by `verify` only when the identity matches (after `rm -r NAME.nbagent` the new
store's chains are new ones). A store the anchor folder never saw (a fresh clone, another machine) has no anchor.
An anchor is never moved back: a head is written only when the chain still reaches the previous one (`reaches`),
so a cut chain that grows again stays caught. Reading never writes; a folder that cannot be written is a warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nbagent.store import seal

_FLAGS = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class Anchor:
    """The anchors of one store (`Store.anchor`). Heads are read incrementally (only lines added since the last
    read); the file's place is computed at each call from $XDG_DATA_HOME, so a changed data folder is a new file."""

    def __init__(self, store_path: Path, identity: str) -> None:
        self.identity = identity
        self._name = hashlib.sha256(os.fsencode(os.path.realpath(store_path))).hexdigest()[:32] + ".jsonl"
        self._at: tuple[Path, int] | None = None  # (file, inode) the heads were read from
        self._offset = 0
        self._heads: dict[str, tuple[int, str, str]] = {}  # chain -> (seq, hash, store identity)
        self._wfd: tuple[Path, int] | None = None  # (file, descriptor) appended to
        self.problem: str | None = None  # why the file could not be read, while it cannot
        self.warned: set[str] = set()  # chains warned about ("" : the anchor cannot be written), once each

    @property
    def path(self) -> Path:
        return seal.data_dir() / "anchors" / self._name

    def heads(self) -> dict[str, tuple[int, str, str]]:
        """Every anchored chain: (seq, hash, identity of the store that wrote it). Never raises: a file that cannot
        be read anchors nothing (`problem` says why)."""
        path = self.path
        try:
            fd = os.open(path, os.O_RDONLY | _FLAGS)
        except FileNotFoundError:
            self._reset(None)
            return self._heads
        except OSError as exc:
            self._reset(None)
            self.problem = f"{path}: cannot be read ({exc.strerror or exc}); no chain of this store is anchored"
            return self._heads
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or (hasattr(os, "geteuid") and st.st_uid != os.geteuid()):
                self._reset(None)
                self.problem = f"{path}: not a regular file of this user's; no chain of this store is anchored"
                return self._heads
            if self._at != (path, st.st_ino) or st.st_size < self._offset:
                self._reset((path, st.st_ino))
            self.problem = None
            if st.st_size > self._offset:
                data = os.pread(fd, st.st_size - self._offset, self._offset)
                end = data.rfind(b"\n") + 1  # complete lines only (another writer may be mid-line)
                for line in data[:end].splitlines():
                    self._take(line)
                self._offset += end
        finally:
            os.close(fd)
        return self._heads

    def _reset(self, at: tuple[Path, int] | None) -> None:
        self._at, self._offset, self._heads = at, 0, {}

    def _take(self, line: bytes) -> None:
        try:
            d = json.loads(line)
            chain, seq, digest, store = d["chain"], d["seq"], d["hash"], d.get("store", "")
        except (ValueError, TypeError, KeyError):
            return  # a damaged line anchors nothing
        if (isinstance(chain, str) and isinstance(seq, int) and not isinstance(seq, bool) and seq > 0
                and isinstance(digest, str) and isinstance(store, str)):
            self._heads[chain] = (seq, digest, store)

    def get(self, key: str) -> tuple[int, str] | None:
        """The chain's anchor (seq, hash), or None."""
        head = self.heads().get(key)
        return None if head is None else (head[0], head[1])

    def note(self, key: str, seq: int, digest: str, *, sync: bool) -> None:
        """Append the chain's new head (the caller holds the store's lock). OSError when the data folder cannot be
        written (the caller warns: the log itself is written already)."""
        line = json.dumps({"chain": key, "seq": seq, "hash": digest, "store": self.identity},
                          separators=(",", ":")).encode() + b"\n"
        fd = self._writer()
        os.write(fd, line)
        if sync:
            os.fsync(fd)

    def _writer(self) -> int:
        path = self.path
        if self._wfd is not None and self._wfd[0] == path:
            return self._wfd[1]
        self.close()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _FLAGS, 0o600)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise OSError(f"{path} is not a regular file")
        self._wfd = (path, fd)
        return fd

    def advance(self, key: str, written: dict[str, Any], *, sync: bool,
                doc_at: Callable[[str, int], dict[str, Any] | None], warn: Callable[[str], None],
                store_path: Path) -> None:
        """Note the chain's new head (`written`, an event durable already), unless the chain no longer reaches the
        head anchored before (`doc_at(key, position)` reads the chain): a chain cut (or replaced) and grown again
        must stay caught, so its anchor is never moved back. A data folder that cannot be written is a warning
        (`warn`, once per chain): the event is recorded."""
        try:
            before = self.get(key)
            if before is not None and not (written["seq"] > before[0] and reaches(
                    doc_at(key, before[0] - 1), *before)):
                self._warn_once(key, warn, f"{store_path} ({key}): the chain no longer reaches seq {before[0]}, "
                                           f"which this user's anchor saw ({self.path}); it was cut or replaced: the "
                                           "anchor stays, and `nbagent verify` names it")
                return
            self.note(key, written["seq"], written["hash"], sync=sync)
        except OSError as exc:
            self._warn_once("", warn, f"{self.path}: cannot write this store's anchor ({exc.strerror or exc}); "
                                      "events cut off the end of a chain from now on may go unnoticed: make "
                                      f"{seal.data_dir()} a folder this user can write, or set XDG_DATA_HOME to one")

    def _warn_once(self, key: str, warn: Callable[[str], None], message: str) -> None:
        if key not in self.warned:
            self.warned.add(key)
            warn(message)

    def close(self) -> None:
        if self._wfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._wfd[1])
            self._wfd = None


def reaches(doc: dict[str, Any] | None, seq: int, digest: str) -> bool:
    """Whether a chain's event at position seq-1 (`doc`) is the anchored one: that seq, that hash."""
    return doc is not None and doc.get("seq") == seq and doc.get("hash") == digest
