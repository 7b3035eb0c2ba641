"""Content-addressed copies of files the agent changed, so a change can be undone (see docs/undo.md).

    blobs = BlobStore(store.path / "blobs")     # NAME.nbagent/blobs/ab/cdef...: the sha256 is the name
    sha = blobs.put(b"text")                      # idempotent; the same content is stored once
    blobs.get(sha)                                # the bytes, checked against their hash

The log keeps only the hashes (in the file tools' results), so it stays small and its chain still covers what was
changed: a blob that was altered on disk no longer matches its name and is refused, never restored.

Nothing here is reached through a symbolic link: the blob folder and its shards are checked with lstat and every
blob and temp file is opened with O_NOFOLLOW (a repository shipping `blobs -> /tmp/drop` would otherwise receive the
content of every file the agent changed or deleted). A link is a BlobError in one line: the change is not made.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import stat
from pathlib import Path
from typing import IO

CHUNK = 1024 * 1024
_SHA = re.compile(r"[0-9a-f]{64}")
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class BlobError(Exception):
    """A blob is missing or does not match its hash: the change it backs cannot be undone."""


class BlobStore:
    """A folder of blobs named by their sha256 (`ab/cdef…`), written atomically (temp file, fsync, rename)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    @classmethod
    def of_store(cls, store_path: str | Path) -> BlobStore:
        """The blob folder of a store (`NAME.nbagent/blobs`): beside the log it backs."""
        return cls(Path(store_path) / "blobs")

    def path(self, sha: str) -> Path:
        if not _SHA.fullmatch(sha):
            raise BlobError(f"{sha!r} is not a sha256")
        return self.folder / sha[:2] / sha[2:]

    def has(self, sha: str) -> bool:
        """A blob of that name is there: a regular file (a link is none), in folders that are no links."""
        try:
            self._shard(sha, create=False)
            return stat.S_ISREG(os.lstat(self.path(sha)).st_mode)
        except (OSError, BlobError):
            return False

    def _shard(self, sha: str, *, create: bool) -> Path:
        """The blob's folder (`ab/`), made if `create`; BlobError when it or the blob folder is a link or not a
        folder: a blob is never written, or read, wherever a link points."""
        from nbagent.store.errors import StoreError
        from nbagent.store.regular import folder

        shard = self.path(sha).parent
        try:
            if create:
                self.folder.parent.mkdir(parents=True, exist_ok=True)
            folder(self.folder, create=create)
            folder(shard, create=create)
        except StoreError as exc:
            raise BlobError(str(exc)) from None
        return shard

    def put(self, data: bytes) -> str:
        """Store `data`; its sha256."""
        sha = hashlib.sha256(data).hexdigest()
        if not self.has(sha):
            self._write(sha, [data])
        return sha

    def put_stream(self, f: IO[bytes]) -> str:
        """Store what `f` holds from its position to its end (in chunks: a large file is never held whole)."""
        from nbagent.store.errors import StoreError
        from nbagent.store.regular import folder

        try:
            if not folder(self.folder, create=False):
                self.folder.parent.mkdir(parents=True, exist_ok=True)
                folder(self.folder, create=True)
        except StoreError as exc:
            raise BlobError(str(exc)) from None
        tmp = self.folder / f".in.{secrets.token_hex(6)}.tmp"
        h = hashlib.sha256()
        try:
            with os.fdopen(os.open(tmp, _NEW, 0o644), "wb") as out:
                while chunk := f.read(CHUNK):
                    h.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            sha = h.hexdigest()
            if not self.has(sha):
                self._shard(sha, create=True)
                os.replace(tmp, self.path(sha))  # (a link at the blob's name is replaced, never written through)
            return sha
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def _write(self, sha: str, pieces: list[bytes]) -> None:
        target = self.path(sha)
        tmp = self._shard(sha, create=True) / f".{sha[2:10]}.{secrets.token_hex(6)}.tmp"
        try:
            with os.fdopen(os.open(tmp, _NEW, 0o644), "wb") as out:
                for piece in pieces:
                    out.write(piece)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def get(self, sha: str) -> bytes:
        """The content with this hash, or BlobError (missing, not a regular file, or altered since it was stored).
        Opened without blocking and checked with fstat first: a FIFO put in a blob's place is refused, never
        waited on, and a link (or a linked folder) is refused, never followed."""
        from nbagent.store.errors import NotAFile
        from nbagent.store.regular import open_regular

        self._shard(sha, create=False)
        try:
            with os.fdopen(open_regular(self.path(sha)), "rb") as f:
                data = f.read()
        except NotAFile as exc:
            raise BlobError(f"the saved content {sha[:12]}… in {self.folder} is not a regular file (a {exc.kind}); "
                            "it cannot be restored: remove it") from None
        except OSError as exc:
            raise BlobError(f"the saved content {sha[:12]}… is missing from {self.folder} ({exc.strerror})") from None
        if hashlib.sha256(data).hexdigest() != sha:
            raise BlobError(f"the saved content {sha[:12]}… in {self.folder} was altered since it was saved")
        return data


__all__ = ["BlobError", "BlobStore"]
