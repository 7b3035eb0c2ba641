"""A file's bytes as text, for the file tools: binary refused, the encoding judged from a bounded sample.

Kept apart from the tools because every read and search decodes through these few functions, and their bounds
(SNIFF_BYTES, SAMPLE_BYTES) are what keep a 2 GB one-line file from being read whole to guess its encoding.
"""

from __future__ import annotations

import codecs
from typing import IO

from nbagent.tools.base import ToolError

SNIFF_BYTES = 8192  # a NUL in these means binary
SAMPLE_BYTES = 64 * 1024  # encoding detection of ranged reads and searches looks at this much, never the whole file
COUNT_CHUNK = 1024 * 1024
NL, NUL = b"\n", b"\x00"


def refuse_binary(data: bytes, rel: str) -> None:
    """Refuse bytes with a NUL in their first SNIFF_BYTES: the file tools read text only."""
    if b"\x00" in data[:SNIFF_BYTES]:
        raise ToolError(f"{rel!r} is a binary file; read_file reads text only")


def detect_encoding(sample: bytes, rel: str, *, complete: bool) -> str:
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


def encoding_name(enc: str) -> str:
    """The encoding as a reply names it (a file with a UTF-8 BOM is utf-8 to the model)."""
    return "utf-8" if enc == "utf-8-sig" else enc


def decode_text(data: bytes, encoding: str | None, rel: str) -> tuple[str, str]:
    """Text and encoding of file bytes (already bounded by the caller); binary files are refused."""
    refuse_binary(data, rel)
    if encoding:
        try:
            return data.decode(encoding), encoding
        except (LookupError, UnicodeDecodeError) as exc:
            raise ToolError(f"{rel!r} cannot be decoded as {encoding}: {exc}") from None
    enc = detect_encoding(data, rel, complete=True)
    return data.decode(enc, errors="replace"), encoding_name(enc)


def incremental_decoder(enc: str, rel: str) -> codecs.IncrementalDecoder:
    """A decoder for `enc` that replaces what does not decode; an unknown encoding name is a ToolError."""
    try:
        return codecs.getincrementaldecoder(enc)(errors="replace")
    except LookupError:
        raise ToolError(f"{rel!r}: unknown encoding {enc!r}") from None


def decode_part(data: bytes, enc: str, rel: str, *, final: bool) -> tuple[str, int]:
    """Text of a piece cut out of a file, and how many of its bytes that text covers: a character split by the
    cut is left out (it starts the next piece), so byte offsets given to the model stay exact."""
    dec = incremental_decoder(enc, rel)
    text = dec.decode(data, final=final)
    return text, len(data) - len(dec.getstate()[0])


def sniff(f: IO[bytes], rel: str, encoding: str | None) -> str:
    """Binary check and encoding of an open file from a bounded sample of its start (a ranged read and a search
    both begin so); rewinds the file."""
    sample = f.read(SAMPLE_BYTES)
    refuse_binary(sample, rel)
    enc = encoding or detect_encoding(sample, rel, complete=len(sample) < SAMPLE_BYTES)
    incremental_decoder(enc, rel)  # an unknown encoding name is the model's error, said now
    f.seek(0)
    return enc
