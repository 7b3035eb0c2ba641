"""File tools, each scoped by a `ScopeGuard` to the notebook's folder (see `nbagent.scope`).

    tools = file_tools("path/to/notebook/folder")            # or file_tools(Scope(root=..., exclude=[...]))

Reads: list_files, read_file, search_content, get_file_metadata (READ_ONLY). Writes: create_file
(WRITE_LOW_RISK, refuses an existing path), write_file over an existing file and delete_file
(WRITE_HIGH_RISK). Every tool checks its path before it runs (a denial is an `authorization_denied` event)
and again when it opens the file. Every read, write and delete reaches its file through descriptors of the folders
on the way, never through a link (`nbagent.beneath`), so a folder swapped mid-call makes the call fail, not escape.
Writes are atomic (a temporary file in the same folder, then a rename) and their previews are unified diffs, shown in
the approval card.
"""

from __future__ import annotations

import codecs
import difflib
import fnmatch
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import re2

from ..blobs import BlobStore
from ..levels import Risk
from ..scope import Resolved, Scope, ScopeDenied, ScopeGuard
from .base import Tool, ToolError

MAX_CONTENT_CHARS = 40_000
MAX_UNDO_COPY_BYTES = 256 * 1024 * 1024  # the largest file whose content a write or delete saves for undo
_TOO_LARGE = "too-large"  # _save_current's answer for a file over that
MAX_LIST_ENTRIES = 500
# Every read and search is bounded in bytes, whatever the line structure of the file (a 2 GB file may be one line):
SNIFF_BYTES = 8192  # a NUL in these means binary
SAMPLE_BYTES = 64 * 1024  # encoding detection of ranged reads and searches looks at this much, never the whole file
MAX_SCAN_BYTES = 256 * 1024 * 1024  # a line-range read scans this far for its lines (memory stays ~ the reply)
COUNT_CHUNK = 1024 * 1024
NL, NUL = b"\n", b"\x00"
MAX_LINE_BYTES = 64 * 1024  # search: the part of each line searched; the rest of a longer line is skipped
MAX_SEARCH_FILE_BYTES = 8_000_000  # search: bytes searched in one file
MAX_SEARCH_BYTES = 32_000_000  # search: bytes scanned in all files together
MAX_SEARCH_FILES = 2_000  # search: files opened
MAX_SEARCH_NAMES = 20_000  # search: names looked at while walking the folder
MAX_SEARCH_MATCHES = 1_000
RE2_MAX_MEM = 8 << 20  # RE2's default; the module caches 128 compiled patterns, each may use this much
RE2_SYNTAX = ("Regular expressions use RE2 syntax (https://github.com/google/re2/wiki/Syntax), which always runs "
              "in linear time: no backreferences (\\1, (?P=name)), no lookahead or lookbehind ((?=...), (?!...), "
              "(?<=...), (?<!...)), no possessive quantifiers or atomic groups, no (?x) or (?#...), repetition "
              "counts up to 1000, and \\Z is written \\z. Simplify the pattern, or search for plain text with "
              "regex=false.")


def _binary(data: bytes, rel: str) -> None:
    if b"\x00" in data[:SNIFF_BYTES]:
        raise ToolError(f"{rel!r} is a binary file; read_file reads text only")


def _detect(sample: bytes, rel: str, *, complete: bool) -> str:
    """The encoding of a file judged from `sample` (the whole file when `complete`): UTF-8 (with or without a
    BOM) when it decodes, else charset-normalizer's best guess. Only the sample is examined, so the cost is bounded
    whatever the file's size."""
    if sample.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    try:
        sample.decode("utf-8")
        return "utf-8"
    except UnicodeDecodeError as exc:
        if not complete and exc.start >= len(sample) - 3 and exc.reason == "unexpected end of data":
            return "utf-8"  # the sample ends inside a character
    from charset_normalizer import from_bytes

    candidates = list(from_bytes(sample[:200_000]))
    if not candidates:
        raise ToolError(f"{rel!r} looks like a binary file (no text encoding fits)")
    best = candidates[0]
    # Short Western text is ambiguous between the single-byte code pages (café reads as Baltic cp1257 too);
    # Windows-1252 is by far the commonest of them in research data, so it wins a near tie.
    western = next((c for c in candidates if c.encoding == "cp1252" and c.chaos <= best.chaos + 0.2), None)
    return (western or best).encoding


def _named(enc: str) -> str:
    return "utf-8" if enc == "utf-8-sig" else enc


def _decode(data: bytes, encoding: str | None, rel: str) -> tuple[str, str]:
    """Text and encoding of file bytes (already bounded by the caller); binary files are refused."""
    _binary(data, rel)
    if encoding:
        try:
            return data.decode(encoding), encoding
        except (LookupError, UnicodeDecodeError) as exc:
            raise ToolError(f"{rel!r} cannot be decoded as {encoding}: {exc}") from None
    enc = _detect(data, rel, complete=True)
    return data.decode(enc, errors="replace"), _named(enc)


def _decoder(enc: str, rel: str) -> codecs.IncrementalDecoder:
    try:
        return codecs.getincrementaldecoder(enc)(errors="replace")
    except LookupError:
        raise ToolError(f"{rel!r}: unknown encoding {enc!r}") from None


def _decode_part(data: bytes, enc: str, rel: str, *, final: bool) -> tuple[str, int]:
    """Text of a piece cut out of a file, and how many of its bytes that text covers: a character split by the
    cut is left out (it starts the next piece), so byte offsets given to the model stay exact."""
    dec = _decoder(enc, rel)
    text = dec.decode(data, final=final)
    return text, len(data) - len(dec.getstate()[0])


def _python_accepts(pattern: str) -> bool:
    """Whether Python's `re` would compile the pattern (compiling only: nothing is matched, so nothing backtracks);
    tells the model "valid, but not RE2" apart from "invalid"."""
    import re
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            re.compile(pattern)
        return True
    except (re.error, RecursionError, OverflowError, ValueError):
        return False


def _compile(pattern: str, regex: bool, case_sensitive: bool) -> Any:
    """An RE2 matcher: linear time in the text searched, whatever the pattern (Python's `re` backtracks, and holds
    the interpreter lock while it does, so no timeout can stop it; RE2 releases the lock while it matches)."""
    opts = re2.Options()
    opts.log_errors = False
    opts.max_mem = RE2_MAX_MEM
    opts.case_sensitive = case_sensitive
    opts.literal = not regex
    try:
        return re2.compile(pattern, opts)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "not supported"
        reason = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        if _python_accepts(pattern):
            raise ToolError(f"the regular expression {pattern!r} uses syntax that RE2 does not support ({reason}). "
                            f"{RE2_SYNTAX}") from None
        raise ToolError(f"invalid regular expression {pattern!r}: {reason}. {RE2_SYNTAX}") from None
    except (UnicodeError, TypeError) as exc:
        raise ToolError(f"the pattern cannot be used: {exc}") from None


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


@dataclass
class _Search:
    """What one search_content call has found and has left to spend."""

    rx: Any
    limit: int
    left: int  # bytes the search may still read
    matches: list[dict[str, Any]] = field(default_factory=list)
    files: int = 0
    partly: list[str] = field(default_factory=list)

    def note(self, rel: str, text: str) -> None:
        self.partly.append(f"{rel}: {text}")

    def reply(self, truncated: str) -> dict[str, Any]:
        out: dict[str, Any] = {"matches": self.matches, "files_searched": self.files}
        if truncated:
            out["truncated"] = truncated
        if self.partly:
            more = len(self.partly) - 20
            out["partly_searched"] = self.partly[:20] + ([f"… and {more} more files"] if more > 0 else [])
        return out


class FileTools:
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
        if start_byte is not None:
            return self._read_bytes(r, start_byte, encoding)
        if start_line > 1 or end_line is not None:
            return self._read_lines(r, start_line, end_line, encoding)
        with self.guard.open_read(r) as f:
            data = f.read(self.scope.max_read_bytes + 1)
        text, enc = _decode(data, encoding, r.rel)
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

    @staticmethod
    def _sniff(f: IO[bytes], r: Resolved, encoding: str | None) -> str:
        """Binary check and encoding of an open file from a bounded sample of its start; rewinds the file."""
        sample = f.read(SAMPLE_BYTES)
        _binary(sample, r.rel)
        enc = encoding or _detect(sample, r.rel, complete=len(sample) < SAMPLE_BYTES)
        _decoder(enc, r.rel)  # an unknown encoding name is the model's error, said now
        f.seek(0)
        return enc

    def _read_lines(self, r: Resolved, start_line: int, end_line: int | None, encoding: str | None
                    ) -> dict[str, Any]:
        """A line range, read in bounded pieces: memory holds about one reply whatever the lines' lengths."""
        cap = self._reply_bytes()
        with self.guard.open_read(r) as f:
            enc = self._sniff(f, r, encoding)
            line, pos, partial = 1, 0, False  # `line` is the line at `pos`; `partial`: pos is inside it
            while line < start_line:
                if pos >= MAX_SCAN_BYTES:
                    raise ToolError(f"line {start_line:,} is past the first {MAX_SCAN_BYTES:,} bytes of {r.rel!r} "
                                    f"(they hold {line - 1:,} lines), which is as far as a line-range read looks; "
                                    "read from a byte offset with start_byte instead")
                piece = f.readline(COUNT_CHUNK)
                if not piece:
                    break
                pos += len(piece)
                partial = not piece.endswith(b"\n")
                line += 0 if partial else 1
            if line < start_line:  # the file ended first
                total = line if partial else line - 1
                return {"path": r.rel, "encoding": _named(enc), "lines": f"none: the file has {total:,} lines",
                        "content": ""}
            begin, first = pos, line
            kept = bytearray()
            stop = ""  # why the range ended early: "full", "long_line", "binary"; "eof" at the file's end
            while end_line is None or line <= end_line:
                line_start, start_len, done = pos, len(kept), False
                while not done and len(kept) < cap:
                    piece = f.readline(cap - len(kept))
                    if not piece:
                        stop = "eof"
                        break
                    nul = piece.find(b"\x00")
                    if nul >= 0:
                        kept += piece[:nul]
                        pos += nul
                        stop = "binary"
                        break
                    kept += piece
                    pos += len(piece)
                    done = piece.endswith(b"\n")
                if stop:
                    if len(kept) > start_len and stop == "eof":
                        line += 1  # a last line without a newline
                    break
                if done:
                    line += 1
                elif start_len == 0:  # one line longer than a reply: keep its start
                    stop = "long_line"
                    break
                else:  # the reply is full: end before this line
                    del kept[start_len:]
                    pos = line_start
                    stop = "full"
                    break
            total = ""
            if stop == "eof":
                total = f" of {line - 1:,}"
            elif not stop:
                total = self._count_rest(f, line - 1, pos)
        text, used = _decode_part(bytes(kept), enc, r.rel, final=stop in ("", "eof", "full"))
        last = line if stop in ("long_line", "binary") and kept else line - 1
        out: dict[str, Any] = {"path": r.rel, "encoding": _named(enc), "lines": f"{first:,}-{last:,}{total}",
                               "content": text}
        if stop == "full":
            out["truncated"] = (f"the range holds more than one reply ({cap:,} bytes): lines {first:,}-{last:,} "
                                f"shown; read on with start_line={last + 1}")
        elif stop == "long_line":
            at = begin + used
            note = (f"line {line:,} is longer than one reply ({cap:,} bytes) and is cut after {used:,} bytes; it "
                    f"goes on: read_file(path={r.rel!r}, start_byte={at}) reads from there")
            out["content"] = text + f"\n[… {note}]"
            out["truncated"], out["next_start_byte"] = note, at
        elif stop == "binary":
            out["truncated"] = (f"binary data (a NUL byte) at byte {pos:,}: the text is shown up to there; "
                                "read_file reads text only")
        return out

    @staticmethod
    def _count_rest(f: IO[bytes], lines: int, pos: int) -> str:
        """' of N' lines in all, counted in chunks up to the scan limit, or ' of at least N' past it."""
        last = NL
        while pos < MAX_SCAN_BYTES:
            chunk = f.read(min(COUNT_CHUNK, MAX_SCAN_BYTES - pos))
            if not chunk:
                return f" of {lines + (last != NL):,}"
            lines += chunk.count(b"\n")
            pos += len(chunk)
            last = chunk[-1:]
        return f" of at least {lines + 1:,} (counted in the first {MAX_SCAN_BYTES:,} bytes)"

    def _read_bytes(self, r: Resolved, start_byte: int, encoding: str | None) -> dict[str, Any]:
        """At most one reply's worth of text from a byte offset (a split character at either end is left out)."""
        cap = self._reply_bytes()
        with self.guard.open_read(r) as f:
            enc = self._sniff(f, r, encoding)
            size = os.fstat(f.fileno()).st_size
            f.seek(start_byte)
            data = f.read(cap)
        skip = 0
        if enc.startswith("utf-8"):
            while skip < min(3, len(data)) and 0x80 <= data[skip] < 0xC0:
                skip += 1  # the offset fell inside a character
        data = data[skip:]
        nul = data.find(b"\x00")
        if nul >= 0:
            data = data[:nul]
        begin = start_byte + skip
        text, used = _decode_part(data, enc, r.rel, final=nul < 0 and begin + len(data) >= size)
        end = begin + used
        out: dict[str, Any] = {"path": r.rel, "encoding": _named(enc), "bytes": f"{begin:,}-{end:,} of {size:,}",
                               "content": text}
        if nul >= 0:
            out["truncated"] = (f"binary data (a NUL byte) at byte {end:,}: the text is shown up to there; "
                                "read_file reads text only")
        elif end < size:
            out["truncated"] = (f"the file goes on after byte {end:,}: read_file(path={r.rel!r}, start_byte={end}) "
                                "reads on")
            out["next_start_byte"] = end
        return out

    def search_content(self, pattern: str, path: str = ".", glob: str = "*", regex: bool = False,
                       case_sensitive: bool = False, max_matches: int = 100) -> dict[str, Any]:
        """Search text files for a string or a regular expression; returns matching lines.

        Regular expressions use RE2 syntax (no backreferences, lookahead or lookbehind), which always runs in linear
        time. A search is bounded (32 MB read in all, 8 MB per file, the first 64 KB of each line, 2,000 files) and
        says what it left out.

        Args:
            pattern: the text (or, with regex=true, the RE2 regular expression) to find
            path: the folder to search, relative to the notebook's folder
            glob: only files whose names match this glob (e.g. *.py)
            regex: treat the pattern as a regular expression
            case_sensitive: match case exactly
            max_matches: stop after this many matching lines (at most 1000)
        """
        if max_matches < 1:
            raise ToolError("max_matches must be >= 1")
        rx = _compile(pattern, regex, case_sensitive)
        top = self.guard.check(path, "list")
        s = _Search(rx=rx, limit=min(max_matches, MAX_SEARCH_MATCHES), left=MAX_SEARCH_BYTES)
        names = 0
        for folder, files in self._walk(top.rel):
            for name in files:
                names += 1
                if names > MAX_SEARCH_NAMES:
                    return s.reply(f"stopped after looking at {MAX_SEARCH_NAMES:,} file names; narrow the path or "
                                   "the glob")
                if not fnmatch.fnmatch(name, glob):
                    continue
                rel = name if folder == "." else f"{folder}/{name}"
                try:
                    r = self.guard.check(rel, "read", max_bytes=0)
                except (ToolError, OSError):
                    continue  # excluded, a device...: not searched
                if s.files >= MAX_SEARCH_FILES:
                    return s.reply(f"stopped after searching {MAX_SEARCH_FILES:,} files; narrow the path or the glob")
                try:
                    self._search_file(r, s)
                except (ToolError, OSError):
                    continue  # binary, undecodable, changed meanwhile: not searched
                if len(s.matches) >= s.limit:
                    return s.reply(f"stopped at {s.limit} matches" + (
                        "" if s.limit == max_matches else " (the most one search returns)"))
                if s.left <= 0:
                    return s.reply(f"stopped after reading {MAX_SEARCH_BYTES:,} bytes (the limit of one search); "
                                   "narrow the path or the glob")
        return s.reply("")

    def _walk(self, top: str) -> Iterator[tuple[str, list[str]]]:
        """(folder, its file names) for `top` and the folders below it, through descriptors, in name order, like
        `os.walk`: hidden folders and links to folders are not entered."""
        todo = [top]
        while todo:
            folder = todo.pop()
            try:
                items = self.guard.fs.scandir(folder)
            except OSError:
                continue
            dirs, files = [], []
            for item in items:
                try:
                    (dirs if item.is_dir(follow_symlinks=False) else files).append(item.name)
                except OSError:
                    continue
            yield folder, sorted(files)
            todo.extend(name if folder == "." else f"{folder}/{name}"
                        for name in sorted((d for d in dirs if not d.startswith(".")), reverse=True))

    def _search_file(self, r: Resolved, s: _Search) -> None:
        """Search one file line by line: at most MAX_LINE_BYTES of a line are held or searched, and at most
        MAX_SEARCH_FILE_BYTES (and what the search has left) are read."""
        with self.guard.open_read(r) as f:
            enc = self._sniff(f, r, None)
            size = os.fstat(f.fileno()).st_size
            s.files += 1
            utf8 = enc.startswith("utf-8")
            limit = min(MAX_SEARCH_FILE_BYTES, s.left)
            pos, number, long_lines, note = 0, 0, 0, ""
            while not note and len(s.matches) < s.limit:
                if pos >= limit:
                    if f.read(1):
                        note = (f"searched the first {pos:,} of {size:,} bytes (the limit "
                                + ("per file)" if limit == MAX_SEARCH_FILE_BYTES else "of one search)"))
                    break
                raw = f.readline(min(MAX_LINE_BYTES, limit - pos))
                if not raw:
                    break
                start, pos = pos, pos + len(raw)
                nul = raw.find(b"\x00")
                if nul >= 0:
                    raw, note = raw[:nul], f"binary data from byte {start + nul:,}; not searched past it"
                elif len(raw) == MAX_LINE_BYTES and not raw.endswith(b"\n"):  # skip the rest of a longer line
                    long_lines += 1
                    while pos < limit:
                        rest = f.readline(min(COUNT_CHUNK, limit - pos))
                        if NUL in rest:
                            note = f"binary data from byte {pos + rest.find(NUL):,}; not searched past it"
                        pos += len(rest)
                        if not rest or note or rest.endswith(b"\n"):
                            break
                number += 1
                raw = raw.removesuffix(b"\n").removesuffix(b"\r")
                # RE2 matches UTF-8 bytes directly; other encodings are decoded first
                hit = s.rx.search(raw if utf8 else raw.decode(enc, errors="replace"))
                if hit:
                    text = raw.decode(enc, errors="replace").removeprefix("\ufeff")
                    s.matches.append({"path": r.rel, "line": number, "text": text[:300]})
            s.left -= pos
        if long_lines:
            s.note(r.rel, f"{long_lines:,} line{'s' if long_lines > 1 else ''} longer than {MAX_LINE_BYTES:,} bytes: "
                          f"only the first {MAX_LINE_BYTES:,} bytes of each searched")
        if note:
            s.note(r.rel, note)

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
        data = content.encode("utf-8")
        after = self.blobs.put(data) if self.blobs is not None else None
        size = self.guard.write(r, data, create=True)
        return self._saved({"created": r.rel, "bytes": size}, None, after)

    def write_file(self, path: str, content: str) -> dict[str, Any]:
        """Replace the whole content of an existing text file.

        Args:
            path: the file, relative to the notebook's folder
            content: the new text
        """
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

    def preview_write(self, args: dict[str, Any]) -> str:
        old, rel = self._old_text(args["path"])
        return _diff(old, args.get("content", ""), rel)

    def preview_delete(self, args: dict[str, Any]) -> str:
        old, rel = self._old_text(args["path"])
        return _diff(old, "", rel, deleted=True)

    def _targets(self, op: Any, arg: str = "path") -> Any:
        """The resolver of a tool acting with `op` on the path in `arg` (effects.py): the path resolved, links
        inside the folder followed, as the decision and the act both see it."""
        from ..effects import resolve_target

        return lambda args: [resolve_target(self.guard, op, args.get(arg, "."), arg)]

    def tools(self) -> list[Tool]:
        def authorize(op: Any, arg: str = "path", **kw: Any) -> Any:
            return lambda args: self.guard.check(args.get(arg, "."), op, **kw)

        return [
            Tool(self.list_files, risk=Risk.READ_ONLY, authorize=authorize("list"), resolver=self._targets("list")),
            Tool(self.read_file, risk=Risk.READ_ONLY, authorize=lambda a: self.guard.check(
                a.get("path"), "read",
                max_bytes=0 if _partial(a.get("start_line", 1), a.get("end_line"), a.get("start_byte")) else None),
                resolver=self._targets("read")),
            Tool(self.search_content, risk=Risk.READ_ONLY, authorize=authorize("list"),
                 resolver=self._targets("list")),
            Tool(self.get_file_metadata, risk=Risk.READ_ONLY, authorize=authorize("read", max_bytes=0),
                 resolver=self._targets("read")),
            Tool(self.create_file, risk=Risk.WRITE_LOW_RISK, authorize=authorize("create"),
                 preview=self.preview_create, resolver=self._targets("create")),
            Tool(self.write_file, risk=Risk.WRITE_HIGH_RISK, authorize=authorize("write", max_bytes=0),
                 preview=self.preview_write, resolver=self._targets("write")),
            Tool(self.delete_file, risk=Risk.WRITE_HIGH_RISK, authorize=authorize("delete", max_bytes=0),
                 preview=self.preview_delete, resolver=self._targets("delete")),
        ]


def file_tools(scope: Scope | str | Path, blobs: BlobStore | None = None) -> list[Tool]:
    """The seven file tools for a folder (or a configured `Scope`); with `blobs`, their writes can be undone."""
    return FileTools(scope, blobs).tools()
