"""Errors a store raises. Each message is one line: the file, what is wrong, what to do."""

from __future__ import annotations

from pathlib import Path


class StoreError(Exception):
    """Base of every store error; `str()` is a complete one-line message for a user."""


class NotAStore(StoreError):
    def __init__(self, path: Path | str, why: str = "") -> None:
        detail = f" ({why})" if why else ""
        super().__init__(
            f"{path}: not an nbagent store{detail}; pass a notebook (.ipynb) or its store folder (NAME.nbagent)"
        )


class NewerFormat(StoreError):
    def __init__(self, path: Path | str, found: int, supported: int) -> None:
        super().__init__(
            f"{path}: written by a newer nbagent (store format {found}, this one reads up to {supported}); "
            "upgrade with `pip install -U nbagent`"
        )


class StoreReadOnly(StoreError):
    def __init__(self, path: Path | str, why: str) -> None:
        super().__init__(
            f"{path}: cannot write the log ({why}); nothing was written. Make the folder writable, or copy the "
            "notebook to a writable folder"
        )


class StoreWriteFailed(StoreError):
    def __init__(self, path: Path | str, why: str) -> None:
        super().__init__(
            f"{path}: writing the log failed ({why}); the event was not recorded and the log is unchanged. "
            "Free disk space and retry"
        )


class StoreCorrupt(StoreError):
    def __init__(self, path: Path | str, why: str) -> None:
        super().__init__(f"{path}: {why}; run `nbagent verify {path}` for details")


class AppendOnly(StoreError):
    def __init__(self, op: str) -> None:
        super().__init__(f"the event log is append-only: {op} is not allowed; record a new event instead")


class RunNotFound(StoreError):
    def __init__(self, run_id: str, path: Path | str, why: str = "no such run") -> None:
        super().__init__(f"{path}: {why}: {run_id!r}; list runs with `nbagent runs {path}`")


class NotAFile(StoreError):
    """A file of the store that is something else (a FIFO, a device, a folder): never read, so never waited on."""

    def __init__(self, path: Path | str, kind: str) -> None:
        self.kind = kind
        super().__init__(
            f"{path}: not a regular file (a {kind}); nbagent reads only regular files in its store and did not open "
            "it: remove it, or put the file back from a backup"
        )


class IsALink(NotAFile):
    """A file or folder inside the store that is a symbolic link: never followed, so the log and the saved contents
    are never written wherever a shipped link points (another folder, a data file of the project)."""

    def __init__(self, path: Path | str, target: str) -> None:
        self.kind = f"symbolic link to {target}"
        self.target = target
        StoreError.__init__(
            self, f"{path}: a symbolic link (to {target}); nbagent never follows a link inside its store folder (the "
            "log or saved files would go wherever it points) and did not use it: remove the link"
        )


class StoreFolderIsALink(StoreError):
    """The store folder itself is a link: refused by readers and writers alike (docs/log.md)."""

    def __init__(self, path: Path | str, target: str) -> None:
        self.target = target
        super().__init__(
            f"{path}: the store folder is a symbolic link (to {target}); nbagent does not follow it (a repository "
            "could point the log anywhere): remove the link, or name the folder it points to instead"
        )


class NotAFolder(StoreError):
    """A folder of the store (leases/, blobs/, a blob's shard) that is something else."""

    def __init__(self, path: Path | str, kind: str) -> None:
        self.kind = kind
        super().__init__(f"{path}: not a folder (a {kind}); nbagent keeps its own files there and did not use it: "
                         "remove it")
