"""File operations beneath one folder that no symbolic link, and no folder swapped mid-call, can redirect.

Paths here are already checked by the scope (`nbagent.scope.rules`) and given *relative to the root, with every symlink
resolved*, so a path that is still what was checked contains no symbolic link at all. Every operation starts from a
descriptor of the root (re-opened per operation and compared with the root's identity when the guard was made, so a
root replaced since is refused too) and reaches its target without following any link:

- `openat2(..., RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` where the kernel offers it (Linux
  5.6+): one system call that fails with ELOOP/EXDEV instead of leaving the root;
- otherwise component by component: `openat(parent_fd, name, O_DIRECTORY | O_NOFOLLOW)`, each folder opened relative
  to its parent's descriptor.

The last step is then a `*at` call on the parent's descriptor (`openat`, `fstatat`, `linkat`, `renameat`,
`unlinkat`, `mkdirat`), so a folder on the way that is replaced by a link after the check makes the call fail with
`Redirected`; it can never read, write, create, rename or delete anything outside. Python has no `os.openat2`, so the
system call is made through ctypes; there is no maintained PyPI library for it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# openat2's `resolve` flags (linux/openat2.h)
_RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x02, 0x04, 0x08
_SYS_OPENAT2 = 437  # the same number on every Linux architecture (the unified table from 5.6 on)


class Redirected(OSError):
    """A component of a checked path is no longer what was checked: a link, or not a folder, or the root moved."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_openat2() -> object | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.syscall
    except (OSError, AttributeError):  # pragma: no cover - no libc symbols (static builds)
        return None
    call.restype = ctypes.c_long
    how = _OpenHow(_DIR, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS)
    fd = call(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(-100), ctypes.c_char_p(b"/"), ctypes.byref(how),
              ctypes.c_size_t(ctypes.sizeof(how)))  # AT_FDCWD, "/" is beneath nothing: EXDEV means it works
    if fd >= 0:  # pragma: no cover - "/" is absolute, so RESOLVE_BENEATH refuses it
        os.close(fd)
        return call
    return call if ctypes.get_errno() == errno.EXDEV else None  # ENOSYS (old kernel), EPERM (seccomp): fall back


_openat2 = _load_openat2()
HAVE_OPENAT2 = _openat2 is not None


def _parts(rel: str) -> list[str]:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):  # the scope resolves `..` before us; refuse rather than trust it here
        raise Redirected(errno.EXDEV, "a checked path may not contain ..", rel)
    return parts


class Beneath:
    """Descriptor-relative operations on paths beneath `root` (a folder path with no symbolic link in it)."""

    def __init__(self, root: Path, *, use_openat2: bool | None = None) -> None:
        self.root = root
        st = os.stat(root)
        self._identity = (st.st_dev, st.st_ino)
        self.openat2 = HAVE_OPENAT2 if use_openat2 is None else (use_openat2 and HAVE_OPENAT2)

    # ------------------------------------------------------------------ reaching a folder

    def _root_fd(self) -> int:
        fd = os.open(self.root, _DIR)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self._identity:
            os.close(fd)
            raise Redirected(errno.EXDEV, "the notebook's folder was replaced since the agent started", str(self.root))
        return fd

    def _open2(self, dir_fd: int, rel: str, flags: int, mode: int = 0) -> int:
        how = _OpenHow(flags | os.O_CLOEXEC, mode, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
        for _ in range(8):  # EAGAIN: a rename raced the lookup; the kernel asks us to try again
            fd = _openat2(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dir_fd),  # type: ignore[operator]
                          ctypes.c_char_p(os.fsencode(rel)), ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
            if fd >= 0:
                return int(fd)
            err = ctypes.get_errno()
            if err != errno.EAGAIN:
                raise _error(err, rel)
        raise _error(errno.EAGAIN, rel)

    def _walk(self, fd: int, parts: list[str], *, create: bool) -> int:
        """Open `parts` below `fd` one at a time, without following links (and make missing ones if `create`).
        Takes ownership of `fd`."""
        try:
            for part in parts:
                try:
                    nxt = os.open(part, _DIR, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o777, dir_fd=fd)
                    nxt = os.open(part, _DIR, dir_fd=fd)
                os.close(fd)
                fd = nxt
            return fd
        except OSError as exc:
            os.close(fd)
            raise _error(exc.errno or 0, "/".join(parts)) from None

    def open_dir(self, rel: str, *, create: bool = False) -> int:
        """A descriptor of the folder `rel` (the root for "."); missing folders are made when `create`."""
        parts = _parts(rel)
        root = self._root_fd()
        if not parts:
            return root
        if self.openat2 and not create:
            try:
                return self._open2(root, "/".join(parts), _DIR)
            finally:
                os.close(root)
        return self._walk(root, parts, create=create)

    @contextlib.contextmanager
    def parent(self, rel: str, *, create: bool = False) -> Iterator[tuple[int, str]]:
        """(descriptor of the folder holding `rel`, the last name of `rel`), closed on exit."""
        parts = _parts(rel)
        if not parts:
            raise Redirected(errno.EISDIR, "the notebook's folder itself is not a file", rel)
        fd = self.open_dir("/".join(parts[:-1]) or ".", create=create)
        try:
            yield fd, parts[-1]
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ operations

    def lstat(self, rel: str) -> os.stat_result | None:
        """The entry `rel` itself (a link is not followed), or None when it or a folder on the way is missing."""
        try:
            if not _parts(rel):
                fd = self._root_fd()
                try:
                    return os.fstat(fd)
                finally:
                    os.close(fd)
            with self.parent(rel) as (fd, name):
                return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def open(self, rel: str, flags: int, mode: int = 0o600) -> int:
        """A descriptor of the file `rel`, opened with `flags` (`O_NOFOLLOW` is always added)."""
        with self.parent(rel) as (fd, name):
            try:
                return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise Redirected(errno.ELOOP, "the file was replaced by a symbolic link", rel) from None
                raise

    def scandir(self, rel: str) -> list[os.DirEntry[str]]:
        """The entries of the folder `rel` (their `is_*` and `stat` are relative to the folder's descriptor)."""
        fd = self.open_dir(rel)
        try:
            with os.scandir(fd) as it:
                return list(it)
        finally:
            os.close(fd)

    def write(self, rel: str, data: bytes, *, exclusive: bool, expect: tuple[int, int] | None = None,
              create_parents: bool = False) -> int:
        """Write `data` to `rel` atomically: a temporary file beside it, synced, then renamed (or, when `exclusive`,
        linked: fails if the name exists) over it, both through the folder's descriptor. `expect` is the inode the
        file must still be just before the rename."""
        with self.parent(rel, create=create_parents) as (fd, name):
            tmp = f".{name[:200]}.{secrets.token_hex(6)}.nbagent-tmp"
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=fd)
            try:
                with os.fdopen(out, "wb") as f:
                    if not exclusive:  # keep the permissions of the file replaced
                        with contextlib.suppress(OSError):
                            os.fchmod(f.fileno(), stat.S_IMODE(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode))
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                if exclusive:
                    os.link(tmp, name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
                else:
                    self._same(fd, name, expect, rel)
                    os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=fd)
        return len(data)

    def unlink(self, rel: str, *, expect: tuple[int, int] | None = None) -> None:
        """Remove the file `rel` through its folder's descriptor (a link put in its place is removed, not followed)."""
        with self.parent(rel) as (fd, name):
            self._same(fd, name, expect, rel)
            os.unlink(name, dir_fd=fd)

    @staticmethod
    def _same(fd: int, name: str, expect: tuple[int, int] | None, rel: str) -> None:
        """Right before a rename or unlink: `name` is still the regular file that was checked."""
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if expect is not None and ((st.st_dev, st.st_ino) != expect or not stat.S_ISREG(st.st_mode)):
            raise Redirected(errno.ESTALE, "the file was replaced after it was checked", rel)


def _error(err: int, rel: str) -> OSError:
    """A lookup failure: missing stays FileNotFoundError; a link or non-folder on the way, or an escape, is
    `Redirected`; anything else keeps its errno."""
    if err == errno.ENOENT:
        return FileNotFoundError(err, os.strerror(err), rel)
    if err in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR, errno.EAGAIN):
        return Redirected(err, os.strerror(err), rel)
    return OSError(err, os.strerror(err), rel)
