"""The append-only event log: one JSON line per event, behind TinyDB's Table and Query API.

Why not TinyDB's JSONStorage: it rewrites the whole file on every insert (0.5 s per insert at 50k documents,
measured here) and corrupts the file with two writers. Here an append is one `write(2)` of one line to an
`O_APPEND` descriptor, under the store's file lock, so its cost does not grow with the log.

Reading is incremental: the log remembers the byte offset it has read up to and, before any read, parses only
the complete lines past it (another kernel may have appended). Bytes after the last newline are one of two
things. If they parse as a JSON object whose seq and prev_hash continue its chain and whose hash is right, they
are a whole event that only lacks its newline (written by hand, by another tool, or by a writer that stopped
between the object and the newline): it is read like any other, and the next writer adds the newline before
its own line, so nothing recorded is lost. Anything else is a torn tail: a concurrent writer mid-write or the
remains of a writer killed mid-write. It is never consumed; a writer, holding the lock, knows no one else is
writing, so it truncates it before appending (those bytes were never acknowledged to anyone). A line that is
not valid JSON in the middle of the file is skipped with a warning and reported by `nbagent verify`; it never
stops the log from opening.

TinyDB doc ids are the 1-based ordinal of the event among the valid lines, so every process reading the same
file agrees on them. They are positions, not identities: the identity of an event is its ULID `id`.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tinydb.storages import Storage
from tinydb.table import Document, Table

from ..events import canonical_json, chain_key, compute_hash, load_record
from .errors import AppendOnly, StoreReadOnly, StoreWriteFailed

log = logging.getLogger("nbagent.store")

_READONLY_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM}


class EventLog:
    """The file, the parsed documents, and the head (last seq and hash) of every chain."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.docs: dict[str, dict[str, Any]] = {}  # str(doc_id) -> raw event dict, in file order
        self.by_chain: dict[str, list[str]] = {}  # chain key -> doc ids in file order
        self.by_id: dict[str, str] = {}  # event id -> doc id
        self.heads: dict[str, tuple[int, str]] = {}  # chain key -> (last seq, last hash)
        self.warnings: list[str] = []
        self._offset = 0  # bytes consumed: just after a newline, or after a whole event lacking its newline
        self._unterminated = False  # the last event consumed has no newline yet: the next writer adds it
        self._torn_seen: tuple[int, int] | None = None  # (offset, size) of a tail already judged torn
        self._lines = 0  # lines consumed, for messages
        self._fd: int | None = None
        self._size = 0  # the file's size at the last refresh
        # readers take no file lock, but two threads of one process must not parse the same bytes twice
        self._mutex = threading.RLock()

    # ------------------------------------------------------------------ reading

    def refresh(self) -> int:
        """Parse the complete lines appended since the last call; returns how many events were added."""
        with self._mutex:
            return self._refresh()

    def _refresh(self) -> int:
        try:
            size = self._size = os.stat(self.path).st_size
        except FileNotFoundError:
            self._size = 0
            return 0
        if size <= self._offset or self._torn_seen == (self._offset, size):
            return 0
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read(size - self._offset)
        if self._unterminated:
            self._unterminated = False
            if data.startswith(b"\n"):  # the newline the last event lacked: not a line of its own
                data = data[1:]
                self._offset += 1
                if not data:
                    return 0
        end = data.rfind(b"\n")
        if end < 0:
            return self._take_unterminated(data, size)
        # Parsing a big log creates millions of small objects that all survive: the cyclic GC would walk
        # them again and again (45% of reopen time at 60k events), so it is paused for bulk reads.
        bulk = end > 1 << 20 and gc.isenabled()
        if bulk:
            gc.disable()
        try:
            added = self._parse(data[:end])
        finally:
            if bulk:
                gc.enable()
        self._offset += end + 1
        if end + 1 < len(data):
            added += self._take_unterminated(data[end + 1:], size)
        return added

    def _take_unterminated(self, tail: bytes, size: int) -> int:
        """Consume bytes after the last newline if they are a whole event that chains on; else leave them torn.

        Only reached when the file does not end with a newline (rare), and a tail judged torn is not parsed
        again until the file changes, so the common path pays nothing.
        """
        try:
            record = load_record(tail)
        except ValueError:
            record = None
        if record is None or not self._chains_on(record):
            self._torn_seen = (self._offset, size)
            return 0
        self._lines += 1
        self._warn(
            f"{self.path}: line {self._lines} (the last) has no final newline but is a whole event that chains "
            "on; read as is (the next writer adds the newline)"
        )
        self._add(record)
        self._offset += len(tail)
        self._unterminated = True
        return 1

    def _chains_on(self, record: dict[str, Any]) -> bool:
        """A whole event: right hash, and seq and prev_hash continue its chain's head."""
        try:
            key = chain_key(record.get("run_id"), record["session_id"])
            last_seq, last_hash = self.heads.get(key, (0, None))
            return (record.get("seq") == last_seq + 1 and record.get("prev_hash") == last_hash
                    and record.get("hash") == compute_hash(record))
        except (KeyError, TypeError, ValueError):
            return False

    def _parse(self, data: bytes) -> int:
        added = 0
        for line in data.split(b"\n"):
            self._lines += 1
            if not line.strip():
                continue
            try:
                record = load_record(line)
            except ValueError as exc:
                self._warn(f"{self.path}: line {self._lines} is not a valid event ({exc}); skipped")
                continue
            self._add(record)
            added += 1
        return added

    def chain(self, key: str, start: int = 0) -> list[dict[str, Any]]:
        """A chain's events from position `start` on (callers refresh first)."""
        ids = self.by_chain.get(key, ())
        return [self.docs[d] for d in ids[start:]] if start < len(ids) else []

    def chain_len(self, key: str) -> int:
        return len(self.by_chain.get(key, ()))

    def first(self, key: str) -> dict[str, Any] | None:
        ids = self.by_chain.get(key)
        return self.docs[ids[0]] if ids else None

    def torn_tail(self) -> int:
        """Bytes after the last complete line (a crash mid-write, or a writer mid-write)."""
        try:
            return max(0, os.stat(self.path).st_size - self._offset)
        except FileNotFoundError:
            return 0

    def _add(self, record: dict[str, Any]) -> None:
        doc_id = str(len(self.docs) + 1)
        self.docs[doc_id] = record
        key = chain_key(record.get("run_id"), record.get("session_id", ""))
        self.by_chain.setdefault(key, []).append(doc_id)
        if isinstance(record.get("id"), str):
            self.by_id[record["id"]] = doc_id
        self.heads[key] = (record.get("seq", 0), record.get("hash", ""))

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        log.warning(message)

    # ------------------------------------------------------------------ writing (caller holds the lock)

    def append(self, record: dict[str, Any], *, sync: bool) -> dict[str, Any]:
        """Give `record` its seq, prev_hash and hash, and write it as one line.

        The caller holds the store's lock: nobody else can append between our refresh and our write, which is
        what makes seq gap-free and the chain linear across processes.
        """
        with self._mutex:
            return self._append(record, sync=sync)

    def _append(self, record: dict[str, Any], *, sync: bool) -> dict[str, Any]:
        self._refresh()
        self._repair_torn_tail(max(0, self._size - self._offset))
        key = chain_key(record.get("run_id"), record["session_id"])
        last_seq, last_hash = self.heads.get(key, (0, None))
        record = dict(record, seq=last_seq + 1, prev_hash=last_hash)
        record["hash"] = compute_hash(record)
        line = (canonical_json(record) + "\n").encode("utf-8")
        if self._unterminated:  # complete the last event's line in the same write(2)
            line = b"\n" + line
        fd = self._writer()
        try:
            written = os.write(fd, line)
            if written != len(line):
                raise OSError(errno.ENOSPC, f"short write ({written} of {len(line)} bytes)")
            if sync:
                os.fsync(fd)
        except OSError as exc:
            self._rollback()
            if exc.errno in _READONLY_ERRNOS:
                raise StoreReadOnly(self.path, exc.strerror or str(exc)) from exc
            raise StoreWriteFailed(self.path, exc.strerror or str(exc)) from exc
        self._offset += len(line)
        self._size = self._offset
        self._unterminated = False
        self._lines += 1
        self._add(record)
        return record

    def sync(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def _writer(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as exc:
                if exc.errno in _READONLY_ERRNOS:
                    raise StoreReadOnly(self.path, exc.strerror or str(exc)) from exc
                raise StoreWriteFailed(self.path, exc.strerror or str(exc)) from exc
        return self._fd

    def _repair_torn_tail(self, torn: int) -> None:
        """Cut `torn` bytes past the last complete line (the size the refresh just saw: one stat per append)."""
        if torn:
            self._warn(
                f"{self.path}: removed an incomplete last line ({torn} bytes) left by a writer that stopped "
                "mid-write; it was never acknowledged"
            )
            os.truncate(self.path, self._offset)
            self._torn_seen = None

    def _rollback(self) -> None:
        """Cut a partly written line so a failed append (disk full) leaves the log exactly as it was."""
        try:
            os.truncate(self.path, self._offset)
        except OSError:
            pass  # the next writer's torn-tail repair will do it

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class _NoStorage(Storage):
    """EventTable reads and writes through EventLog; TinyDB's whole-file storage is never used."""

    def read(self) -> dict[str, dict[str, Any]] | None:
        return None

    def write(self, data: dict[str, dict[str, Any]]) -> None:
        raise AppendOnly("a whole-table write")


class EventTable(Table):
    """TinyDB's Table over the event log: `search`, `get`, `count` and `Query` work; mutations are refused."""

    def __init__(self, log_: EventLog, *, before_read: Callable[[], None] | None = None) -> None:
        super().__init__(_NoStorage(), "events", cache_size=30)
        self._log = log_
        self._before_read = before_read
        self._cached_at = -1  # events in the log when the query cache was last valid

    def _sync(self) -> None:
        if self._before_read is not None:
            self._before_read()
        self._log.refresh()
        # TinyDB caches query results: drop them whenever the log grew, by another process (refresh) or by this
        # one's own appends (which refresh does not count), or a search after an append answers from before it
        if len(self._log.docs) != self._cached_at:
            self._cached_at = len(self._log.docs)
            self.clear_cache()

    def _read_table(self) -> dict[str, Mapping[Any, Any]]:  # type: ignore[override]
        self._sync()
        return self._log.docs

    def search(self, cond: Any) -> list[Document]:
        self._sync()
        return super().search(cond)

    def docs_for_chain(self, key: str) -> list[dict[str, Any]]:
        """Fast path for one run's events: an index lookup instead of a scan."""
        self._sync()
        return self._log.chain(key)

    # The log is append-only: Store.append is the one way in.
    def insert(self, document: Mapping[Any, Any]) -> int:
        raise AppendOnly("insert through TinyDB (use Store.append)")

    def insert_multiple(self, documents: Iterable[Mapping[Any, Any]]) -> list[int]:
        raise AppendOnly("insert through TinyDB (use Store.append)")

    def update(self, *args: Any, **kwargs: Any) -> list[int]:
        raise AppendOnly("update")

    def update_multiple(self, *args: Any, **kwargs: Any) -> list[int]:
        raise AppendOnly("update")

    def upsert(self, *args: Any, **kwargs: Any) -> list[int]:
        raise AppendOnly("upsert")

    def remove(self, *args: Any, **kwargs: Any) -> list[int]:
        raise AppendOnly("remove")

    def truncate(self) -> None:
        raise AppendOnly("truncate")
