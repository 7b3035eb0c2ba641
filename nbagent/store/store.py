"""The store: one per notebook, a folder beside it (`analysis.ipynb` -> `analysis.nbagent/`).

    analysis.nbagent/
      meta.json      format and version; a newer format is refused, never half-read
      events.jsonl   the append-only, hash-chained event log (eventlog.py): the truth
      tables.json    sessions and runs (tables.py): a cache for queries, rewritten atomically
      lock           the file lock every writer takes (two kernels on one notebook)

Writers take a process-local re-entrant lock and then the file lock, so threads and processes are serialised
the same way. Readers take no lock: appends are whole lines and table writes are atomic renames, so a reader
always sees a consistent prefix. That is also what lets the CLI read a store on a read-only disk.

Run state is derived from events (`nbagent.events.state`), kept current incrementally per run, and written to the
runs table at checkpoints (waits, decisions, ends), together with the chain's last seq and hash, which lets
`verify` notice a log truncated after that checkpoint. A session's own chain (grants, revokes) is checkpointed the
same way in its sessions row, at every event of it (rare: a run's events never write the sessions table), so a
deleted `grant_revoked` is caught too.

While an agent drives a run on an event loop (`Store.grouped`; durability "checkpoint", the default), the
checkpoints of a run's start and end (GROUPED_TYPES) are committed once per turn of that loop: each event is written
to the log when `append` returns, and its fsync, row and anchor follow when the turn ends (the run's start while its
first request is in flight; its answer and its end in one commit). Waits and decisions are committed at once.

Every file of the folder is read only if it is a regular file (`regular.py`): a FIFO in a file's place is a
one-line `NotAFile`, never a reader waiting forever. Nothing inside the folder is followed if it is a symbolic link
(`IsALink`: files opened with O_NOFOLLOW, folders checked with lstat), and the store folder itself must not be a
link either (`StoreFolderIsALink`, for readers and writers alike): a repository that ships links there cannot send the
log or the saved contents anywhere else.

Each chain's head is also written outside the project, to this user's anchor of the store (`anchor.py`): at every
event of a session's chain and at each run checkpoint. A chain shorter than its anchor is cut, whatever the tables
say (`integrity.chain_sound`, `nbagent verify`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from pydantic import ValidationError
from tinydb import Query

from nbagent.events.ids import new_id, now_iso
from nbagent.events.levels import Autonomy
from nbagent.events.model import (
    CHECKPOINT_TYPES,
    EVENT_MODELS,
    PAYLOADS,
    EventBase,
    Payload,
    RunStarted,
    SessionCreated,
    chain_key,
    parse_event,
)
from nbagent.events.state import RunState
from nbagent.store.anchor import Anchor
from nbagent.store.commits import GROUPED_TYPES, GroupedCommits
from nbagent.store.errors import (
    RunNotFound,
    StoreError,
    StoreReadOnly,
)
from nbagent.store.eventlog import EventLog
from nbagent.store.eventtable import EventTable
from nbagent.store.leases import Leases
from nbagent.store.locks import HeldLock, Locked, fcntl
from nbagent.store.meta import FORMAT, FORMAT_VERSION, check_meta, create_or_check
from nbagent.store.queries import EventQueries
from nbagent.store.records import RunRecord, SessionRecord, current_record, put_row, run_row, session_record
from nbagent.store.tables import AtomicJSONStorage, open_tables

STORE_SUFFIX = ".nbagent"
LOCK_TIMEOUT_S = 30.0
# When appends are made durable (fsync): "checkpoint" (the default) at waits, decisions and ends; "step" also at the
# end of every model turn and every tool call, one fsync covering the step's events (group commit: a power loss
# loses at most the step in progress, as LangGraph's checkpoint per super-step); "event" at every event.
DURABILITY = ("checkpoint", "step", "event")
STEP_END_TYPES = frozenset({"llm_called", "tool_call_completed", "tool_call_failed", "authorization_denied"})


def store_path_for(notebook: str | Path) -> Path:
    """Where a notebook's store lives: beside it, same stem."""
    nb = Path(notebook)
    return nb.with_name(nb.stem + STORE_SUFFIX)


class Store(GroupedCommits, EventQueries):
    """One notebook's store: the event log (the truth), the tables that cache it, and the runs' folded state.

    Writers go through `append` (every event: hash-chained, under the store's lock), `create_session` and
    `create_run`; readers through `run_state`, `run_events`, `query_events`, `count_events`, `session_events`,
    `list_runs` and the like, never through the log's files or TinyDB queries of their own.

    Args:
        path: the store folder (`analysis.nbagent`), or the notebook (`analysis.ipynb`: its store beside it).
        readonly: open without ever writing (no lock, no folder created): what `nbagent show` and `verify` use;
            a write raises StoreReadOnly.
        durability: when appends are fsynced: "checkpoint" (the default), "step" or "event" (DURABILITY);
            None: NBAGENT_DURABILITY, else "checkpoint".

    Raises:
        NotAStore, NewerFormat, StoreFolderIsALink, StoreReadOnly: the folder cannot be used as a store.
        ValueError: an unknown durability.
    """

    def __init__(self, path: str | Path, *, readonly: bool = False, durability: str | None = None) -> None:
        durability = durability or os.environ.get("NBAGENT_DURABILITY") or "checkpoint"
        if durability not in DURABILITY:
            raise ValueError(f"durability must be one of {', '.join(DURABILITY)} (NBAGENT_DURABILITY), "
                             f"not {durability!r}")
        self.durability = durability
        path = Path(path)
        if path.suffix == ".ipynb":
            path = store_path_for(path)
        self.path = path
        self.readonly = readonly
        self.events_path = path / "events.jsonl"
        self.tables_path = path / "tables.json"
        self.meta: dict[str, Any] = check_meta(path) if readonly else create_or_check(path)
        # who this store is, for its anchor: a store made again at the same place is another one
        self.identity = str(self.meta.get("id") or self.meta.get("created_at") or "")
        self.anchors = Anchor(path, self.identity)
        self._tlock = threading.RLock()
        self.leases = Leases(path, readonly=readonly)  # runs being driven (create_run takes one)
        self._flock: HeldLock | FileLock = (
            HeldLock(str(path / "lock"), LOCK_TIMEOUT_S) if fcntl is not None
            else FileLock(str(path / "lock"), thread_local=False, timeout=LOCK_TIMEOUT_S))
        self._run_sessions: dict[str, str] = {}  # run id -> its session (never changes)
        self._fold = threading.Lock()  # folding events into self._states
        self._log = EventLog(self.events_path)
        self.events = EventTable(self._log)
        self._db = open_tables(self.tables_path, readonly)
        self._tables_storage: AtomicJSONStorage = self._db.storage  # type: ignore[assignment]
        self._tables_storage.rebuild = self._rebuilt_tables
        self._tables_storage.on_damage = self._log._warn
        self.sessions = self._db.id_table("sessions")
        self.runs = self._db.id_table("runs")
        self._states: dict[str, RunState] = {}
        self._group = None  # commits.py: the loop a run is grouped on, and how deep
        self._uncommitted = {}
        self._heads_seen: tuple[Any, dict[str, tuple[int, str | None]]] | None = None  # (tables.json, checkpoints)
        self.verified: dict[str, tuple[int, str | None]] = {}  # chain -> (events, last hash) checked by grants.vouched
        if not readonly:
            self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """Temp files of table writes killed before their rename; under the lock none can be in progress."""
        with self.locked():
            for leftover in self.path.glob(".tables-*.tmp"):
                leftover.unlink(missing_ok=True)

    def locked(self) -> Locked:
        """Exclusive write access across threads and processes; re-entrant (`with store.locked(): ...`)."""
        if self.readonly:
            raise StoreReadOnly(self.path, "the store was opened read-only")
        return Locked(self)

    def _acquire(self) -> None:
        self._tlock.acquire()
        try:
            self._flock.acquire()
        except Timeout as exc:
            self._tlock.release()
            raise StoreError(
                f"{self.path}: another process has held the store's lock for {LOCK_TIMEOUT_S:.0f} s; "
                "if no kernel is using this notebook, delete the file 'lock' in that folder"
            ) from exc
        except OSError as exc:
            self._tlock.release()
            raise StoreReadOnly(self.path, f"cannot create the lock file: {exc.strerror or exc}") from exc
        except BaseException:
            self._tlock.release()
            raise

    def _release(self) -> None:
        try:
            self._flock.release()
        finally:
            self._tlock.release()

    def close(self) -> None:
        if self._uncommitted and not self.readonly:
            self.commit()
        self._log.close()
        self.anchors.close()
        if isinstance(self._flock, HeldLock):
            self._flock.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def warnings(self) -> list[str]:
        return self._log.warnings

    def tables_problem(self) -> str | None:
        """Why `tables.json` cannot be used as it is on disk (then it is rebuilt from the events), or None."""
        return self._tables_storage.problem()

    def checkpoint(self, key: str) -> tuple[int, str | None] | None:
        """A chain's checkpoint (last seq, hash) as the tables keep it: a run's row, or a session's (`session:ID`);
        None when there is none (a session row written before sessions were checkpointed). Read once per version of
        tables.json, not once per grant checked (`grants.vouched`)."""
        if self._uncommitted:
            self.commit()
        try:
            st = os.lstat(self.tables_path)
            sig: Any = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            sig = None
        if self._heads_seen is None or self._heads_seen[0] != sig or sig is None:
            heads = {}
            for table, prefix in ((self.runs, ""), (self.sessions, "session:")):
                for row in table.all():
                    seq, last_hash = row.get("last_seq"), row.get("last_hash")
                    if isinstance(seq, int) and not isinstance(seq, bool) and seq > 0:
                        heads[prefix + str(row.doc_id)] = (seq, last_hash if isinstance(last_hash, str) else None)
            self._heads_seen = (sig, heads)
        return self._heads_seen[1].get(key)

    def _rebuilt_tables(self) -> dict[str, dict[str, Any]]:
        """The sessions and runs tables as the event log says they are (when tables.json is damaged)."""
        sessions: dict[str, Any] = {}
        runs = {run_id: run_row(self.run_state(run_id)).model_dump(mode="json")
                for run_id in self.run_ids()}  # run_ids refreshes the log
        for key in list(self._log.by_chain):
            rec = session_record(self._log.first(key)) if key.startswith("session:") else None
            if rec is None:
                continue
            last_seq, last_hash = self._log.head(key)
            sessions[rec.id] = rec.model_copy(update={"last_seq": last_seq, "last_hash": last_hash}).model_dump(
                mode="json")
        return {"sessions": sessions, "runs": runs}

    # ------------------------------------------------------------------ writing

    def append(
        self,
        payload: Payload,
        *,
        run_id: str | None = None,
        session_id: str | None = None,
        parent_event_id: str | None = None,
        sync: bool | None = None,
        payload_json: dict[str, Any] | None = None,
    ) -> EventBase:
        """Record one event; returns it with its seq and hash. Durable (fsync) at checkpoints by default; see
        DURABILITY for the store's setting (`Store(durability=...)` or NBAGENT_DURABILITY).

        `payload_json`: the payload as `payload.model_dump(mode="json", fallback=repr)` gives it, from a caller
        that has it already and whose `payload` is `type(payload).model_validate(payload_json)` (the runtime
        dumps, redacts and validates every payload: dumping it again here gave the same dict, and parsing the
        written record gave an equal payload). It is written as given, and the event returned holds `payload`."""
        with self.locked():
            if session_id is None:
                if run_id is None:
                    raise ValueError("an event needs a run_id or a session_id")
                session_id = self._session_of(run_id)
            record = {
                "id": new_id(),
                "session_id": session_id,
                "run_id": run_id,
                "type": payload.event_type,
                "ts": now_iso(),
                "parent_event_id": parent_event_id,
                "payload": payload.model_dump(mode="json", fallback=repr) if payload_json is None else payload_json,
            }
            durable = sync if sync is not None else (
                payload.event_type in CHECKPOINT_TYPES or self.durability == "event" or run_id is None
                or (self.durability == "step" and payload.event_type in STEP_END_TYPES))
            later = durable and sync is None and run_id is not None and payload.event_type in GROUPED_TYPES \
                and self.durability == "checkpoint" and self._deferring()  # ("event"/"step" promise more)
            written = self._log.append(record, sync=durable and not later)
            model = EVENT_MODELS.get(payload.event_type) if payload_json is not None else None
            if model is not None and type(payload) is PAYLOADS[payload.event_type]:
                # what parse_event(written) gives, without validating the payload a second time
                event = model.model_validate({**written, "payload": payload})
            else:
                event = parse_event(written)
            if run_id is not None:
                self._run_sessions.setdefault(run_id, session_id)
                with self._fold:  # the run's state is folded up to this event: apply it (no second parse)
                    state = self._states.get(run_id)
                    if state is not None and state.event_count == self._log.chain_len(run_id) - 1:
                        state.apply(event)
            if later:
                assert run_id is not None
                self._uncommitted[run_id] = written
                return event
            if run_id is not None and payload.event_type in CHECKPOINT_TYPES:
                self._uncommitted.pop(run_id, None)  # this one commits the run's head now: what waited is covered
                self._checkpoint(run_id)
            elif run_id is None and payload.event_type != "session_created":  # (create_session writes its row)
                self._checkpoint_session(session_id, written)
            if durable and (run_id is None or payload.event_type in CHECKPOINT_TYPES):
                self._anchor(chain_key(run_id, session_id), written, sync=run_id is None)
            return event

    def anchored(self, key: str) -> tuple[int, str] | None:
        """The chain's head (seq, hash) as this user's anchor, outside the project, saw it; None if none."""
        return self.anchors.get(key)

    def _anchor(self, key: str, written: dict[str, Any], *, sync: bool) -> None:
        """Write the chain's new head to this user's anchor (anchor.py: `Anchor.advance`)."""
        self.anchors.advance(key, written, sync=sync, doc_at=self.events.doc_at, warn=self._log._warn,
                             store_path=self.path)

    def lease(self, run_id: str) -> FileLock:
        """The lock a process holds while it drives a run (leases.py: `Leases.lease`)."""
        return self.leases.lease(run_id)

    def release_lease(self, run_id: str, lock: FileLock | None = None) -> None:
        """Release one hold of a run's lease (nested holds count), forgetting it once it is free."""
        self.leases.release(run_id, lock)

    def in_progress(self, run_id: str) -> bool:
        """True while another driver holds the run's lease (another process, or another store object)."""
        return self.leases.in_progress(run_id)

    def sync(self) -> None:
        """Flush appended events to disk (fsync); the runtime calls this at step boundaries."""
        with self.locked():
            self._log.sync()

    def create_session(
        self, name: str = "default", *, notebook: str | None = None, defaults: dict[str, Any] | None = None
    ) -> SessionRecord:
        with self.locked():
            rec = SessionRecord(id=new_id(), name=name, notebook=notebook, created_at=now_iso(),
                                defaults=defaults or {})
            first = self.append(SessionCreated(name=name, notebook=notebook, defaults=rec.defaults),
                                session_id=rec.id, sync=True)
            rec = rec.model_copy(update={"last_seq": first.seq, "last_hash": first.hash})
            put_row(self.sessions, rec.id, rec.model_dump(mode="json"))
            return rec

    def session(self, name: str = "default", *, notebook: str | None = None) -> SessionRecord:
        """The session with this name, created if missing (one default session per notebook)."""
        with self.locked():
            for doc in sorted(self.sessions.search(Query().name == name), key=lambda d: str(d.doc_id)):
                try:
                    return SessionRecord.model_validate(doc)
                except ValidationError:
                    continue  # a damaged cached row: the event log has the session; look further
            return self.create_session(name, notebook=notebook)

    def session_names(self) -> dict[str, str]:
        """Every session's id and name (the cached table: a damaged row is left out, the log still has it)."""
        return {str(d["id"]): str(d["name"]) for d in self.sessions.all() if "id" in d and "name" in d}

    def get_session(self, session_id: str) -> SessionRecord:
        doc = self.sessions.row(session_id)
        if doc is None:
            raise StoreError(f"{self.path}: no session {session_id!r}")
        return SessionRecord.model_validate(doc)

    def create_run(
        self,
        session_id: str,
        prompt: str,
        *,
        model: str | None = None,
        autonomy: Autonomy | str = Autonomy.L1,
        cell_id: str | None = None,
        previous_run_id: str | None = None,
        parent_run_id: str | None = None,
        options: dict[str, Any] | None = None,
        lease: bool = False,
    ) -> RunRecord:
        """A new run; with `lease=True` its lease is taken before the run exists in the log, so no other process
        can ever see it unleased (a fork would otherwise supersede it in that gap): release it with
        `store.lease(run_id).release()` once the run is driven, or let `Agent` do that."""
        run_id = new_id()
        if lease:
            self.leases.take(run_id)
        started = RunStarted(
            prompt=prompt, model=model, autonomy=Autonomy(autonomy), cell_id=cell_id,
            previous_run_id=previous_run_id, parent_run_id=parent_run_id, options=options or {},
        )
        # The event first (the truth), then the cached row: a crash in between leaves a run the event log
        # knows and the next checkpoint re-creates the row.
        self.append(started, run_id=run_id, session_id=session_id)
        return self.get_run(run_id)

    def _checkpoint_session(self, session_id: str, written: dict[str, Any]) -> None:
        """Keep the session's chain head in its row (events of a session's own chain are rare: grants, revokes,
        resumes), so that `verify` catches events removed from its end, as the runs table does for runs. A
        session with no row yet gets one from its `session_created` event."""
        head = {"last_seq": written["seq"], "last_hash": written["hash"]}
        if self.sessions.has(session_id):
            self.sessions.update_row(session_id, head)
            return
        rec = session_record(self._log.first(f"session:{session_id}"))
        if rec is not None:
            put_row(self.sessions, session_id, {**rec.model_dump(mode="json"), **head})

    def _checkpoint(self, run_id: str) -> None:
        state = self.run_state(run_id)
        row = run_row(state)
        put_row(self.runs, run_id, row.model_dump(mode="json"))

    def _session_of(self, run_id: str) -> str:
        known = self._run_sessions.get(run_id)
        if known is not None:
            return known
        self._log.refresh()
        first = self._log.first(run_id)
        if first is not None:
            self._run_sessions[run_id] = str(first["session_id"])
            return str(first["session_id"])
        row = self.runs.row(run_id)
        if row is None:
            raise RunNotFound(run_id, self.path)
        return str(row["session_id"])

    def run_ids(self) -> list[str]:
        """Every run the log knows, oldest first (ULIDs sort by time)."""
        self.events.docs_for_chain("")  # refresh
        return sorted(k for k in self._log.by_chain if not k.startswith("session:"))

    def resolve_run(self, run_id: str) -> str:
        """A full run id from an id or a unique prefix of one (as git does for commits)."""
        ids = self.run_ids()
        if run_id in ids:
            return run_id
        matches = [r for r in ids if r.startswith(run_id.upper())] if run_id else []
        if len(matches) == 1:
            return matches[0]
        raise RunNotFound(run_id, self.path, "ambiguous run id prefix" if matches else "no such run")

    def run_state(self, run_id: str) -> RunState:
        """The run's state, folded from its events; kept current incrementally."""
        run_id = run_id if run_id in self._states else self.resolve_run(run_id)
        self._log.refresh()
        return self._folded(run_id)

    def run_states(self, run_ids: Iterable[str]) -> list[RunState]:
        """`run_state` of each, the log read once for all (a per-cell look at every run stays ~1 µs a run)."""
        self._log.refresh()
        return [self._folded(r if r in self._states else self.resolve_run(r)) for r in run_ids]

    def _folded(self, run_id: str) -> RunState:
        """The state of a full run id with every event indexed so far applied (callers refresh first)."""
        with self._fold:
            state = self._states.get(run_id)
            if state is None:
                state = self._states[run_id] = RunState()
            if state.event_count < self._log.chain_len(run_id):
                for record in self._log.chain(run_id, state.event_count):
                    state.apply(parse_event(record))
        return state

    def get_run(self, run_id: str) -> RunRecord:
        state = self.run_state(run_id)
        return current_record(state, self.runs.row(state.run_id) if state.run_id is not None else None)

    def session_states(self, session_id: str | None = None) -> list[RunState]:
        """The folded states of the session's runs (every run's with None), oldest first, each with its run id:
        what `list_runs` gives, without a record built and validated for each run (a per-cell question about a few
        of them)."""
        return [s for s in self.run_states(self.run_ids())
                if s.run_id is not None and (session_id is None or s.session_id == session_id)]

    def list_runs(self, session_id: str | None = None) -> list[RunRecord]:
        # the session's runs by their events, then one read of the table for their rows (not one read per run)
        states = self.session_states(session_id)
        rows = {str(doc.doc_id): doc for doc in self.runs.all()} if states else {}
        return [current_record(s, rows.get(s.run_id) if s.run_id is not None else None) for s in states]


__all__ = ["DURABILITY", "FORMAT", "FORMAT_VERSION", "STORE_SUFFIX", "RunRecord", "SessionRecord", "Store",
           "store_path_for"]
