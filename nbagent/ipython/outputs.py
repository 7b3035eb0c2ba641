"""What the notebook's cells displayed, kept per execution count, so `{Out[n]}` can bring it into a request.

IPython keeps a cell's *result* (`Out[n]`) but not what it *displayed* (a matplotlib figure, `display(...)`), so
nbagent listens to the shell's display publisher (`shell.display_pub.publish`) and its display hook (the
`execute_result` bundle, for a result shown as an image), and files each output under the execution count of the
cell that made it (counted from `pre_run_cell`; a figure flushed by matplotlib's `post_execute` hook still
belongs to its cell). Only what this kernel showed since nbagent was loaded is there: nothing from outside the
kernel's own history.

Bounded: the outputs of the last `KEEP_CELLS` cells, `KEEP_PER_CELL` outputs each, texts clipped to `MAX_TEXT`
characters, and image bytes only up to `MAX_IMAGE_BYTES` (a bigger image is kept as a description: format,
pixel size, byte size; its bytes are never held, nor sent). `%agent`/`%%agent` cells are not captured (their
outputs are nbagent's own run views).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import struct
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

KEEP_CELLS = 20
KEEP_PER_CELL = 8
MAX_TEXT = 2_000
MAX_IMAGE_BYTES = 1_000_000  # per image sent to a model (OpenAI takes up to 20 MB; logs keep what was sent)
MAX_HELD_BYTES = 16_000_000  # all captured image bytes together; the oldest cells go first
TOO_BIG = f"over the {MAX_IMAGE_BYTES // 1_000_000} MB limit for an image sent to a model"
UNREADABLE = "its data could not be read"
EVICTED = "its bytes are no longer kept (only the images of the last cells are)"
IMAGE_TYPES = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/webp": "WebP"}


@dataclass
class CapturedImage:
    mime: str
    size: int  # bytes
    width: int | None = None
    height: int | None = None
    data: bytes | None = None  # None when over MAX_IMAGE_BYTES (or unreadable): described, never sent
    why_not: str | None = None  # why `data` is None: said with the description

    @property
    def kind(self) -> str:
        return IMAGE_TYPES.get(self.mime, self.mime)

    def describe(self, count: int | None) -> str:
        dims = f", {self.width}\u00d7{self.height}" if self.width and self.height else ""
        where = f", from cell [{count}]" if count is not None else ""
        return f"a {self.kind} image{dims}, {human_size(self.size)}{where}"


@dataclass
class CapturedOutput:
    kind: str  # display_data | execute_result
    mimes: list[str]
    text: str | None = None  # text/plain, clipped
    text_truncated: str | None = None
    image: CapturedImage | None = None


@dataclass
class CellOutputs:
    count: int
    outputs: list[CapturedOutput] = field(default_factory=list)
    dropped: int = 0  # outputs over KEEP_PER_CELL, counted not kept


def human_size(n: int) -> str:
    if n < 1000:
        return f"{n} B"
    if n < 1_000_000:
        return f"{n / 1000:.0f} KB"
    return f"{n / 1_000_000:.1f} MB"


def image_dimensions(mime: str, head: bytes) -> tuple[int | None, int | None]:
    """Width and height from the first bytes of a PNG, GIF or JPEG (None when they cannot be read).

    Read from the headers, not decoded: only the line describing the image needs them, and the kernel's images
    may be tens of megabytes (a cut header gives no dimensions, never an error)."""
    with contextlib.suppress(struct.error):
        if mime == "image/png" and head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR":
            w, h = struct.unpack(">II", head[16:24])
            return w, h
        if mime == "image/gif" and head[:4] == b"GIF8":
            w, h = struct.unpack("<HH", head[6:10])
            return w, h
        if mime == "image/jpeg" and head[:2] == b"\xff\xd8":
            i = 2
            while i + 9 < len(head):
                if head[i] != 0xFF:
                    i += 1
                    continue
                marker = head[i + 1]
                if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                    i += 2
                    continue
                length = struct.unpack(">H", head[i + 2:i + 4])[0]
                if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
                    h, w = struct.unpack(">HH", head[i + 5:i + 9])
                    return w, h
                i += 2 + length
    return None, None


def read_image(mime: str, value: Any) -> CapturedImage | None:
    """A display bundle's image (raw bytes, or base64 text as IPython sends it), held only if small enough."""
    if isinstance(value, list | tuple) and value:  # (data, metadata) from some _repr_png_
        value = value[0]
    if isinstance(value, bytes | bytearray | memoryview):
        if isinstance(value, memoryview) and (value.ndim != 1 or value.format != "B"):
            value = value.cast("B") if value.c_contiguous else memoryview(value.tobytes())
        size = value.nbytes if isinstance(value, memoryview) else len(value)
        if size > MAX_IMAGE_BYTES:  # described from its first bytes: never copied whole
            return CapturedImage(mime, size, *image_dimensions(mime, bytes(value[:65536])), why_not=TOO_BIG)
        raw = bytes(value)
        return CapturedImage(mime, len(raw), *image_dimensions(mime, raw[:65536]), data=raw)
    if isinstance(value, str):
        start, end = 0, len(value)  # the base64 text without surrounding whitespace, found without copying it
        while start < end and value[start].isspace():
            start += 1
        while end > start and value[end - 1].isspace():
            end -= 1
        size = (end - start) * 3 // 4 - value[max(start, end - 2):end].count("=")
        first = value[start:min(end, start + 87384)]
        try:
            head = base64.b64decode(first + "=" * (-len(first) % 4))  # about 64 KB of the start
        except (binascii.Error, ValueError):
            return CapturedImage(mime, size, why_not=UNREADABLE)
        if size > MAX_IMAGE_BYTES:
            return CapturedImage(mime, size, *image_dimensions(mime, head), why_not=TOO_BIG)
        try:
            raw = base64.b64decode(value[start:end], validate=False)
        except (binascii.Error, ValueError):
            return CapturedImage(mime, size, *image_dimensions(mime, head), why_not=UNREADABLE)
        return CapturedImage(mime, len(raw), *image_dimensions(mime, raw[:65536]), data=raw)
    return None


def capture(kind: str, data: Any) -> CapturedOutput | None:
    if not isinstance(data, dict) or not data:
        return None
    out = CapturedOutput(kind=kind, mimes=[str(m) for m in data])
    for mime in IMAGE_TYPES:
        if mime in data:
            out.image = read_image(mime, data[mime])
            if out.image is not None:
                break
    text = data.get("text/plain")
    pieces = [str(t) for t in text] if isinstance(text, list) else [text] if isinstance(text, str) else None
    if pieces is not None:  # only the first MAX_TEXT characters are ever joined
        total, kept, head = sum(len(p) for p in pieces), 0, []
        for p in pieces:
            if kept >= MAX_TEXT:
                break
            head.append(p[:MAX_TEXT - kept])
            kept += len(head[-1])
        out.text = "".join(head)
        if total > MAX_TEXT:
            out.text_truncated = f"{total:,} characters; the first {MAX_TEXT:,} shown"
    return out


class OutputCapture:
    """Listens to one shell's displays; `cell(n)` is what cell [n] displayed (None when nothing was kept)."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.cells: OrderedDict[int, CellOutputs] = OrderedDict()
        self.current: int | None = None  # the execution count of the cell running now, if captured

    def install(self) -> OutputCapture:
        events = getattr(self.shell, "events", None)
        if events is not None:
            events.register("pre_run_cell", self._pre)
            events.register("post_run_cell", self._post)
        pub = getattr(self.shell, "display_pub", None)
        if pub is not None and not getattr(pub.publish, "_nbagent_capture", False):
            original = pub.publish

            def publish(data: Any, metadata: Any = None, *args: Any, **kwargs: Any) -> Any:
                if not kwargs.get("update"):
                    self._add("display_data", data)
                return original(data, metadata, *args, **kwargs)

            publish._nbagent_capture = True  # type: ignore[attr-defined]
            pub.publish = publish
        hook = getattr(self.shell, "displayhook", None)
        write = getattr(hook, "write_format_data", None)
        if hook is not None and write is not None and not getattr(write, "_nbagent_capture", False):
            def write_format_data(format_dict: Any, md_dict: Any = None) -> Any:
                self._add("execute_result", format_dict)
                return write(format_dict, md_dict)

            write_format_data._nbagent_capture = True  # type: ignore[attr-defined]
            hook.write_format_data = write_format_data
        return self

    def _pre(self, info: Any) -> None:
        source = (getattr(info, "raw_cell", "") or "").lstrip()
        count = getattr(self.shell, "execution_count", None)
        # the count is raised before the cell runs: the running cell is the one before it
        if not getattr(info, "store_history", True) or source.startswith(("%agent", "%%agent")) \
                or not isinstance(count, int):
            self.current = None
        else:
            self.current = count - 1

    def _post(self, result: Any) -> None:
        self.current = None

    def _add(self, kind: str, data: Any) -> None:
        count = self.current
        if count is None:
            return
        try:
            out = capture(kind, data)
        except Exception:  # never let a capture break a display
            return
        if out is None:
            return
        cell = self.cells.get(count)
        if cell is None:
            cell = self.cells[count] = CellOutputs(count)
            while len(self.cells) > KEEP_CELLS:
                self.cells.popitem(last=False)
        if len(cell.outputs) >= KEEP_PER_CELL:
            cell.dropped += 1
            return
        cell.outputs.append(out)
        self._trim()

    def _trim(self) -> None:
        held = sum(o.image.size for c in self.cells.values() for o in c.outputs if o.image and o.image.data)
        for cell in list(self.cells.values()):
            if held <= MAX_HELD_BYTES:
                break
            for o in cell.outputs:
                if o.image is not None and o.image.data is not None:
                    held -= o.image.size
                    o.image.data, o.image.why_not = None, EVICTED  # still described; older cells' bytes go first

    def cell(self, count: int) -> CellOutputs | None:
        return self.cells.get(count)


def install(shell: Any) -> OutputCapture:
    existing = getattr(shell, "_nbagent_outputs", None)
    if isinstance(existing, OutputCapture):
        return existing
    capture_ = OutputCapture(shell).install()
    with contextlib.suppress(Exception):  # a shell without attributes: it captures, just not found again
        shell._nbagent_outputs = capture_
    return capture_
