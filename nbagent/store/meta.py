"""Opening a store folder: its meta.json says it is an nbagent store and of which format; a newer format is
refused, never half-read, and the folder itself must not be a link (StoreFolderIsALink)."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from nbagent._version import __version__
from nbagent.events.ids import new_id, now_iso
from nbagent.store.errors import NewerFormat, NotAStore, StoreFolderIsALink, StoreReadOnly
from nbagent.store.regular import NOFOLLOW, link_target, read_regular

FORMAT = "nbagent-store"
FORMAT_VERSION = 1


def folder_stat(path: Path) -> os.stat_result | None:
    """The store folder's own status (None when missing); a link there is refused, by readers and writers."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise StoreFolderIsALink(path, link_target(path) or "?")
    return st

def check_meta(path: Path) -> dict[str, Any]:
    """The store's meta.json, checked: an nbagent store of a format this version reads (NotAStore, NewerFormat)."""
    meta_path = path / "meta.json"
    st = folder_stat(path)
    if st is None:
        raise NotAStore(path, "it does not exist")
    if not stat.S_ISDIR(st.st_mode):
        raise NotAStore(path, "it is a file, not a store folder")
    try:
        meta = json.loads(read_regular(meta_path).decode("utf-8"))  # a FIFO is NotAFile, never a wait
    except FileNotFoundError as exc:
        raise NotAStore(path, "no meta.json in it") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise NotAStore(path, "meta.json is not valid JSON") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise NotAStore(path, "meta.json does not describe an nbagent store")
    version = meta.get("version")
    if not isinstance(version, int):
        raise NotAStore(path, "meta.json has no format version")
    if version > FORMAT_VERSION:
        raise NewerFormat(meta_path, version, FORMAT_VERSION)
    return meta

def create_or_check(path: Path) -> dict[str, Any]:
    """The store's meta.json, written first when the folder is new or empty (a folder with other files is refused)."""
    st = folder_stat(path)
    if os.path.lexists(path / "meta.json") or (st is not None and not stat.S_ISDIR(st.st_mode)):
        return check_meta(path)
    if st is not None and any(path.iterdir()):
        raise NotAStore(path, "the folder has files but no meta.json; not touching it")
    meta = {"format": FORMAT, "version": FORMAT_VERSION, "id": new_id(), "created_at": now_iso(),
            "created_by": __version__}
    try:
        path.mkdir(parents=True, exist_ok=True)
        folder_stat(path)
        tmp = path / f".meta-{os.getpid()}-{new_id()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(meta, indent=2) + "\n")
        os.replace(tmp, path / "meta.json")  # (replaces a link made meanwhile, never writes through it)
    except OSError as exc:
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise StoreReadOnly(path, exc.strerror or str(exc)) from exc
        raise
    return meta


__all__ = ["FORMAT", "FORMAT_VERSION", "check_meta", "create_or_check", "folder_stat"]
