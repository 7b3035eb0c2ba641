"""TinyDB's Table over the event log (eventlog.py): `search`, `get`, `count` and `Query` work on it, and its own
reads (`matching`, `docs_for_chain`) use the log's index; every mutation is refused (Store.append is the one way
in). TinyDB doc ids are the 1-based ordinal of the event among the indexed lines."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from tinydb.storages import Storage
from tinydb.table import Document, Table

from nbagent.store.errors import AppendOnly
from nbagent.store.eventlog import EventLog


class EventDocs(Mapping[str, dict[str, Any]]):
    """`str(doc_id) -> raw event dict` over the index, parsing on access (what TinyDB's Table reads)."""

    def __init__(self, log_: EventLog) -> None:
        self._log = log_

    def __getitem__(self, doc_id: str) -> dict[str, Any]:
        try:
            i = int(doc_id) - 1
        except (TypeError, ValueError):
            raise KeyError(doc_id) from None
        if not 0 <= i < len(self._log._starts):
            raise KeyError(doc_id)
        record = self._log.record(i, keep=False)
        if record is None:
            raise KeyError(doc_id)
        return record

    def __iter__(self) -> Iterator[str]:
        return (str(i + 1) for i in range(len(self._log._starts)))

    def __len__(self) -> int:
        return len(self._log._starts)

    def items(self) -> Iterator[tuple[str, dict[str, Any]]]:  # type: ignore[override]
        for i in range(len(self._log._starts)):
            record = self._log.record(i, keep=False)
            if record is not None:
                yield str(i + 1), record


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
        self._docs = EventDocs(log_)
        self._before_read = before_read
        self._cached_at = -1  # events in the log when the query cache was last valid

    def _sync(self) -> None:
        if self._before_read is not None:
            self._before_read()
        self._log.refresh()
        # TinyDB caches query results: drop them whenever the log grew, by another process (refresh) or by this
        # one's own appends (which refresh does not count), or a search after an append answers from before it
        if len(self._docs) != self._cached_at:
            self._cached_at = len(self._docs)
            self.clear_cache()

    def _read_table(self) -> EventDocs:  # type: ignore[override]  # TinyDB annotates a dict; it reads a Mapping
        self._sync()
        return self._docs

    def search(self, cond: Any) -> list[Document]:
        self._sync()
        return super().search(cond)

    def matching(self, types: Iterable[str] | None = None, since: str | None = None, until: str | None = None,
                 keep: Callable[[dict[str, Any]], bool] | None = None) -> list[dict[str, Any]]:
        """The events of one of `types` with a `ts` in [since, until] for which `keep` (if given) is true, in log
        order: only the events the index says can match are read (EventLog.select)."""
        self._sync()
        wanted = None if types is None else set(types)

        def fits(d: dict[str, Any]) -> bool:
            if wanted is not None and d.get("type") not in wanted:
                return False
            if since is not None and not ("ts" in d and d["ts"] >= since):
                return False
            if until is not None and not ("ts" in d and d["ts"] <= until):
                return False
            return keep is None or keep(d)

        candidates = self._log.select(wanted, since, until)
        if candidates is None:
            return [d for _, d in self._docs.items() if fits(d)]
        out = []
        for i in candidates:
            record = self._log.record(i, keep=False)
            if record is not None and fits(record):
                out.append(record)
        return out

    def docs_for_chain(self, key: str, start: int = 0) -> list[dict[str, Any]]:
        """Fast path for one run's events (from position `start` on): an index lookup instead of a scan."""
        self._sync()
        return self._log.chain(key, start)

    def doc_at(self, key: str, position: int) -> dict[str, Any] | None:
        """The chain's event at this 0-based position (as `docs_for_chain` counts), read alone; None if none."""
        ids = self._log.by_chain.get(key, ())
        return self._log.record(ids[position]) if 0 <= position < len(ids) else None

    def chain_len(self, key: str) -> int:
        """How many events a chain has (after the same refresh as `docs_for_chain`), without reading them; once
        they have been read, as many as `docs_for_chain` returns (a line found damaged leaves its chain)."""
        self._sync()
        return self._log.chain_len(key)

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


__all__ = ["EventTable"]
