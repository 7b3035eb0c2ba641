"""The small mutable tables (sessions, runs): TinyDB documents in one JSON file, replaced atomically.

These tables hold tens to thousands of rows, so TinyDB's read-modify-write of the whole file is fine; what is
not fine is its truncate-then-write, which leaves an empty or half file if the process dies in between. Here a
write goes to a temporary file in the same folder, is fsynced, and replaces the old file with `os.replace`
(atomic on POSIX): a reader, or a crash, sees the old file or the new one, never a mix.

Rows are keyed by their ULID (TinyDB's doc id is the run or session id), never by TinyDB's per-process
counters, which two kernels would hand out twice.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from tinydb import TinyDB
from tinydb.storages import Storage
from tinydb.table import Table

from .errors import StoreCorrupt, StoreReadOnly, StoreWriteFailed


class AtomicJSONStorage(Storage):
    def __init__(self, path: str | Path, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly

    def read(self) -> dict[str, dict[str, Any]] | None:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise StoreCorrupt(self.path, f"the tables file is not valid JSON ({exc})") from exc
        if not isinstance(data, dict):
            raise StoreCorrupt(self.path, "the tables file is not a JSON object")
        return data

    def write(self, data: dict[str, dict[str, Any]]) -> None:
        if self.readonly:
            raise StoreReadOnly(self.path, "the store was opened read-only")
        folder = self.path.parent
        try:
            fd, tmp = tempfile.mkstemp(prefix=".tables-", suffix=".tmp", dir=folder)
        except OSError as exc:
            raise _write_error(self.path, exc) from exc
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps(data, ensure_ascii=False, separators=(",", ":")))  # the C encoder
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            _fsync_dir(folder)
        except OSError as exc:
            with contextlib.suppress(OSError):  # the temp file may already be gone; the write error matters
                os.unlink(tmp)
            raise _write_error(self.path, exc) from exc


def _write_error(path: Path, exc: OSError) -> Exception:
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return StoreReadOnly(path, exc.strerror or str(exc))
    return StoreWriteFailed(path, exc.strerror or str(exc))


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable."""
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class IdTable(Table):
    """Rows keyed by ULID strings."""

    document_id_class = str  # type: ignore[assignment]

    def _get_next_id(self) -> Any:
        raise TypeError("rows of this table are inserted with their own id: Document(row, doc_id=ULID)")


class TablesDB(TinyDB):
    table_class = IdTable


def open_tables(path: Path, readonly: bool) -> TinyDB:
    return TablesDB(path, storage=AtomicJSONStorage, readonly=readonly)
