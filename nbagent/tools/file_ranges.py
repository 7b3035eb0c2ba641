"""read_file's ranged reads: a range of lines, or the text from a byte offset, read from an open file in bounded
pieces.

Kept apart from the tools because their bounds are the point: memory holds about one reply whatever the lines'
lengths (a 2 GB file may be one line), a line range scans at most MAX_SCAN_BYTES for its lines, and a character
split by a cut is left out, so the byte offsets given to the model stay exact. The caller (`FileTools.read_file`,
files.py) opens the file through its guard and says how many bytes one reply keeps.
"""

from __future__ import annotations

import os
from typing import IO, Any

from nbagent.tools.base import ToolError
from nbagent.tools.file_text import COUNT_CHUNK, NL, decode_part, encoding_name, sniff

# Every read and search is bounded in bytes, whatever the line structure of the file (a 2 GB file may be one line):
MAX_SCAN_BYTES = 256 * 1024 * 1024  # a line-range read scans this far for its lines (memory stays ~ the reply)


def read_lines(f: IO[bytes], rel: str, start_line: int, end_line: int | None, encoding: str | None, cap: int
               ) -> dict[str, Any]:
    """Lines `start_line` to `end_line` of the open file, at most `cap` bytes of them, read in bounded pieces:
    memory holds about one reply whatever the lines' lengths."""
    enc = sniff(f, rel, encoding)
    line, pos, partial = 1, 0, False  # `line` is the line at `pos`; `partial`: pos is inside it
    while line < start_line:
        if pos >= MAX_SCAN_BYTES:
            raise ToolError(f"line {start_line:,} is past the first {MAX_SCAN_BYTES:,} bytes of {rel!r} "
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
        return {"path": rel, "encoding": encoding_name(enc), "lines": f"none: the file has {total:,} lines",
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
    of_total = ""
    if stop == "eof":
        of_total = f" of {line - 1:,}"
    elif not stop:
        of_total = _count_rest(f, line - 1, pos)
    text, used = decode_part(bytes(kept), enc, rel, final=stop in ("", "eof", "full"))
    last = line if stop in ("long_line", "binary") and kept else line - 1
    out: dict[str, Any] = {"path": rel, "encoding": encoding_name(enc), "lines": f"{first:,}-{last:,}{of_total}",
                           "content": text}
    if stop == "full":
        out["truncated"] = (f"the range holds more than one reply ({cap:,} bytes): lines {first:,}-{last:,} "
                            f"shown; read on with start_line={last + 1}")
    elif stop == "long_line":
        at = begin + used
        note = (f"line {line:,} is longer than one reply ({cap:,} bytes) and is cut after {used:,} bytes; it "
                f"goes on: read_file(path={rel!r}, start_byte={at}) reads from there")
        out["content"] = text + f"\n[… {note}]"
        out["truncated"], out["next_start_byte"] = note, at
    elif stop == "binary":
        out["truncated"] = (f"binary data (a NUL byte) at byte {pos:,}: the text is shown up to there; "
                            "read_file reads text only")
    return out


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


def read_bytes(f: IO[bytes], rel: str, start_byte: int, encoding: str | None, cap: int) -> dict[str, Any]:
    """At most `cap` bytes of the open file's text from a byte offset (a split character at either end is left
    out)."""
    enc = sniff(f, rel, encoding)
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
    text, used = decode_part(data, enc, rel, final=nul < 0 and begin + len(data) >= size)
    end = begin + used
    out: dict[str, Any] = {"path": rel, "encoding": encoding_name(enc), "bytes": f"{begin:,}-{end:,} of {size:,}",
                           "content": text}
    if nul >= 0:
        out["truncated"] = (f"binary data (a NUL byte) at byte {end:,}: the text is shown up to there; "
                            "read_file reads text only")
    elif end < size:
        out["truncated"] = (f"the file goes on after byte {end:,}: read_file(path={rel!r}, start_byte={end}) "
                            "reads on")
        out["next_start_byte"] = end
    return out
