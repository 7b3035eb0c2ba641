"""The compact record: a finished run's record in one or two lines, the whole record behind them.

After ten requests a notebook is mostly records of 30-60 lines each. So the record of a run that ended as it should
(`completed`, `completed_with_errors`, or superseded) shows, until opened, two lines:

    ✓ completed · Load sales.csv and plot revenue by month
    Revenue grew 12% from March to April · 4 tool calls · 2 cells and 1 file changed · $0.0021

the status, the request's first line; the answer's first line (or what went wrong), the counts, the cost. A run that
waits, failed, was interrupted or still runs is never folded: its card, its error and the line that answers it stay
in sight. The `text/html` record (a `<details>`, so nbconvert's HTML and GitHub fold it with no script) and the lab
extension's (labextension/src/run_view/record.js) show these words; `text/plain` stays whole, since it is what the
model and tools read. Plain Python, no IPython import.
"""

from __future__ import annotations

import re
from typing import Any

from nbagent.ui.record_format import clip, fmt_cost, plural, short_id
from nbagent.ui.record_words import STATUS_ICON, answerable, outcome_warning, tool_calls

COMPACT = ("completed", "completed_with_errors", "superseded")
REQUEST_CHARS = 100
ANSWER_CHARS = 120
_CELL_TOOLS = ("run_cell", "replace_cell")
_MARKS = "#>*-+` \t"  # markdown a first line starts with, not its words
_EMPHASIS = re.compile(r"\*\*|__|`")  # and the marks of bold and code inside it


def compact(view: dict[str, Any]) -> bool:
    """Whether the record folds to its summary: a run that ended as it should, with nothing left to answer."""
    v = view or {}
    status = "superseded" if v.get("superseded_by") else str(v.get("status") or "running")
    return status in COMPACT and not answerable(v)


def _first_line(text: Any, width: int) -> str:
    for line in str(text or "").splitlines():
        words = _EMPHASIS.sub("", line.strip().lstrip(_MARKS)).strip()
        if words:
            return clip(words, width)
    return ""


def cells_changed(view: dict[str, Any]) -> int:
    """The cells the run added or replaced (each once), from its timeline's completed cell tools."""
    cells: set[str] = set()
    for s in view.get("steps") or []:
        if s.get("kind") == "tool" and s.get("tool") in _CELL_TOOLS and s.get("status") == "ok":
            c = s.get("cell") if isinstance(s.get("cell"), dict) else {}
            cells.add(str(c.get("cell_id") or s.get("call_id") or s.get("id")))
    return len(cells)


def files_changed(view: dict[str, Any]) -> int:
    fx = view.get("effects")
    return sum(len(fx.get(k) or []) for k in ("created", "changed", "deleted")) if isinstance(fx, dict) else 0


def changed_words(view: dict[str, Any]) -> str:
    """"2 cells and 1 file changed", "nothing changed in the notebook or the folder"."""
    parts = [plural(n, one, many) for n, one, many in ((cells_changed(view), "cell", "cells"),
                                                      (files_changed(view), "file", "files")) if n]
    return f"{' and '.join(parts)} changed" if parts else "no cell or file changed"


def summary_head(view: dict[str, Any]) -> str:
    """Line one: "✓ completed · the request's first line"."""
    v = view or {}
    status = "superseded" if v.get("superseded_by") else str(v.get("status") or "running")
    request = _first_line(v.get("prompt"), REQUEST_CHARS)
    head = f"{STATUS_ICON.get(status, '')} {status.replace('_', ' ')}".strip()
    return f"{head} · {request}" if request else head


def summary_tail(view: dict[str, Any]) -> str:
    """Line two: what came of it (the answer's first line, what went wrong, an undo) and the counts and cost."""
    v = view or {}
    said: list[str] = []
    if v.get("superseded_by"):
        said.append(f"superseded by run {short_id(v['superseded_by'])}")
    warning = outcome_warning(v)
    if warning:
        said.append(f"⚠ {warning.split(':', 1)[0]}")
    if v.get("undone_by"):
        said.append(f"undone by run {short_id(v['undone_by'])}")
    answer = _first_line(v.get("answer"), ANSWER_CHARS)
    said.append(answer or "no answer")
    totals = v.get("totals") or {}
    said += [plural(tool_calls(totals), "tool call", "tool calls"), changed_words(v),
             fmt_cost(totals.get("cost"), bool(v.get("cost_nominal")))]
    return " · ".join(said)


__all__ = ["COMPACT", "cells_changed", "changed_words", "compact", "files_changed", "summary_head", "summary_tail"]


def summary_words(view: dict[str, Any]) -> dict[str, Any]:
    """The compact record's two lines, and whether the record folds to them (`record_words.words` carries them)."""
    return {"compact": compact(view), "summary": summary_head(view), "summary_more": summary_tail(view)}
