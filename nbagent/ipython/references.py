"""References in a request: `{df}` or `@df` (a variable), `{In[n]}`, `{Out[n]}` and `{Err}` (the notebook itself).

Variables: the model receives a compact summary (type, shape, dtypes, a head, size; never the whole object;
truncation is stated), as a context message recorded in the run's `context_assembled` event. `{name}` must name a
variable: an unknown one is an error before any model call. `@name` is taken as a reference only when `name` is a
variable (so an e-mail address or a decorator in the text is left alone). `{{` and `}}` are literal braces.

The notebook (docs/context.md), all from this kernel's own history and nothing else:

- `{In[n]}`: the source of cell [n] as typed (IPython's raw input history; `In` holds its Python form), clipped
  at `MAX_SOURCE` characters (said so);
- `{Out[n]}`: what cell [n] returned (IPython's `Out`, summarised as variables are), printed (when IPython's
  history recorded it) and displayed (outputs.py: text clipped, images as image parts for a model that takes
  images, described in a line for one that does not, or when too big);
- `{In[-1]}`, `{Out[-2]}`...: counted back from the `%%agent` cell itself (`-1` is the cell run just before it);
- `{Err}`: the last exception of the kernel with its traceback and the failing cell (what `%agent fix` uses).
  `{Err}` always means that; a variable named `Err` is still `@Err`.

A reference that cannot be resolved (`{In[0]}`, `{Out[99]}` when cell [99] has no output, `{Err}` before any
error) is a `BadReference` before any model call: one line saying what exists instead.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nbagent.ipython.outputs import MAX_TEXT, CapturedImage, OutputCapture, human_size
from nbagent.tools.kernel import summarize

_BRACED = re.compile(r"\{\{|\}\}|\{\s*(In|Out)\s*\[\s*(-?\d+)\s*\]\s*\}|\{(Err)\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
_AT = re.compile(r"(?<![\w.@])@([A-Za-z_][A-Za-z0-9_]*)")

MAX_SOURCE = 8_000
MAX_IMAGES = 4  # image parts in one request; more are described instead


class UnknownVariable(ValueError):
    """`{name}` in a request names no variable of the notebook."""


class BadReference(ValueError):
    """`{In[n]}`, `{Out[n]}` or `{Err}` names nothing this kernel has."""


@dataclass
class Notebook:
    """What the references may read: the kernel's own history, as of the running `%%agent` cell."""

    current: int  # the execution count of the %%agent cell
    inputs: Sequence[str] = ()  # IPython's In
    results: Mapping[int, Any] = field(default_factory=dict)  # IPython's Out
    printed: Mapping[int, Any] = field(default_factory=dict)  # IPython's history_manager.outputs (IPython 9)
    captured: OutputCapture | None = None
    last_error: dict[str, str] | None = None

    @classmethod
    def of(cls, shell: Any, captured: OutputCapture | None, last_error: dict[str, str] | None) -> Notebook:
        ns = getattr(shell, "user_ns", {}) or {}
        count = getattr(shell, "execution_count", None)
        history = getattr(shell, "history_manager", None)
        inputs = getattr(history, "input_hist_raw", None)  # as typed: `%matplotlib inline`, not In's Python form
        if not isinstance(inputs, list) or len(inputs) < 2:
            inputs = ns.get("In")
        results = ns.get("Out")
        printed = getattr(history, "outputs", None)
        return cls(current=count - 1 if isinstance(count, int) and count > 1 else 1,
                   inputs=inputs if isinstance(inputs, list) else [],
                   results=results if isinstance(results, dict) else {},
                   printed=printed if isinstance(printed, dict) else {}, captured=captured, last_error=last_error)

    def printed_text(self, n: int, limit: int = MAX_TEXT) -> tuple[str, int]:
        """(the first `limit` characters cell [n] printed, how many it printed): a cell that printed 25 MB is not
        joined into one string to show 2,000 characters of it."""
        parts: list[str] = []
        kept = total = 0
        for out in self.printed.get(n) or ():
            if getattr(out, "output_type", "") in ("out_stream", "err_stream"):
                for piece in (getattr(out, "bundle", {}) or {}).get("stream", []):
                    text = piece if isinstance(piece, str) else str(piece)
                    total += len(text)
                    if kept < limit:
                        parts.append(text[:limit - kept])
                        kept += len(parts[-1])
        return "".join(parts), total

    def has_output(self, n: int) -> bool:
        cell = self.captured.cell(n) if self.captured is not None else None
        return n in self.results or bool(cell and cell.outputs) or self.printed_text(n, 1)[1] > 0

    def with_output(self) -> list[int]:
        counts = set(self.results) | {n for n in self.printed if self.printed_text(n, 1)[1] > 0}
        if self.captured is not None:
            counts |= {n for n, c in self.captured.cells.items() if c.outputs}
        return sorted(n for n in counts if isinstance(n, int) and 0 < n < self.current)


@dataclass(frozen=True)
class Ref:
    kind: str  # In | Out | Err
    count: int | None = None

    @property
    def name(self) -> str:
        return self.kind if self.count is None else f"{self.kind}[{self.count}]"


@dataclass
class ImageRef:
    """An image in a context message until the model is known (`for_model`): a part, or a line describing it."""

    image: CapturedImage
    count: int

    def describe(self) -> str:
        return self.image.describe(self.count)


def _cells(counts: list[int]) -> str:
    if not counts:
        return "no cell has an output in this kernel yet"
    shown = ", ".join(f"[{n}]" for n in counts[-12:])
    return ("cells with outputs: " + ("…, " if len(counts) > 12 else "") + shown)


def _resolve(kind: str, index: int, nb: Notebook) -> Ref:
    written = f"{{{kind}[{index}]}}"
    if index == 0:
        raise BadReference(f"%%agent: {written}: there is no cell [0]; cells are numbered from [1], and "
                           f"{{{kind}[-1]}} is the cell run just before this one")
    n = nb.current + index if index < 0 else index
    which = f"; {_cells(nb.with_output())}" if kind == "Out" else ""
    if n < 1:
        raise BadReference(f"%%agent: {written}: only {nb.current - 1} cell(s) ran before this one in this "
                           f"kernel{which}")
    if n == nb.current:
        raise BadReference(f"%%agent: {written} is this %%agent cell itself ([{n}]); {{{kind}[-1]}} is the cell "
                           f"run just before it{which}")
    if n > nb.current:
        raise BadReference(f"%%agent: {written}: cell [{n}] has not run yet (this cell is [{nb.current}]){which}")
    if kind == "In" and (n >= len(nb.inputs) or not str(nb.inputs[n]).strip()):
        raise BadReference(f"%%agent: {written}: this kernel has no source for cell [{n}]")
    if kind == "Out" and not nb.has_output(n):
        raise BadReference(f"%%agent: {written}: cell [{n}] has no output in this kernel "
                           f"({_cells(nb.with_output())}); Out[n] is what cell [n] returned, printed or displayed")
    return Ref(kind, n)


def expand_all(prompt: str, namespace: Mapping[str, Any], notebook: Notebook | None = None
               ) -> tuple[str, list[str], list[Ref]]:
    """(the prompt with references written as `name`, the variables referenced, the notebook references), in
    order. Raises UnknownVariable / BadReference before anything is sent."""
    names: list[str] = []
    refs: list[Ref] = []

    def braced(m: re.Match[str]) -> str:
        if m.group(0) == "{{":
            return "{"
        if m.group(0) == "}}":
            return "}"
        if m.group(1) or m.group(3):
            if notebook is None:
                return m.group(0)
            if m.group(3):
                if notebook.last_error is None:
                    raise BadReference("%%agent: {Err}: no cell has failed in this kernel yet, so there is no error "
                                       "to show")
                ref = Ref("Err")
            else:
                ref = _resolve(m.group(1), int(m.group(2)), notebook)
            if ref not in refs:
                refs.append(ref)
            return f"`{ref.name}`"
        name = m.group(4)
        if name not in namespace:
            raise UnknownVariable(
                f"%%agent: {{{name}}} is not a variable of this notebook; define it first, or write {{{{{name}}}}} "
                "for literal braces"
            )
        if name not in names:
            names.append(name)
        return f"`{name}`"

    text = _BRACED.sub(braced, prompt)

    def at(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in namespace:
            return m.group(0)
        if name not in names:
            names.append(name)
        return f"`{name}`"

    return _AT.sub(at, text), names, refs


def expand(prompt: str, namespace: Mapping[str, Any]) -> tuple[str, list[str]]:
    """(the prompt with references written as `name`, the names referenced, in order)."""
    text, names, _ = expand_all(prompt, namespace)
    return text, names


def context_message(names: list[str], namespace: Mapping[str, Any]) -> dict[str, Any] | None:
    if not names:
        return None
    parts = ["Variables of the user's notebook mentioned in the request (summaries, not the whole objects; "
             "use inspect_variable for more):"]
    for name in names:
        parts.append(f"`{name}`: " + json.dumps(summarize(namespace[name]), ensure_ascii=False, default=str))
    return {"role": "user", "content": "\n\n".join(parts)}


def _clip(text: str, limit: int) -> tuple[str, str]:
    if len(text) <= limit:
        return text, ""
    return text[:limit], f"\n[… clipped: {len(text):,} characters, the first {limit:,} shown]"


def _fence(text: str, lang: str = "") -> str:
    ticks = "````" if "```" in text else "```"
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def notebook_message(refs: list[Ref], nb: Notebook) -> dict[str, Any] | None:
    """One user message with the cells referenced; its content holds `ImageRef`s until `for_model` runs."""
    if not refs:
        return None
    parts: list[Any] = ["Cells of the user's notebook mentioned in the request (from this kernel's history; long "
                        "texts are clipped and say so):"]
    for ref in refs:
        if ref.kind == "In":
            source, note = _clip(str(nb.inputs[ref.count or 0]), MAX_SOURCE)  # (an In ref has a count)
            parts.append(f"`{ref.name}` (the source of cell [{ref.count}]):\n" + _fence(source, "python") + note)
        elif ref.kind == "Err":
            e = nb.last_error or {}
            parts.append(f"`Err` (the last error of this kernel): {e.get('type')}: {e.get('message')}\n\n"
                         "The failing cell:\n" + _fence(e.get("source", ""), "python") + "\n\nThe traceback:\n"
                         + _fence(e.get("traceback", "")))
        else:
            parts.extend(_out_parts(ref.count or 0, nb))
    return {"role": "user", "content": parts}


def _out_parts(n: int, nb: Notebook) -> list[Any]:
    lines = [f"`Out[{n}]` (what cell [{n}] returned, printed and displayed):"]
    parts: list[Any] = []
    if n in nb.results:
        lines.append("returned: " + json.dumps(summarize(nb.results[n]), ensure_ascii=False, default=str))
    text, total = nb.printed_text(n, MAX_TEXT)
    if total:
        note = f"\n[… clipped: {total:,} characters, the first {MAX_TEXT:,} shown]" if total > len(text) else ""
        lines.append("printed:\n" + _fence(text) + note)
    cell = nb.captured.cell(n) if nb.captured is not None else None
    for out in cell.outputs if cell is not None else []:
        if out.image is not None:
            lines.append(f"displayed {out.image.describe(n)}:" if out.image.data is not None else
                         f"displayed {out.image.describe(n)}; not sent: {out.image.why_not}")
            if out.image.data is not None:
                parts.append("\n".join(lines))
                parts.append(ImageRef(out.image, n))
                lines = []
        elif out.kind == "display_data" or n not in nb.results:  # a result IPython's Out did not keep: its text
            others = [m for m in out.mimes if m != "text/plain"]
            verb = "displayed" if out.kind == "display_data" else "returned"
            head = verb + (f" ({', '.join(others)}; its text form)" if others else "")
            lines.append(head + ":\n" + _fence(out.text or "") + (f"\n[… clipped: {out.text_truncated}]"
                                                                 if out.text_truncated else ""))
    if cell is not None and cell.dropped:
        lines.append(f"({cell.dropped} more output(s) of this cell were not kept)")
    if lines:
        parts.append("\n".join(lines))
    return parts


def accepts_images(model: str | None) -> bool:
    """Whether the model takes image parts (`nbagent.models.llm.accepts_images`: as litellm knows it; the offline models
    are text models, so images reach them as the line describing them)."""
    from nbagent.models.llm import accepts_images as takes

    return takes(model) if model else False  # (takes("") is False too: no model, no images)


def for_model(context: list[dict[str, Any]], model: str | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The context with every `ImageRef` made an image part (a model that takes images, up to MAX_IMAGES) or a line
    describing it; and a note for each image that was not sent, to show in the cell."""
    if not any(isinstance(m.get("content"), list) for m in context):
        return context, []
    vision: bool | None = None
    sent = 0
    notes: list[str] = []
    out = []
    for message in context:
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            continue
        parts: list[dict[str, Any]] = []
        for part in content:
            if isinstance(part, str):
                _text(parts, part)
            elif isinstance(part, ImageRef):
                if vision is None:
                    vision = accepts_images(model)
                if vision and sent < MAX_IMAGES:
                    sent += 1
                    url = f"data:{part.image.mime};base64," + base64.b64encode(part.image.data or b"").decode()
                    parts.append({"type": "image_url", "image_url": {"url": url}})
                    continue
                why = (f"{model} does not take images (as litellm knows it)" if not vision else
                       f"only {MAX_IMAGES} images are sent in one request")
                _text(parts, f"(the image itself is not sent: {why})")
                notes.append(f"nbagent: Out[{part.count}]: {part.describe()} is described to the model, not sent: "
                             f"{why}")
            else:
                parts.append(part)
        if all(p["type"] == "text" for p in parts):
            out.append({**message, "content": "\n\n".join(p["text"] for p in parts)})
        else:
            out.append({**message, "content": parts})
    return out, notes


def _text(parts: list[dict[str, Any]], text: str) -> None:
    if parts and parts[-1]["type"] == "text":
        parts[-1]["text"] += "\n\n" + text
    else:
        parts.append({"type": "text", "text": text})


def too_big_notes(refs: list[Ref], nb: Notebook) -> list[str]:
    """One line for each referenced image that is only described (too big, unreadable or no longer kept)."""
    notes = []
    for ref in refs:
        cell = nb.captured.cell(ref.count) if ref.kind == "Out" and nb.captured is not None and ref.count else None
        for out in cell.outputs if cell is not None else []:
            if out.image is not None and out.image.data is None:
                notes.append(f"nbagent: Out[{ref.count}]: {out.image.describe(ref.count)} is described to the model, "
                             f"not sent: {out.image.why_not}")
    return notes


__all__ = ["BadReference", "ImageRef", "Notebook", "Ref", "UnknownVariable", "accepts_images", "context_message",
           "expand", "expand_all", "for_model", "human_size", "notebook_message", "too_big_notes"]
