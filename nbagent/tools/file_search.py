"""`search_content`, the file tools' search: RE2 patterns (linear time), bounded in bytes, files and names.

Kept apart from the other file tools because it is the one tool that walks a folder and reads many files, and all
its limits live here (MAX_LINE_BYTES, MAX_SEARCH_FILE_BYTES, MAX_SEARCH_BYTES, MAX_SEARCH_FILES, MAX_SEARCH_NAMES,
MAX_SEARCH_MATCHES). `FileTools` (files.py) has it as a method: `SearchContent` is one of its bases, and uses the
tools' guard and file_text's encoding sniffing.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import re2

from nbagent.scope.rules import Resolved
from nbagent.tools.base import ToolError
from nbagent.tools.file_text import COUNT_CHUNK, NUL, sniff

if TYPE_CHECKING:
    from nbagent.scope.rules import ScopeGuard

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


class SearchContent:
    """The search tool of `FileTools` (a base class of it; see the module's docstring)."""

    guard: ScopeGuard

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
            dirs: list[str] = []
            files: list[str] = []
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
            enc = sniff(f, r.rel, None)
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
