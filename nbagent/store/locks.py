"""The store's write lock: `flock` on a descriptor held open (HeldLock), and the context manager `Store.locked()`
gives (Locked). Writers take the store's thread lock, then this one, so threads and processes are serialised the
same way (store.py)."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Protocol

from filelock import Timeout

from nbagent.store.regular import open_regular


class Lockable(Protocol):
    """What `Locked` needs of the store: its two-level acquire and release."""

    def _acquire(self) -> None: ...

    def _release(self) -> None: ...


try:
    import fcntl
except ImportError:  # Windows: filelock's portable lock
    fcntl = None  # type: ignore[assignment]


class HeldLock:
    """The store's write lock: `flock` on a descriptor opened once, not filelock's open-lock-close per acquire.

    filelock opened, locked, truncated and closed the lock file on every append (~55 µs, three times a step); here
    an acquire is one `flock(LOCK_EX | LOCK_NB)` and one `fstat`. The lock is the same kind filelock
    takes (`flock` on the file `lock`), so processes running either version exclude each other. Re-entrant within
    a process (the store's thread lock serialises threads first). Two cases would make a held descriptor lock the
    wrong file: after `fork` the child's inherited descriptor shares the parent's lock (so the child opens its own),
    and a lock file deleted or replaced (the timeout message suggests deleting it) leaves the descriptor on a
    dead inode that other processes no longer open (so after locking, the file must still have a link).
    """

    POLL_S = 0.005

    def __init__(self, path: str, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self._fd: int | None = None
        self._pid = 0
        self._depth = 0

    def _open(self) -> int:
        if self._fd is not None and self._pid != os.getpid():
            self._fd = None  # inherited through fork: never lock or close the parent's description
        if self._fd is None:
            # never blocks (a FIFO in its place), never follows a link (one shipped would create its target)
            self._fd = open_regular(self.path, os.O_RDWR | os.O_CREAT)
            self._pid = os.getpid()
        return self._fd

    def _drop(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = None

    def acquire(self) -> None:
        if self._depth and self._pid == os.getpid():
            self._depth += 1
            return
        self._depth = 0
        deadline = None
        while True:
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.timeout
                elif now >= deadline:
                    raise Timeout(self.path) from None
                time.sleep(self.POLL_S)
                continue
            if os.fstat(fd).st_nlink > 0:  # still the file at `path` (deleted or renamed over: no link left)
                self._depth = 1
                return
            self._drop()  # the file was deleted or replaced while we held or waited for it: lock the new one

    def release(self) -> None:
        if self._depth <= 0:
            return
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._depth == 0:
            self._drop()


class Locked:
    """`Store.locked()`: a plain context manager (a generator-based one cost more than the lock on every append)."""

    __slots__ = ("store",)

    def __init__(self, store: Lockable) -> None:
        self.store = store

    def __enter__(self) -> None:
        self.store._acquire()

    def __exit__(self, *exc: object) -> None:
        self.store._release()


__all__ = ["HeldLock", "Locked", "fcntl"]
