"""Run leases: the lock a process holds while it drives a run (`leases/RUN.lock` in the store folder).

A second process driving the same run, or a fork superseding it, can tell that the run is in progress somewhere;
the OS drops the lock when the process dies, so a crashed run is never left "in progress". A lease taken with a
new run is taken before the run exists in the log (`Store.create_run(lease=True)`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from filelock import FileLock, Timeout

from nbagent.store.errors import IsALink, NotAFile
from nbagent.store.regular import folder, kind, link_target


class Leases:
    """The leases of one store, as this process holds them (one lock object per run, so holding it again here
    nests instead of blocking)."""

    def __init__(self, path: Path, *, readonly: bool) -> None:
        self.path = path
        self.readonly = readonly
        self.held: dict[str, FileLock] = {}  # leases taken by create_run, held by this process

    def take(self, run_id: str) -> None:
        """Take a new run's lease and keep it as held (released by `release` once the run is driven)."""
        self.held[run_id] = held = self.lease(run_id)
        held.acquire()

    def lease(self, run_id: str) -> FileLock:
        """The lock a process holds while it drives a run (acquire with timeout 0): a second process driving the
        same run, or a fork superseding it, can tell that it is in progress somewhere. The OS drops it when the
        process dies, so a crashed run is never left "in progress". One lock object per run in a process, so
        acquiring it again here nests instead of blocking."""
        held = self.held.get(run_id)
        if held is not None:
            return held
        leases = self.path / "leases"
        folder(leases, create=True)  # never through a link (IsALink)
        path = leases / f"{run_id}.lock"
        with contextlib.suppress(FileNotFoundError):  # a FIFO, a folder or a link there: one clear line
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):  # (filelock would create or lock its target)
                raise IsALink(path, link_target(path) or "?")
            if not stat.S_ISREG(st.st_mode):
                raise NotAFile(path, kind(st.st_mode))
        return FileLock(str(path), thread_local=False, timeout=0)

    def release(self, run_id: str, lock: FileLock | None = None) -> None:
        """Release one hold of a run's lease (nested holds count), forgetting it once it is free."""
        lock = lock or self.held.get(run_id)
        if lock is None:
            return
        lock.release()
        if not lock.is_locked:
            self.held.pop(run_id, None)

    def in_progress(self, run_id: str) -> bool:
        """True while another driver holds the run's lease (another process, or another store object)."""
        if self.readonly or run_id in self.held:
            return False
        lock = self.lease(run_id)
        try:
            lock.acquire()
        except Timeout:
            return True
        lock.release()
        return False


__all__ = ["Leases"]
