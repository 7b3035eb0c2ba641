"""This user's data folder and key, outside every project: what a repository can neither ship nor forge.

MCP trusts are sealed with the key (ipython/trust.py), and the store keeps its chains' anchors in the folder
(store/anchor.py). Both are read at call time ($XDG_DATA_HOME, else ~/.local/share), so a test or a second
configuration only has to set the variable.

The key is read without ever blocking and only from a regular file of this user's, not a link: a FIFO at
`trust.key` would hang the kernel at the first cell that checks an MCP trust, and a short key (an empty file) would
make every seal an HMAC anyone can compute. Anything but a good key is `KeyFileError`, one line, and never used.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

KEY_BYTES = 32  # what nbagent makes; a key shorter than this is refused
_MAX_KEY_BYTES = 4096
_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
          | getattr(os, "O_CLOEXEC", 0))


class KeyFileError(ValueError):
    """The key file is unusable (a link, a FIFO, another user's, too short) or cannot be made (the data folder cannot
    be written): one line saying what, where, and what to do."""

    def __init__(self, path: Path, why: str, fix: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: the trust key is {why}; " + (
            fix or "nbagent did not use it: remove it and a new one is made"))


def data_dir() -> Path:
    """nbagent's folder in this user's data folder: outside every project."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "nbagent"


def key_path() -> Path:
    """Where this user's key lives: outside every project, so no repository can ship it."""
    return data_dir() / "trust.key"


def key() -> bytes:
    """This user's key, made on first use (32 random bytes, mode 0600, written whole or not at all)."""
    path = key_path()
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".trust.key.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError as exc:  # a read-only home, a data folder of another user's, a file where the folder should be
        raise KeyFileError(path, f"missing and cannot be made ({exc.strerror or exc})",
                           f"make {path.parent} a folder this user can write, or set XDG_DATA_HOME to one") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(KEY_BYTES))
        try:
            os.link(tmp, path)  # the first writer wins; another process's key (or what is there) is read below
        except FileExistsError:
            pass
        except OSError as exc:
            raise KeyFileError(path, f"missing and cannot be made ({exc.strerror or exc})",
                               f"make {path.parent} a folder this user can write, or set XDG_DATA_HOME to one"
                               ) from None
    finally:
        tmp.unlink(missing_ok=True)
    return _read(path)


def _read(path: Path) -> bytes:
    """The key at `path` if it is a good one (FileNotFoundError when there is none); KeyFileError otherwise."""
    try:
        fd = os.open(path, _FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):
            raise KeyFileError(path, f"a symbolic link (to {os.readlink(path)})") from None
        if exc.errno == errno.ENOTDIR or (exc.errno == errno.EACCES and not os.path.lexists(path)):
            # the folder, not the key: there is nothing to remove
            raise KeyFileError(path, f"out of reach ({exc.strerror or exc})",
                               f"make {path.parent} a folder this user can read and write, or set XDG_DATA_HOME to "
                               "one") from None
        raise KeyFileError(path, f"unreadable ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            from nbagent.store.regular import kind

            raise KeyFileError(path, f"not a regular file (a {kind(st.st_mode)})")
        if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            raise KeyFileError(path, f"owned by another user (uid {st.st_uid})")
        if st.st_mode & 0o077:  # readable or writable by others: anyone here could seal in this user's name
            raise KeyFileError(path, f"open to other users (mode {stat.S_IMODE(st.st_mode):o}; it must be 600)")
        data = os.read(fd, _MAX_KEY_BYTES + 1)  # a regular file: never blocks
    finally:
        os.close(fd)
    if len(data) < KEY_BYTES:
        raise KeyFileError(path, f"too short ({len(data)} bytes; a key has at least {KEY_BYTES})")
    if len(data) > _MAX_KEY_BYTES:
        raise KeyFileError(path, f"too long (over {_MAX_KEY_BYTES} bytes: not a key nbagent made)")
    return data


def seal(*parts: str) -> str:
    """An HMAC of `parts` under this user's key (hex): only this user, here, can make it."""
    return hmac.new(key(), "\0".join(parts).encode(), hashlib.sha256).hexdigest()
