"""Opening the files of a store folder without ever waiting on one: only regular files are read.

A FIFO put where `events.jsonl`, `tables.json`, `meta.json` or a blob should be would block a plain `open()` (until
a writer comes, which may be never) and a device would feed a reader forever. Every reader of the store opens with
`O_NONBLOCK` (which lets the open of a FIFO return at once) and checks `fstat` before reading: anything but a
regular file is `NotAFile`, a one-line error. On a regular file `O_NONBLOCK` changes nothing.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .errors import NotAFile

_KINDS = ((stat.S_ISFIFO, "named pipe (FIFO)"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
          (stat.S_ISDIR, "folder"), (stat.S_ISSOCK, "socket"))
_FLAGS = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    return next((name for test, name in _KINDS if test(mode)), "special file")


def open_regular(path: str | Path, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A descriptor on `path`, which must be a regular file (a link to one is followed); NotAFile otherwise.
    FileNotFoundError and other OSErrors pass through as they are."""
    try:
        fd = os.open(path, flags | _FLAGS, mode)
    except OSError as exc:
        if exc.errno not in (errno.ENXIO, errno.EISDIR, errno.ENODEV, errno.EOPNOTSUPP):
            raise
        try:  # a socket, a FIFO opened for writing with no reader, a folder opened for writing...
            st = os.stat(path)
        except OSError:
            raise exc from None
        raise NotAFile(path, kind(st.st_mode)) from None
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotAFile(path, kind(st.st_mode))
    return fd


def read_regular(path: str | Path) -> bytes:
    """The whole content of a regular file; NotAFile for anything else, FileNotFoundError when missing."""
    with os.fdopen(open_regular(path), "rb") as f:
        return f.read()
