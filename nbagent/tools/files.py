"""File tools, each scoped by a `ScopeGuard` to the notebook's folder (see `nbagent.scope`).

    tools = file_tools("path/to/notebook/folder")            # or file_tools(Scope(root=..., exclude=[...]))

Reads: list_files, read_file, search_content, get_file_metadata (READ_ONLY). Writes: create_file
(WRITE_LOW_RISK, refuses an existing path), write_file over an existing file and delete_file
(WRITE_HIGH_RISK). Every tool checks its path before it runs (a denial is an `authorization_denied` event)
and again when it opens the file. Writes are atomic (a temporary file in the same folder, then a rename) and
their previews are unified diffs, shown in the approval card.
"""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
import hashlib
import os
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..levels import Risk
from ..scope import Resolved, Scope, ScopeDenied, ScopeGuard
from .base import Tool, ToolError

MAX_CONTENT_CHARS = 40_000
MAX_LIST_ENTRIES = 500
MAX_SEARCH_FILE_BYTES = 2_000_000


def _decode(data: bytes, encoding: str | None, rel: str) -> tuple[str, str]:
    """Text and encoding of file bytes; binary files are refused."""
    if b"\x00" in data[:8192]:
        raise ToolError(f"{rel!r} is a binary file; read_file reads text only")
    if encoding:
        try:
            return data.decode(encoding), encoding
        except (LookupError, UnicodeDecodeError) as exc:
            raise ToolError(f"{rel!r} cannot be decoded as {encoding}: {exc}") from None
    for enc in ("utf-8-sig", "utf-8") if data.startswith(b"\xef\xbb\xbf") else ("utf-8",):
        try:
            return data.decode(enc), "utf-8"
        except UnicodeDecodeError:
            pass
    from charset_normalizer import from_bytes

    candidates = list(from_bytes(data[:200_000]))
    if not candidates:
        raise ToolError(f"{rel!r} looks like a binary file (no text encoding fits)")
    best = candidates[0]
    # Short Western text is ambiguous between the single-byte code pages (café reads as Baltic cp1257 too);
    # Windows-1252 is by far the commonest of them in research data, so it wins a near tie.
    western = next((c for c in candidates if c.encoding == "cp1252" and c.chaos <= best.chaos + 0.2), None)
    chosen = (western or best).encoding
    return data.decode(chosen, errors="replace"), chosen


def _diff(old: str, new: str, rel: str, *, new_file: bool = False, deleted: bool = False) -> str:
    a = "/dev/null" if new_file else f"a/{rel}"
    b = "/dev/null" if deleted else f"b/{rel}"
    lines = list(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), a, b, n=3))
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    if len(text) > MAX_CONTENT_CHARS:
        text = text[:MAX_CONTENT_CHARS] + f"\n… diff truncated ({len(text):,} characters in all)\n"
    return text or "(no change)\n"


def _atomic_write(target: Path, content: str, *, exclusive: bool) -> int:
    """Write through a temporary file in the same folder; `exclusive` refuses to replace an existing file."""
    data = content.encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".nbagent-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            try:
                os.link(tmp, target)  # atomic "create if absent": fails if the name appeared meanwhile
            except FileExistsError:
                raise ToolError(f"{target.name!r} was created by someone else meanwhile; nothing written") from None
        else:
            with contextlib.suppress(OSError):
                os.chmod(tmp, os.stat(target).st_mode & 0o7777)
            os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return len(data)


class FileTools:
    """The file tools of one scope, sharing its guard."""

    def __init__(self, scope: Scope | str | Path) -> None:
        self.scope = scope if isinstance(scope, Scope) else Scope(root=Path(scope), base=Path(scope))
        self.guard = ScopeGuard(self.scope)

    def _read_text(self, r: Resolved, encoding: str | None = None) -> tuple[str, str]:
        with self.guard.open_read(r) as f:
            data = f.read(self.scope.max_read_bytes + 1)
        return _decode(data, encoding, r.rel)

    # ------------------------------------------------------------------ READ_ONLY

    def list_files(self, path: str = ".", pattern: str = "*", depth: int = 1, include_hidden: bool = False
                   ) -> dict[str, Any]:
        """List files and folders, with sizes.

        Args:
            path: the folder, relative to the notebook's folder
            pattern: a glob that file names must match (folders are always listed)
            depth: how many folder levels to descend (1 = only this folder)
            include_hidden: also list names starting with a dot
        """
        top = self.guard.check(path, "list")
        entries: list[dict[str, Any]] = []
        left_out = 0
        truncated = False
        todo: list[tuple[Path, int]] = [(top.real, 1)]
        while todo and not truncated:
            folder, level = todo.pop(0)
            try:
                items = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            for item in items:
                if item.name.startswith(".") and not include_hidden:
                    continue
                rel = Path(os.path.relpath(item.path, self.guard.root)).as_posix()
                try:
                    is_dir = item.is_dir(follow_symlinks=True)
                    r = self.guard.check(rel, "list" if is_dir else "read", max_bytes=0)
                except (ScopeDenied, OSError):
                    left_out += 1  # outside, excluded, a loop, a device...: not shown
                    continue
                if r.kind == "dir":
                    entries.append({"path": rel + "/", "type": "folder"})
                    if level < depth:
                        todo.append((r.real, level + 1))
                elif fnmatch.fnmatch(item.name, pattern):
                    entries.append({"path": rel, "type": "file", "size": r.size})
                if len(entries) >= MAX_LIST_ENTRIES:
                    truncated = True
                    break
        out: dict[str, Any] = {"folder": top.rel, "entries": entries}
        if left_out:
            out["not_shown"] = f"{left_out} entr{'y' if left_out == 1 else 'ies'} outside the scope or excluded"
        if truncated:
            out["truncated"] = f"only the first {MAX_LIST_ENTRIES} entries; narrow the path or the pattern"
        return out

    def read_file(self, path: str, start_line: int = 1, end_line: int | None = None, encoding: str | None = None
                  ) -> dict[str, Any]:
        """Read a text file, whole or a range of lines (numbered from 1).

        Args:
            path: the file, relative to the notebook's folder
            start_line: first line to return
            end_line: last line to return (default: to the end)
            encoding: the text encoding, if known (default: detected)
        """
        if start_line < 1 or (end_line is not None and end_line < start_line):
            raise ToolError("start_line must be >= 1 and end_line >= start_line")
        ranged = start_line > 1 or end_line is not None
        r = self.guard.check(path, "read", max_bytes=0 if ranged else None)
        if ranged:
            with self.guard.open_read(r) as f:
                head = f.read(8192)
                if b"\x00" in head:
                    raise ToolError(f"{r.rel!r} is a binary file; read_file reads text only")
                f.seek(0)
                enc = encoding or "utf-8"
                lines: list[str] = []
                total = 0
                for total, raw in enumerate(f, start=1):
                    if start_line <= total <= (end_line or total):
                        lines.append(raw.decode(enc, errors="replace"))
            text = "".join(lines)
            span = f"{start_line}-{min(end_line or total, total)} of {total}"
        else:
            text, enc = self._read_text(r, encoding)
            total = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
            span = f"1-{total} of {total}"
        out: dict[str, Any] = {"path": r.rel, "encoding": enc, "lines": span, "content": text}
        if len(text) > MAX_CONTENT_CHARS:
            out["content"] = text[:MAX_CONTENT_CHARS]
            out["truncated"] = f"the text has {len(text):,} characters; read a line range for the rest"
        return out

    def search_content(self, pattern: str, path: str = ".", glob: str = "*", regex: bool = False,
                       case_sensitive: bool = False, max_matches: int = 100) -> dict[str, Any]:
        """Search text files for a string or a regular expression; returns matching lines.

        Args:
            pattern: the text (or, with regex=true, the Python regular expression) to find
            path: the folder to search, relative to the notebook's folder
            glob: only files whose names match this glob (e.g. *.py)
            regex: treat the pattern as a regular expression
            case_sensitive: match case exactly
            max_matches: stop after this many matching lines
        """
        flags = 0 if case_sensitive else re.IGNORECASE
        try:
            rx = re.compile(pattern if regex else re.escape(pattern), flags)
        except re.error as exc:
            raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from None
        top = self.guard.check(path, "list")
        matches: list[dict[str, Any]] = []
        searched = 0
        for folder, dirs, files in os.walk(top.real):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                if not fnmatch.fnmatch(name, glob):
                    continue
                rel = Path(os.path.relpath(os.path.join(folder, name), self.guard.root)).as_posix()
                try:
                    r = self.guard.check(rel, "read", max_bytes=MAX_SEARCH_FILE_BYTES)
                    text, _ = self._read_text(r)
                except (ToolError, OSError):
                    continue  # excluded, binary, too large, a device...: not searched
                searched += 1
                for number, line in enumerate(text.splitlines(), start=1):
                    if rx.search(line):
                        matches.append({"path": rel, "line": number, "text": line[:300]})
                        if len(matches) >= max_matches:
                            return {"matches": matches, "files_searched": searched,
                                    "truncated": f"stopped at {max_matches} matches"}
        return {"matches": matches, "files_searched": searched}

    def get_file_metadata(self, path: str) -> dict[str, Any]:
        """Size, modification time, type, line count and encoding of a file, without its content.

        Args:
            path: the file, relative to the notebook's folder
        """
        r = self.guard.check(path, "read", max_bytes=0)
        with self.guard.open_read(r) as f:
            st = os.fstat(f.fileno())
            data = f.read(min(st.st_size, self.scope.max_read_bytes) + 1)
        out: dict[str, Any] = {
            "path": r.rel, "size": st.st_size,
            "modified": datetime.fromtimestamp(st.st_mtime, UTC).isoformat(timespec="seconds"),
            "suffix": Path(r.rel).suffix,
        }
        try:
            text, enc = _decode(data, None, r.rel)
            out.update(kind="text", encoding=enc, lines=text.count("\n") + (0 if text.endswith("\n") else 1))
        except ToolError:
            out["kind"] = "binary"
        if st.st_size <= self.scope.max_read_bytes:
            out["sha256"] = hashlib.sha256(data).hexdigest()
        return out

    # ------------------------------------------------------------------ writes

    def create_file(self, path: str, content: str) -> dict[str, Any]:
        """Create a new text file (missing folders are created); refuses a path that exists.

        Args:
            path: the new file, relative to the notebook's folder
            content: the file's text
        """
        r = self.guard.check(path, "create")
        self.guard.check_write_size(content, path)
        parent = r.real.parent
        parent.mkdir(parents=True, exist_ok=True)
        self.guard.check(Path(os.path.relpath(parent, self.guard.root)).as_posix(), "list")  # still inside
        size = _atomic_write(r.real, content, exclusive=True)
        return {"created": r.rel, "bytes": size}

    def write_file(self, path: str, content: str) -> dict[str, Any]:
        """Replace the whole content of an existing text file.

        Args:
            path: the file, relative to the notebook's folder
            content: the new text
        """
        r = self.guard.check(path, "write", max_bytes=0)
        self.guard.check_write_size(content, path)
        self.guard.recheck(r)
        size = _atomic_write(r.real, content, exclusive=False)
        return {"written": r.rel, "bytes": size}

    def delete_file(self, path: str) -> dict[str, Any]:
        """Delete a file.

        Args:
            path: the file, relative to the notebook's folder
        """
        r = self.guard.check(path, "delete", max_bytes=0)
        self.guard.recheck(r)
        os.unlink(r.real)
        return {"deleted": r.rel, "bytes": r.size}

    # ------------------------------------------------------------------ previews (the approval card)

    def _old_text(self, path: str) -> tuple[str, str]:
        r = self.guard.check(path, "read", max_bytes=0)
        text, _ = self._read_text(r)
        return text, r.rel

    def preview_create(self, args: dict[str, Any]) -> str:
        r = self.guard.check(args["path"], "create")
        return _diff("", args.get("content", ""), r.rel, new_file=True)

    def preview_write(self, args: dict[str, Any]) -> str:
        old, rel = self._old_text(args["path"])
        return _diff(old, args.get("content", ""), rel)

    def preview_delete(self, args: dict[str, Any]) -> str:
        old, rel = self._old_text(args["path"])
        return _diff(old, "", rel, deleted=True)

    def tools(self) -> list[Tool]:
        def authorize(op: Any, arg: str = "path", **kw: Any) -> Any:
            return lambda args: self.guard.check(args.get(arg, "."), op, **kw)

        return [
            Tool(self.list_files, risk=Risk.READ_ONLY, authorize=authorize("list")),
            Tool(self.read_file, risk=Risk.READ_ONLY, authorize=lambda a: self.guard.check(
                a.get("path"), "read",
                max_bytes=0 if a.get("start_line", 1) > 1 or a.get("end_line") is not None else None)),
            Tool(self.search_content, risk=Risk.READ_ONLY, authorize=authorize("list")),
            Tool(self.get_file_metadata, risk=Risk.READ_ONLY, authorize=authorize("read", max_bytes=0)),
            Tool(self.create_file, risk=Risk.WRITE_LOW_RISK, authorize=authorize("create"),
                 preview=self.preview_create),
            Tool(self.write_file, risk=Risk.WRITE_HIGH_RISK, authorize=authorize("write", max_bytes=0),
                 preview=self.preview_write),
            Tool(self.delete_file, risk=Risk.WRITE_HIGH_RISK, authorize=authorize("delete", max_bytes=0),
                 preview=self.preview_delete),
        ]


def file_tools(scope: Scope | str | Path) -> list[Tool]:
    """The seven file tools for a folder (or a configured `Scope`)."""
    return FileTools(scope).tools()
