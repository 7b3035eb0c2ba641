"""The lines nbagent shows in a cell beside a run's record, and how it names cells.

All of them are displays (text/plain and text/html), never stderr: stderr is drawn pink, like an error, and
these are notes. The ones that can change later (an interruption that a later cell continued) get a display id.
"""

from __future__ import annotations

import html
from typing import Any, NamedTuple


def execution_count(shell: Any) -> int | None:
    """The number JupyterLab shows for the cell running now ([3]).

    IPython 9 raises `shell.execution_count` before the cell runs (so it reads one ahead while the cell runs);
    IPython 8 raised it after. Its display hook knows which (`prompt_count`, the number of this cell's Out[]), so
    that is asked first; failing it, the count is read the IPython 9 way."""
    hook = getattr(shell, "displayhook", None)
    try:
        count = getattr(hook, "prompt_count", None)
    except Exception:
        count = None
    if isinstance(count, int) and count > 0:
        return count
    count = getattr(shell, "execution_count", None)
    return count - 1 if isinstance(count, int) and count > 1 else None


class Shown(NamedTuple):
    """One output holding a run: its display id, the cell it is in, and that cell's execution count."""

    display_id: str
    cell_id: str | None
    count: int | None


def cell_label(cell_id: str | None, count: int | None) -> str:
    """How a person finds a cell: its execution count as JupyterLab shows it ([3]), and the start of its id."""
    parts = [f"[{count}]"] if count else []
    if cell_id:
        parts.append(f"id {cell_id[:8]}")
    return "cell " + " · ".join(parts) if parts else "an earlier cell"


class Note:
    """A line of information in a cell (`{Out[n]}` described to the model, not sent; an image too big...)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        # no colours of our own: the theme's text colour keeps its contrast in light and dark themes
        lines = self.text.split("\n")
        page = "".join(f'<p class="nbagent-note nbagent-info">{html.escape(line)}</p>' for line in lines)
        return {"text/plain": self.text, "text/html": page}


def show_notes(lines: list[str]) -> None:
    """Each line as a note in the cell (one display for all of them)."""
    if lines:
        from IPython.display import display

        display(Note("\n".join(lines)))


class ContinuationNote:
    """Shown above the record of a run continued in a later cell, so it does not read as a second run."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {"text/plain": self.text,
                "text/html": f'<p class="nbagent-continues"><strong>↪</strong> {html.escape(self.text[2:])}</p>'}


class InterruptNote:
    """Under the record of an interrupted run: how to continue it. A display (not stderr) with its own id, so that
    when the run is continued in a later cell this line can say so instead of still asking to resume."""

    def __init__(self, text: str, done: bool = False) -> None:
        self.text, self.done = text, done

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        mark = "↪" if self.done else "⏸"
        return {"text/plain": f"{mark} {self.text}",
                "text/html": f'<p class="nbagent-note"><strong>{mark}</strong> {html.escape(self.text)}</p>'}
