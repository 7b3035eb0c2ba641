"""The append-only event log: one JSON line per event, indexed (TinyDB's Table over it: eventtable.py).

Why not TinyDB's JSONStorage: it rewrites the whole file on every insert (0.5 s per insert at 50k documents,
measured here) and corrupts the file with two writers. Here an append is one `write(2)` of one line to an
`O_APPEND` descriptor, under the store's file lock, so its cost does not grow with the log.

Reading is incremental and lazy. The log remembers the byte offset it has read up to and, before any read,
indexes only the complete lines past it (another kernel may have appended). Indexing a line does not parse it:
lines are canonical JSON (sorted keys, so the event's own `run_id`, `seq`, `session_id`, `ts` and `type` are its
last fields), and one regular-expression pass over the new bytes finds each line's chain. The index holds, per
event, its byte range, and per chain its events; an event is parsed when it is read (a chain's events for a run's
state, a query), and the last few thousand parsed or appended events are kept. Reopening a 100k-event log is a
read of the file and that pass (about 0.1-0.2 s and a few MB) instead of parsing every line (1.6 s, 270 MB). A
line that is not canonical (written by hand or by another tool) is parsed when indexed, as every line used to
be. `nbagent verify` reads the file itself and checks every line, hash and link, as before.

Bytes after the last newline are one of two things. If they parse as a JSON object whose seq and prev_hash
continue its chain and whose hash is right, they are a whole event that only lacks its newline (written by
hand, by another tool, or by a writer that stopped between the object and the newline): it is read like any
other, and the next writer adds the newline before its own line, so nothing recorded is lost. Anything else is
a torn tail: a concurrent writer mid-write or the remains of a writer killed mid-write. It is never consumed; a
writer, holding the lock, knows no one else is writing, so it truncates it before appending (those bytes were
never acknowledged to anyone). A line that is not valid JSON in the middle of the file is skipped with a warning
and reported by `nbagent verify`; it never stops the log from opening. (A canonical-looking line damaged inside
its payload is found when it is first read: it is then skipped with the same warning.)

TinyDB doc ids are the 1-based ordinal of the event among the indexed lines, so every process reading the same
file agrees on them. They are positions, not identities: the identity of an event is its ULID `id`.
"""

from __future__ import annotations

import bisect
import errno
import hashlib
import logging
import os
import re
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nbagent.events.envelope import canonical_json, chain_key, compute_hash, load_record
from nbagent.store.errors import StoreReadOnly, StoreWriteFailed
from nbagent.store.regular import open_regular

log = logging.getLogger("nbagent.store")

_READONLY_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM}

# The end of a canonical line: the event's own run_id, seq, session_id, ts and type, then "}" and the newline.
# Anchored on the newline, it can only match the top-level fields (a line holds no raw newline, so nothing nested
# in the payload is followed by one).
_TAIL = re.compile(rb'"run_id":(?:null|"([^"\n]*)"),"seq":\d+,"session_id":"([^"\n]*)","ts":"([^"\n]*)",'
                   rb'"type":"([^"\n]*)"\}\n')
_CHUNK = 8 << 20  # bytes read at once when indexing
TS_WIDTH = 27


class EventLog:
    """The file, an index of its events by chain, the heads of the chains, and a cache of parsed events."""

    # Parsed or appended events kept in memory, the most recently used: at most KEEP of them and KEEP_BYTES of their
    # lines (a parsed event takes about 3-4 times its line in memory, so about 2 MB at most). Bounded by bytes so the
    # cache fills within the first few hundred events and then stays flat; it serves re-reading the current run (a
    # live view rebuilds from the run's events), while a pass over a long run parses each event once either way.
    KEEP = 8192
    KEEP_BYTES = 512 << 10

    def __init__(self, path: Path) -> None:
        self.path = path
        self._starts = array("q")  # ordinal -> byte offset of the event's line
        self._ends = array("q")  # ordinal -> byte offset just after the event's JSON (before its newline)
        self.by_chain: dict[str, list[int]] = {}  # chain key -> ordinals (0-based) in file order
        self.by_type: dict[str, list[int]] = {}  # event type -> ordinals in file order
        # ordinal -> its ts as written, TS_WIDTH bytes each ("2026-11-23T01:38:18.491125Z"); others in _ts_other
        self._ts = bytearray()
        self._ts_other: dict[int, bytes | None] = {}  # another width, or None: not comparable as bytes
        self._heads: dict[str, tuple[int, str]] = {}  # chain key -> (last seq, last hash), when known
        self._cache: OrderedDict[int, dict[str, Any]] = OrderedDict()  # ordinal -> parsed record
        self._cache_bytes = 0  # the line bytes of the cached events
        self._bad: set[int] = set()  # indexed lines that turned out not to parse
        self.warnings: list[str] = []
        self._offset = 0  # bytes consumed: just after a newline, or after a whole event lacking its newline
        self._unterminated = False  # the last event consumed has no newline yet: the next writer adds it
        self._torn_seen: tuple[int, int] | None = None  # (offset, size) of a tail already judged torn
        self._lines = 0  # lines consumed, for messages
        self._fd: int | None = None  # the writer's O_APPEND descriptor
        self._rfd: int | None = None  # a reader's descriptor, held open
        self._size = 0  # the file's size at the last refresh
        # readers take no file lock, but two threads of one process must not index the same bytes twice
        self._mutex = threading.RLock()

    # ------------------------------------------------------------------ reading

    def refresh(self) -> int:
        """Index the complete lines appended since the last call; returns how many events were added."""
        with self._mutex:
            return self._refresh()

    def _reader(self) -> int | None:
        """The held read descriptor; None while the log does not exist. NotAFile (one line, never a wait) when
        `events.jsonl` is a FIFO, a device or a folder."""
        if self._rfd is None:
            try:
                self._rfd = open_regular(self.path)
            except FileNotFoundError:
                return None
        return self._rfd

    def _refresh(self) -> int:
        fd = self._reader()
        if fd is None:
            self._size = 0
            return 0
        try:
            size = self._size = os.fstat(fd).st_size
        except OSError:
            self._size = 0
            return 0
        if size <= self._offset or self._torn_seen == (self._offset, size):
            return 0
        added = 0
        while self._offset < size:
            data = os.pread(fd, min(_CHUNK, size - self._offset), self._offset)
            if not data:
                break
            if self._unterminated:
                self._unterminated = False
                if data.startswith(b"\n"):  # the newline the last event lacked: not a line of its own
                    self._offset += 1
                    continue
            end = data.rfind(b"\n")
            if end < 0:
                if self._offset + len(data) < size:  # a line longer than a chunk: read it whole
                    data = os.pread(fd, size - self._offset, self._offset)
                    end = data.rfind(b"\n")
                if end < 0:
                    added += self._take_unterminated(data, size)
                    break
            added += self._index(data, end + 1)
            self._offset += end + 1
        return added

    def _index(self, data: bytes, stop: int) -> int:
        """Index the complete lines in data[:stop] (which ends with a newline), read from self._offset."""
        found = _TAIL.findall(data, 0, stop)
        base = self._offset
        if len(found) != data.count(b"\n", 0, stop):
            return self._index_slowly(data, stop)  # a line that is not canonical (or blank): parse line by line
        starts, ends, by_chain, by_type, heads, stamps = (self._starts, self._ends, self.by_chain, self.by_type,
                                                          self._heads, self._ts)
        keys: dict[tuple[bytes, bytes], str] = {}
        kinds: dict[bytes, list[int]] = {}
        find = data.find
        pos = 0
        i = len(starts)
        for run, session, ts, kind in found:
            key = keys.get((run, session))
            if key is None:
                key = keys[(run, session)] = run.decode() if run else "session:" + session.decode()
            nl = find(b"\n", pos)
            starts.append(base + pos)
            ends.append(base + nl)
            chain = by_chain.get(key)
            if chain is None:
                chain = by_chain[key] = []
            chain.append(i)
            same = kinds.get(kind)
            if same is None:
                name = kind.decode("utf-8", "replace")
                same = kinds[kind] = by_type.setdefault(name if b"\\" not in kind else "", [])
            same.append(i)
            if len(ts) == TS_WIDTH and ts.isascii() and b"\\" not in ts:
                stamps += ts
            else:
                stamps += bytes(TS_WIDTH)
                self._ts_other[i] = ts if ts.isascii() and b"\\" not in ts else None
            pos = nl + 1
            i += 1
        for key in keys.values():
            heads.pop(key, None)  # known again when needed (the chain's last event)
        self._lines += len(found)
        return len(found)

    def _index_slowly(self, data: bytes, stop: int) -> int:
        added = 0
        pos = 0
        while pos < stop:
            nl = data.find(b"\n", pos, stop)
            line = data[pos:nl]
            self._lines += 1
            if line.strip():
                try:
                    record = load_record(line)
                except ValueError as exc:
                    self._warn(f"{self.path}: line {self._lines} is not a valid event ({exc}); skipped")
                else:
                    self._add(record, self._offset + pos, self._offset + nl)
                    added += 1
            pos = nl + 1
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
        self._add(record, self._offset, self._offset + len(tail))
        self._offset += len(tail)
        self._unterminated = True
        return 1

    def head(self, key: str) -> tuple[int, str | None]:
        """The chain's last (seq, hash); (0, None) for a chain with no event yet."""
        known = self._heads.get(key)
        if known is not None:
            return known
        for i in reversed(self.by_chain.get(key, ())):
            record = self.record(i)
            if record is not None:
                head = self._heads[key] = (record.get("seq", 0), record.get("hash", ""))
                return head
        return 0, None

    def _chains_on(self, record: dict[str, Any]) -> bool:
        """A whole event: right hash, and seq and prev_hash continue its chain's head."""
        try:
            key = chain_key(record.get("run_id"), record["session_id"])
            last_seq, last_hash = self.head(key)
            return (record.get("seq") == last_seq + 1 and record.get("prev_hash") == last_hash
                    and record.get("hash") == compute_hash(record))
        except (KeyError, TypeError, ValueError):
            return False

    def record(self, i: int, *, keep: bool = True) -> dict[str, Any] | None:
        """Event `i` (0-based ordinal), parsed from the file unless kept; None if its line does not parse."""
        cache = self._cache
        record = cache.get(i)
        if record is not None:
            return record
        if i in self._bad:
            return None
        with self._mutex:
            fd = self._reader()
            start, end = self._starts[i], self._ends[i]
            line = os.pread(fd, end - start, start) if fd is not None else b""
            try:
                record = load_record(line)
            except ValueError as exc:
                self._bad.add(i)
                self._unindex(i)
                self._warn(f"{self.path}: event {i + 1} (at byte {start}) is not a valid event ({exc}); skipped")
                return None
            if keep:
                self._keep(i, record)
        return record

    def _unindex(self, i: int) -> None:
        """Take a line found damaged out of its chain and type lists (positions in a chain count events that
        parse, as run states do), as if it had been skipped when indexed."""
        for lists in (self.by_chain, self.by_type):
            for key, ordinals in lists.items():
                at = bisect.bisect_left(ordinals, i)
                if at < len(ordinals) and ordinals[at] == i:
                    del ordinals[at]
                    if lists is self.by_chain:
                        self._heads.pop(key, None)
                    break

    def _keep(self, i: int, record: dict[str, Any]) -> None:
        cache = self._cache
        if i in cache:
            cache.move_to_end(i)
        else:
            self._cache_bytes += self._ends[i] - self._starts[i]
        cache[i] = record
        if len(cache) > self.KEEP or self._cache_bytes > self.KEEP_BYTES:
            starts, ends = self._starts, self._ends
            while len(cache) > 1 and (len(cache) > self.KEEP or self._cache_bytes > self.KEEP_BYTES):
                old, _ = cache.popitem(last=False)
                self._cache_bytes -= ends[old] - starts[old]

    def count(self) -> int:
        """Events indexed so far (read or written)."""
        return len(self._starts)

    def select(self, types: Iterable[str] | None = None, since: str | None = None, until: str | None = None
               ) -> list[int] | None:
        """The events that can be of one of `types` with a `ts` in [since, until], in log order, from the index
        alone; None when no filter is given (read them all). Callers still test each candidate: an event whose
        type or ts the index could not hold as written is always a candidate."""
        wanted = None if types is None else set(types)
        lo = since.encode() if since is not None and since.isascii() else None
        hi = until.encode() if until is not None and until.isascii() else None
        if wanted is None and lo is None and hi is None:
            return None
        out: Iterable[int]
        if wanted is None:
            out = range(len(self._starts))
        else:
            lists = [lst for t in (*wanted, "") if (lst := self.by_type.get(t))]  # "": types not indexable
            out = lists[0] if len(lists) == 1 else sorted(i for lst in lists for i in lst)
        if lo is not None or hi is not None:
            stamps, other, w = self._ts, self._ts_other, TS_WIDTH

            def fits(i: int) -> bool:
                ts = other.get(i, b"") if i in other else bytes(stamps[i * w:(i + 1) * w])
                return ts is None or ((lo is None or ts >= lo) and (hi is None or ts <= hi))

            out = [i for i in out if fits(i)]
        return list(out)

    def chain_len(self, key: str) -> int:
        return len(self.by_chain.get(key, ()))

    def chain(self, key: str, start: int = 0) -> list[dict[str, Any]]:
        """A chain's events from position `start` on (callers refresh first)."""
        ids = self.by_chain.get(key, ())
        if start >= len(ids):
            return []
        out = []
        for i in ids[start:]:
            record = self.record(i)
            if record is not None:
                out.append(record)
        return out

    def first(self, key: str) -> dict[str, Any] | None:
        for i in self.by_chain.get(key, ()):
            record = self.record(i)
            if record is not None:
                return record
        return None

    def torn_tail(self) -> int:
        """Bytes after the last complete line (a crash mid-write, or a writer mid-write)."""
        try:
            return max(0, os.lstat(self.path).st_size - self._offset)
        except FileNotFoundError:
            return 0

    def _add(self, record: dict[str, Any], start: int, end: int) -> None:
        i = len(self._starts)
        self._starts.append(start)
        self._ends.append(end)
        key = chain_key(record.get("run_id"), record.get("session_id", ""))
        self.by_chain.setdefault(key, []).append(i)
        kind, ts = record.get("type"), record.get("ts")
        self.by_type.setdefault(kind if isinstance(kind, str) else "", []).append(i)
        raw = ts.encode() if isinstance(ts, str) and ts.isascii() else None
        if raw is not None and len(raw) == TS_WIDTH:
            self._ts += raw
        else:
            self._ts += bytes(TS_WIDTH)
            self._ts_other[i] = raw
        self._heads[key] = (record.get("seq", 0), record.get("hash", ""))
        self._keep(i, record)

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
        last_seq, last_hash = self.head(key)
        record = dict(record, seq=last_seq + 1, prev_hash=last_hash)
        # the canonical JSON of the record without its hash is what the hash covers (events.compute_hash), and
        # "hash" sorts first: the line is that JSON with the hash put in front (one serialisation, not two)
        body = {k: v for k, v in record.items() if k != "hash"} if "hash" in record else dict(record)
        data = canonical_json(body).encode("utf-8")  # (encoded once: hashed, then written)
        hasher = hashlib.sha256((last_hash or "").encode("utf-8"))
        hasher.update(data)
        digest = hasher.hexdigest()
        record["hash"] = digest
        if min(body) > "hash":
            line = b'{"hash":"' + digest.encode("ascii") + b'",' + data[1:] + b"\n"
        else:  # a field that sorts before "hash": serialise the whole record
            line = (canonical_json(record) + "\n").encode("utf-8")
        start = self._offset
        if self._unterminated:  # complete the last event's line in the same write(2)
            line = b"\n" + line
            start += 1
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
        self._add(record, start, self._offset - 1)
        return record

    def sync(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def _writer(self) -> int:
        """The O_APPEND descriptor; never through a link (IsALink), so a shipped `events.jsonl -> elsewhere` is
        refused, not created or appended to."""
        if self._fd is None:
            try:
                self._fd = open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            except OSError as exc:
                if exc.errno in _READONLY_ERRNOS:
                    raise StoreReadOnly(self.path, exc.strerror or str(exc)) from exc
                raise StoreWriteFailed(self.path, exc.strerror or str(exc)) from exc
        return self._fd

    def _repair_torn_tail(self, torn: int) -> None:
        """Cut `torn` bytes past the last complete line (the size the refresh just saw: one stat per append).
        Through the descriptor, never the path (which could have become a link meanwhile)."""
        if torn:
            self._warn(
                f"{self.path}: removed an incomplete last line ({torn} bytes) left by a writer that stopped "
                "mid-write; it was never acknowledged"
            )
            os.ftruncate(self._writer(), self._offset)
            self._torn_seen = None

    def _rollback(self) -> None:
        """Cut a partly written line so a failed append (disk full) leaves the log exactly as it was."""
        try:
            if self._fd is not None:
                os.ftruncate(self._fd, self._offset)
        except OSError:
            pass  # the next writer's torn-tail repair will do it

    def close(self) -> None:
        for fd in (self._fd, self._rfd):
            if fd is not None:
                os.close(fd)
        self._fd = self._rfd = None
