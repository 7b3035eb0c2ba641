"""`Store.grouped`: while an agent drives a run on an event loop, the checkpoints of the run's start and end are
committed (the log's fsync, the runs row, the anchor) once per turn of that loop instead of at each event. Each
event is still written when `append` returns; only making it durable waits, for at most one turn (in a kernel's
`%%agent` cell, `HELD`: until just after the cell's reply). A mixin of `Store` (store.py), kept apart because it
is the one piece of the store that knows about event loops."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from nbagent.events.envelope import chain_key

if TYPE_CHECKING:
    import threading

    from nbagent.store.eventlog import EventLog
    from nbagent.store.locks import Locked

# the checkpoints `grouped` may commit at the end of the loop's turn: a run's start and end, never a wait or a decision
# (a person's yes is durable before the effect it allows)
GROUPED_TYPES = frozenset({"run_started", "run_superseded", "answer_ready", "completed", "completed_with_errors",
                           "interrupted", "error"})

# Set by a kernel's `%%agent` cell for its duration: what `grouped` would commit at the end of a turn
# or of the group waits for the cell's end, and the cell then has that one commit run just after its reply
# (ipython/entry.py). A cell waits for its answer, not for the fsync and the table and anchor writes of its run's
# start and end: on two cores, a commit while the model call was in flight slowed the call itself. Each event is
# in the log when `append` returns, as before; anything that asks (`checkpoint`, `close`) or an event that must be
# durable at once (a decision, a wait) commits everything first, as before.
class Hold:
    """A cell's hold on its commits, on its loop, while it is open (a task the cell started that outlives it sees
    the same object, closed, and commits per turn again)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.open = True


HELD: contextvars.ContextVar[Hold | None] = contextvars.ContextVar("nbagent_commits_held", default=None)


class GroupedCommits:
    """The grouping state and its commit; `Store` provides the log, the lock and the two checkpoint writers."""

    _log: EventLog
    _tlock: threading.RLock
    _group: tuple[asyncio.AbstractEventLoop, int] | None
    _uncommitted: dict[str, dict[str, Any]]  # run -> its last checkpoint record not yet committed

    if TYPE_CHECKING:
        def locked(self) -> Locked: ...
        def _checkpoint(self, run_id: str) -> None: ...
        def _anchor(self, key: str, written: dict[str, Any], *, sync: bool) -> None: ...

    @contextlib.contextmanager
    def grouped(self) -> Iterator[None]:
        """Inside (a run being driven), the checkpoints of a run's start and end made on this event loop
        (GROUPED_TYPES) are committed (the log's fsync, the runs row, the anchor) once the loop's current turn
        ends, and at the end of the group: once for all of one synchronous stretch (an answer and the run's
        end), and the start while the run waits for its model instead of before the request leaves. Each event
        is in the log when `append` returns, as before; only making it durable waits, for at most one turn of
        the loop. Elsewhere (no loop, another thread, a script using the store) every checkpoint is committed at
        once."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            yield
            return
        with self._tlock:
            outer = self._group
            if outer is None or outer[0] is loop:
                self._group = (loop, (outer[1] if outer else 0) + 1)
        try:
            yield
        finally:
            with self._tlock:
                if self._group is not None and self._group[0] is loop:
                    self._group = (loop, self._group[1] - 1) if self._group[1] > 1 else None
            if not self._holding(loop):
                self.commit()

    def _holding(self, loop: asyncio.AbstractEventLoop) -> bool:
        hold = HELD.get()
        return hold is not None and hold.open and hold.loop is loop

    def pending(self) -> bool:
        """Whether checkpoints wait to be committed (`commit`)."""
        return bool(self._uncommitted)

    def _deferring(self) -> bool:
        group = self._group
        if group is None:
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        if loop is not group[0]:
            return False
        if not self._uncommitted and not self._holding(loop):
            loop.call_soon(self._commit_soon)
        return True

    def _commit_soon(self) -> None:
        try:
            self.commit()
        except Exception:  # (a full disk): kept, and the group's own commit raises it in the run, as at once
            return

    def commit(self) -> None:
        """Make every checkpoint `grouped` deferred durable now: one fsync of the log, then each run's row and
        anchor, in the order an immediate checkpoint writes them (the event first, the truth)."""
        with self.locked():
            if not self._uncommitted:
                return
            self._log.sync()
            for run_id, written in list(self._uncommitted.items()):
                self._checkpoint(run_id)
                self._anchor(chain_key(run_id, written["session_id"]), written, sync=False)
                del self._uncommitted[run_id]  # (only once done: a failure leaves it for the next commit)
