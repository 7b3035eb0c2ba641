"""File tools, each scoped by a `ScopeGuard` to the notebook's folder (see `nbagent.scope.rules`).

    tools = file_tools("path/to/notebook/folder")            # or file_tools(Scope(root=..., exclude=[...]))

Reads: list_files, read_file, search_content, get_file_metadata (READ_ONLY). Writes: create_file
(WRITE_LOW_RISK, refuses an existing path), write_file over an existing file and delete_file
(WRITE_HIGH_RISK). Every tool checks its path before it runs (a denial is an `authorization_denied` event)
and again when it opens the file. Every read, write and delete reaches its file through descriptors of the folders
on the way, never through a link (`nbagent.scope.beneath`), so a folder swapped mid-call makes the call fail, not
escape.
Writes are atomic (a temporary file in the same folder, then a rename) and their previews are unified diffs, shown in
the approval card.

Three parts live beside this module, their limits re-exported here: decoding a file's bytes as text (file_text.py),
read_file's ranged reads in bounded pieces (file_ranges.py) and the bounded search (file_search.py,
`search_content`).
"""

from __future__ import annotations

import codecs
import difflib
import fnmatch
import hashlib
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nbagent.events.levels import Risk
from nbagent.scope.rules import Resolved, Scope, ScopeDenied, ScopeGuard
from nbagent.store.blobs import BlobStore
from nbagent.tools.base import Tool, ToolError
from nbagent.tools.file_ranges import MAX_SCAN_BYTES, read_bytes, read_lines
from nbagent.tools.file_search import (
    MAX_LINE_BYTES,
    MAX_SEARCH_BYTES,
    MAX_SEARCH_FILE_BYTES,
    MAX_SEARCH_FILES,
    MAX_SEARCH_MATCHES,
    MAX_SEARCH_NAMES,
    RE2_MAX_MEM,
    RE2_SYNTAX,
    SearchContent,
)
from nbagent.tools.file_text import (
    COUNT_CHUNK,
    NL,
    NUL,
    SAMPLE_BYTES,
    SNIFF_BYTES,
    decode_text,
)

MAX_CONTENT_CHARS = 40_000
MAX_UNDO_COPY_BYTES = 256 * 1024 * 1024  # the largest file whose content a write or delete saves for undo
_TOO_LARGE = "too-large"  # _save_current's answer for a file over that
MAX_LIST_ENTRIES = 500


def _diff(old: str, new: str, rel: str, *, new_file: bool = False, deleted: bool = False) -> str:
    a = "/dev/null" if new_file else f"a/{rel}"
    b = "/dev/null" if deleted else f"b/{rel}"
    lines = list(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), a, b, n=3))
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    if len(text) > MAX_CONTENT_CHARS:
        text = text[:MAX_CONTENT_CHARS] + f"\n… diff truncated ({len(text):,} characters in all)\n"
    return text or "(no change)\n"


def _partial(start_line: Any, end_line: Any, start_byte: Any) -> bool:
    """Whether a read_file call reads part of a file (no whole-file size limit: the read itself is bounded)."""
    return start_byte is not None or end_line is not None or (isinstance(start_line, int) and start_line > 1)


class FileTools(SearchContent):
    """The file tools of one scope, sharing its guard."""

    def __init__(self, scope: Scope | str | Path, blobs: BlobStore | None = None) -> None:
        self.scope = scope if isinstance(scope, Scope) else Scope(root=Path(scope), base=Path(scope))
        self.guard = ScopeGuard(self.scope)
        # with a blob store, every write saves the content before and after and returns their hashes (undo)
        self.blobs = blobs

    def _saved(self, out: dict[str, Any], before: str | None, after: str | None) -> dict[str, Any]:
        if self.blobs is None:
            return out
        if before == _TOO_LARGE:  # no copy, no hashes: undo lists this change as one it cannot reverse
            out["undo"] = (f"not saved for undo: the file was over {MAX_UNDO_COPY_BYTES:,} bytes, the most a change "
                           "keeps a copy of")
            return out
        out.update(before_sha256=before, after_sha256=after)
        return out

    def _save_current(self, r: Resolved) -> str | None:
        """Save the checked file's current content as a blob (read through the guard); its hash. A file over
        MAX_UNDO_COPY_BYTES is not copied (deleting a 2 GB data file must not first write 2 GB beside the log)."""
        if self.blobs is None:
            return None
        if r.size > MAX_UNDO_COPY_BYTES:
            return _TOO_LARGE
        with self.guard.open_read(r) as f:
            return self.blobs.put_stream(f)

    def _read_text(self, r: Resolved, encoding: str | None = None) -> tuple[str, str]:
        with self.guard.open_read(r) as f:
            data = f.read(self.scope.max_read_bytes + 1)
        return decode_text(data, encoding, r.rel)

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
        todo: list[tuple[str, int]] = [(top.rel, 1)]
        while todo and not truncated:
            folder, level = todo.pop(0)
            try:
                items = sorted(self.guard.fs.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            for item in items:
                if item.name.startswith(".") and not include_hidden:
                    continue
                rel = item.name if folder == "." else f"{folder}/{item.name}"
                try:
                    is_dir = item.is_dir(follow_symlinks=True)
                    r = self.guard.check(rel, "list" if is_dir else "read", max_bytes=0)
                except (ScopeDenied, OSError):
                    left_out += 1  # outside, excluded, a loop, a device...: not shown
                    continue
                if r.kind == "dir":
                    entries.append({"path": rel + "/", "type": "folder"})
                    if level < depth:
                        todo.append((r.rel, level + 1))
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

    def read_file(self, path: str, start_line: int = 1, end_line: int | None = None, encoding: str | None = None,
                  start_byte: int | None = None) -> dict[str, Any]:
        """Read a text file: whole, a range of lines (numbered from 1), or from a byte offset.

        A reply holds at most about 40,000 characters. A longer range stops early and says where to go on; a line
        longer than that is cut, with a note giving the start_byte that reads on.

        Args:
            path: the file, relative to the notebook's folder
            start_line: first line to return
            end_line: last line to return (default: to the end)
            encoding: the text encoding, if known (default: detected)
            start_byte: read from this byte offset instead of by lines (to read on in a very long line)
        """
        if start_line < 1 or (end_line is not None and end_line < start_line):
            raise ToolError("start_line must be >= 1 and end_line >= start_line")
        if start_byte is not None and (start_byte < 0 or start_line > 1 or end_line is not None):
            raise ToolError("start_byte must be >= 0, and given without start_line or end_line")
        r = self.guard.check(path, "read", max_bytes=0 if _partial(start_line, end_line, start_byte) else None)
        if start_byte is not None or start_line > 1 or end_line is not None:  # a part, read in bounded pieces
            with self.guard.open_read(r) as f:
                if start_byte is not None:
                    return read_bytes(f, r.rel, start_byte, encoding, self._reply_bytes())
                return read_lines(f, r.rel, start_line, end_line, encoding, self._reply_bytes())
        with self.guard.open_read(r) as f:
            data = f.read(self.scope.max_read_bytes + 1)
        text, enc = decode_text(data, encoding, r.rel)
        total = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        out: dict[str, Any] = {"path": r.rel, "encoding": enc, "lines": f"1-{total} of {total}", "content": text}
        if len(text) > MAX_CONTENT_CHARS:
            shown = text[:MAX_CONTENT_CHARS]
            out["content"] = shown
            line = shown.count("\n") + 1
            if shown.endswith("\n"):
                how = f"lines 1-{line - 1} shown; read on with start_line={line}"
            else:
                bom = 3 if data.startswith(codecs.BOM_UTF8) and not text.startswith("\ufeff") else 0
                at = bom + len(shown.encode(enc, errors="replace"))
                how = (f"cut inside line {line}; read on with start_line={line}, or start_byte={at} to go on from "
                       "the cut")
            out["truncated"] = f"the text has {len(text):,} characters, more than one reply holds: {how}"
        return out

    def _reply_bytes(self) -> int:
        """Bytes a ranged read keeps: no more than the reply can show (one byte is at least one character)."""
        return max(1, min(self.scope.max_read_bytes, MAX_CONTENT_CHARS))

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
            text, enc = decode_text(data, None, r.rel)
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
        data = content.encode("utf-8")
        after = self.blobs.put(data) if self.blobs is not None else None
        size = self.guard.write(r, data, create=True)
        return self._saved({"created": r.rel, "bytes": size}, None, after)

    def write_file(self, path: str, content: str) -> dict[str, Any]:
        """Replace the whole content of a text file (a file that does not exist yet is created).

        Args:
            path: the file, relative to the notebook's folder
            content: the new text
        """
        if self._missing(path):  # a create, as its card said (the resolver binds the decision to "create")
            r = self.guard.check(path, "create")
            self.guard.check_write_size(content, path)
            data = content.encode("utf-8")
            after = self.blobs.put(data) if self.blobs is not None else None
            size = self.guard.write(r, data, create=True)
            return self._saved({"written": r.rel, "bytes": size, "created": True}, None, after)
        r = self.guard.check(path, "write", max_bytes=0)
        self.guard.check_write_size(content, path)
        self.guard.recheck(r)
        before = self._save_current(r)
        data = content.encode("utf-8")
        after = self.blobs.put(data) if self.blobs is not None else None
        size = self.guard.write(r, data, create=False)
        return self._saved({"written": r.rel, "bytes": size}, before, after)

    def delete_file(self, path: str) -> dict[str, Any]:
        """Delete a file.

        Args:
            path: the file, relative to the notebook's folder
        """
        r = self.guard.check(path, "delete", max_bytes=0)
        before = self._save_current(r)
        self.guard.delete(r)
        return self._saved({"deleted": r.rel, "bytes": r.size}, before, None)

    # ------------------------------------------------------------------ previews (the approval card)

    def _old_text(self, path: str) -> tuple[str, str]:
        r = self.guard.check(path, "read", max_bytes=0)
        text, _ = self._read_text(r)
        return text, r.rel

    def preview_create(self, args: dict[str, Any]) -> str:
        r = self.guard.check(args["path"], "create")
        return _diff("", args.get("content", ""), r.rel, new_file=True)

    def _authorize_write(self, args: dict[str, Any]) -> None:
        self.guard.check(args.get("path", "."), "create" if self._missing(args.get("path", ".")) else "write",
                         max_bytes=0)

    def _missing(self, path: Any) -> bool:
        """Nothing at `path` (inside the scope): a write_file there creates the file."""
        from nbagent.scope.rules import ScopeDenied

        try:
            self.guard.check(path, "create")
        except ScopeDenied:
            return False
        return True

    def preview_write(self, args: dict[str, Any]) -> str:
        if self._missing(args["path"]):
            return self.preview_create(args)
        old, rel = self._old_text(args["path"])
        return _diff(old, args.get("content", ""), rel)

    def preview_delete(self, args: dict[str, Any]) -> str:
        old, rel = self._old_text(args["path"])
        return _diff(old, "", rel, deleted=True)

    def _targets(self, op: Any, arg: str = "path") -> Any:
        """The resolver of a tool acting with `op` on the path in `arg` (effects.py): the path resolved, links
        inside the folder followed, as the decision and the act both see it."""
        from nbagent.gate.effects import resolve_target

        return lambda args: [resolve_target(self.guard, op, args.get(arg, "."), arg)]

    def _write_targets(self) -> Any:
        """write_file's resolver: a write, or a create where no file is yet (so an approval of "create notes.md"
        does not cover overwriting a file that appeared since: the effect, and so the digest, differ)."""
        from nbagent.gate.effects import resolve_target

        return lambda args: [resolve_target(self.guard, "create" if self._missing(args.get("path", ".")) else "write",
                                            args.get("path", "."), "path")]

    def tools(self) -> list[Tool]:
        def authorize(op: Any, arg: str = "path", **kw: Any) -> Callable[[dict[str, Any]], None]:
            def check(args: dict[str, Any]) -> None:
                self.guard.check(args.get(arg, "."), op, **kw)

            return check

        def authorize_read(a: dict[str, Any]) -> None:  # a part of a file is read without the size limit
            self.guard.check(a.get("path"), "read",
                             max_bytes=0 if _partial(a.get("start_line", 1), a.get("end_line"), a.get("start_byte"))
                             else None)

        return [
            Tool(self.list_files, risk=Risk.READ_ONLY, authorize=authorize("list"), resolver=self._targets("list")),
            Tool(self.read_file, risk=Risk.READ_ONLY, authorize=authorize_read, resolver=self._targets("read")),
            Tool(self.search_content, risk=Risk.READ_ONLY, authorize=authorize("list"),
                 resolver=self._targets("list")),
            Tool(self.get_file_metadata, risk=Risk.READ_ONLY, authorize=authorize("read", max_bytes=0),
                 resolver=self._targets("read")),
            Tool(self.create_file, risk=Risk.WRITE_LOW_RISK, authorize=authorize("create"),
                 preview=self.preview_create, resolver=self._targets("create")),
            Tool(self.write_file, risk=Risk.WRITE_HIGH_RISK, authorize=self._authorize_write,
                 preview=self.preview_write, resolver=self._write_targets()),
            Tool(self.delete_file, risk=Risk.WRITE_HIGH_RISK, authorize=authorize("delete", max_bytes=0),
                 preview=self.preview_delete, resolver=self._targets("delete")),
        ]


def file_tools(scope: Scope | str | Path, blobs: BlobStore | None = None) -> list[Tool]:
    """The seven file tools for a folder (or a configured `Scope`); with `blobs`, their writes can be undone.

    Args:
        scope: the folder the tools may reach (relative paths are read from it too), or a `Scope` with its root,
            base, exclusions and size limits.
        blobs: where each write and delete saves the content before and after (for `nbagent undo`); None saves
            nothing, and the change cannot be undone.
    """
    return FileTools(scope, blobs).tools()


__all__ = ["COUNT_CHUNK", "MAX_CONTENT_CHARS", "MAX_LINE_BYTES", "MAX_LIST_ENTRIES", "MAX_SCAN_BYTES",
           "MAX_SEARCH_BYTES", "MAX_SEARCH_FILES", "MAX_SEARCH_FILE_BYTES", "MAX_SEARCH_MATCHES", "MAX_SEARCH_NAMES",
           "MAX_UNDO_COPY_BYTES", "NL", "NUL", "RE2_MAX_MEM", "RE2_SYNTAX", "SAMPLE_BYTES", "SNIFF_BYTES", "FileTools",
           "file_tools"]
