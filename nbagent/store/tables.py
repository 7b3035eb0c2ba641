"""The small mutable tables (sessions, runs): TinyDB documents in one JSON file, replaced atomically.

These tables hold tens to thousands of rows, so TinyDB's read-modify-write of the whole file is fine; what is
not fine is its truncate-then-write, which leaves an empty or half file if the process dies in between. Here a
write goes to a temporary file in the same folder and replaces the old file with `os.replace` (atomic on POSIX):
a reader, or a killed process, sees the old file or the new one, never a mix.

The file is not fsynced (the event log is, before each row that names its events is written): after a power cut
it may be an older version, whose rows' `last_seq` say they are behind the events (`current_record` then folds
the events), or, on a filesystem that does not keep a rename behind its data, damaged, which is rebuilt (below).
Either way it never names an event the log lost, so `nbagent verify` raises no false alarm. An fsync of the
file and of its folder cost ~2 ms at every checkpoint, at the end of every run, for a copy of what is durable.

Rows are keyed by their ULID (TinyDB's doc id is the run or session id), never by TinyDB's per-process
counters, which two kernels would hand out twice.

The file is a cache of what the event log says, so a damaged one (not JSON, or not tables of rows) is never an
error: reads are served from tables rebuilt from the events (the `rebuild` hook the store sets), a warning says
so, and the next table write replaces the damaged file with the rebuilt tables plus the change.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tinydb import TinyDB
from tinydb.storages import Storage
from tinydb.table import Document, Table

from nbagent.store.errors import NotAFile, StoreReadOnly, StoreWriteFailed
from nbagent.store.regular import read_regular


class AtomicJSONStorage(Storage):
    def __init__(self, path: str | Path, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.damage: str | None = None  # why the file on disk cannot be used, while it cannot
        self.rebuild: Callable[[], dict[str, dict[str, Any]]] | None = None  # the tables, from the events
        self.on_damage: Callable[[str], None] | None = None  # told once per distinct damage
        self._rebuilt: tuple[tuple[int, int], dict[str, dict[str, Any]]] | None = None
        # the file's bytes as last read or written, and their tables: a read of the same bytes (a store reads the
        # file a dozen times a cell, and it holds every run's row) is not parsed again
        self._parsed: tuple[bytes, dict[str, dict[str, Any]]] | None = None

    def read(self) -> dict[str, dict[str, Any]] | None:
        data, why = self._load()
        if why is not None:
            return self._damaged(why)
        self.damage = None
        return data

    def problem(self) -> str | None:
        """Why the file on disk cannot be used (without rebuilding anything), or None."""
        return self._load()[1]

    def _load(self) -> tuple[dict[str, dict[str, Any]] | None, str | None]:
        try:
            raw = read_regular(self.path)
            parsed = self._parsed
            if parsed is not None and parsed[0] == raw:  # compared by content, never by a stat that could repeat
                return _copy(parsed[1]), None
            data = json.loads(raw.decode("utf-8"))
        except FileNotFoundError:
            return None, None
        except NotAFile as exc:  # a FIFO would block a reader, a link is never followed: damage like any other (the
            return None, f"not a regular file but a {exc.kind}"  # next write replaces it; a link, not its target)
        except ValueError as exc:  # also bad UTF-8
            return None, f"not valid JSON ({exc})"
        problem = _shape_problem(data)
        if problem is None:
            self._parsed = (raw, _copy(data))
        return data, problem

    def _damaged(self, why: str) -> dict[str, dict[str, Any]] | None:
        """Serve tables rebuilt from the events; rebuilt once per version of the damaged file."""
        if why != self.damage:
            self.damage = why
            if self.on_damage is not None:
                self.on_damage(f"{self.path}: the runs and sessions cache is damaged ({why}); rebuilt from the "
                               "event log" + ("" if self.readonly else ", and rewritten at the next write"))
        if self.rebuild is None:
            return None
        try:
            st = os.lstat(self.path)
            sig = (st.st_mtime_ns, st.st_size)
        except OSError:
            sig = (0, 0)
        if self._rebuilt is None or self._rebuilt[0] != sig:
            self._rebuilt = (sig, self.rebuild())
        return _copy(self._rebuilt[1])

    def write(self, data: dict[str, dict[str, Any]]) -> None:
        if self.readonly:
            raise StoreReadOnly(self.path, "the store was opened read-only")
        folder = self.path.parent
        raw = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")  # the C encoder
        try:
            fd, tmp = tempfile.mkstemp(prefix=".tables-", suffix=".tmp", dir=folder)
        except OSError as exc:
            raise _write_error(self.path, exc) from exc
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
            os.replace(tmp, self.path)  # (a link at tables.json is replaced itself, its target never written)
            self._parsed = (raw, _copy(data))
        except OSError as exc:
            with contextlib.suppress(OSError):  # the temp file may already be gone; the write error matters
                os.unlink(tmp)
            raise _write_error(self.path, exc) from exc


def _copy(tables: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A copy down to the rows: TinyDB changes what read() returns (its tables and rows) before writing it back, and
    a row's values are replaced, never changed in place."""
    return {name: {k: dict(row) for k, row in rows.items()} for name, rows in tables.items()}


def _shape_problem(data: Any) -> str | None:
    """What makes parsed JSON unusable as TinyDB tables (a JSON object of tables of row objects), if anything."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object of tables"
    for name, rows in data.items():
        if not isinstance(rows, dict):
            return f"table {name!r} is not an object of rows"
        if not all(isinstance(row, dict) for row in rows.values()):
            return f"table {name!r} has rows that are not objects"
    return None


def _write_error(path: Path, exc: OSError) -> Exception:
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return StoreReadOnly(path, exc.strerror or str(exc))
    return StoreWriteFailed(path, exc.strerror or str(exc))


class IdTable(Table):
    """Rows keyed by ULID strings."""

    document_id_class = str  # type: ignore[assignment]

    def _get_next_id(self) -> Any:
        raise TypeError("rows of this table are inserted with their own id: Document(row, doc_id=ULID)")

    # TinyDB annotates document ids as int; this table's are str (`document_id_class`), which TinyDB handles
    # alike at run time. These are the only places that pass a str id to it.

    def row(self, doc_id: str) -> Document | None:
        """The row with this id, or None."""
        return self.get(doc_id=doc_id)  # type: ignore[call-overload, no-any-return]  # str ids: see above

    def has(self, doc_id: str) -> bool:
        return self.contains(doc_id=doc_id)  # type: ignore[arg-type]  # str ids: see above

    def update_row(self, doc_id: str, fields: dict[str, Any]) -> None:
        self.update(fields, doc_ids=[doc_id])  # type: ignore[list-item]  # str ids: see above

    def put(self, doc_id: str, row: dict[str, Any]) -> None:
        """Insert or update one row with one read and one write of the file (TinyDB's upsert writes twice when
        inserting, and asking first reads it twice): the file holds every run's row, so each read is the whole
        table, and a run puts its row at each checkpoint."""
        def upsert(table: dict[Any, Any]) -> None:
            if doc_id in table:
                table[doc_id].update(row)
            else:
                table[doc_id] = dict(row)

        self._update_table(upsert)


class TablesDB(TinyDB):
    table_class = IdTable

    def id_table(self, name: str) -> IdTable:
        table = self.table(name)
        assert isinstance(table, IdTable)  # table_class
        return table


def open_tables(path: Path, readonly: bool) -> TablesDB:
    return TablesDB(path, storage=AtomicJSONStorage, readonly=readonly)
