"""Opening the files of a store folder without ever waiting on one, and never through a link: only regular files.

A FIFO put where `events.jsonl`, `tables.json`, `meta.json` or a blob should be would block a plain `open()` (until
a writer comes, which may be never) and a device would feed a reader forever. Every reader of the store opens with
`O_NONBLOCK` (which lets the open of a FIFO return at once) and checks `fstat` before reading: anything but a
regular file is `NotAFile`, a one-line error. On a regular file `O_NONBLOCK` changes nothing.

A symbolic link shipped inside the store (`events.jsonl -> /tmp/x/log.jsonl`, `events.jsonl -> ../results.jsonl`,
`blobs -> /elsewhere`) would send the log, or the saved contents of the files the agent changed, wherever it points.
Every file is opened with `O_NOFOLLOW` and every folder is checked with `lstat` (`folder`): a link is `IsALink`.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from nbagent.store.errors import IsALink, NotAFile, NotAFolder

_KINDS = ((stat.S_ISFIFO, "named pipe (FIFO)"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
          (stat.S_ISDIR, "folder"), (stat.S_ISSOCK, "socket"), (stat.S_ISREG, "regular file"),
          (stat.S_ISLNK, "symbolic link"))
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FLAGS = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | NOFOLLOW
# what open(O_NOFOLLOW) of a link gives: ELOOP (Linux, macOS), EMLINK (FreeBSD), EFTYPE (NetBSD)
_LINK_ERRNOS = {errno.ELOOP, errno.EMLINK, getattr(errno, "EFTYPE", errno.ELOOP)}


def kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    return next((name for test, name in _KINDS if test(mode)), "special file")


def link_target(path: str | Path) -> str | None:
    """Where `path` points if it is a symbolic link; None if it is not one (or is missing)."""
    try:
        return os.readlink(path)
    except (OSError, ValueError):
        return None


def open_regular(path: str | Path, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A descriptor on `path`, which must be a regular file and not a link (IsALink); NotAFile otherwise.
    FileNotFoundError and other OSErrors pass through as they are."""
    if not NOFOLLOW:  # (no O_NOFOLLOW on this system: check first)
        target = link_target(path)
        if target is not None:
            raise IsALink(path, target)
    try:
        fd = os.open(path, flags | _FLAGS, mode)
    except OSError as exc:
        if exc.errno in _LINK_ERRNOS:
            target = link_target(path)
            if target is not None:
                raise IsALink(path, target) from None
            raise
        if exc.errno not in (errno.ENXIO, errno.EISDIR, errno.ENODEV, errno.EOPNOTSUPP):
            raise
        try:  # a socket, a FIFO opened for writing with no reader, a folder opened for writing...
            st = os.lstat(path)
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
    """The whole content of a regular file; NotAFile (IsALink) for anything else, FileNotFoundError when missing."""
    with os.fdopen(open_regular(path), "rb") as f:
        return f.read()


def folder(path: str | Path, *, create: bool = False) -> bool:
    """Whether `path` is a folder of the store (made first with `create`); False when it is missing. A link is
    IsALink and anything else NotAFolder: a folder the store writes into is never reached through a link."""
    if create:
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if create:
            raise
        return False
    if stat.S_ISLNK(st.st_mode):
        raise IsALink(path, link_target(path) or "?")
    if not stat.S_ISDIR(st.st_mode):
        raise NotAFolder(path, kind(st.st_mode))
    return True
