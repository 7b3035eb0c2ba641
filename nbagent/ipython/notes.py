"""The lines nbagent shows in a cell beside a run's record, how it names cells, and keeping a run's outputs current.

All of them are displays (text/plain and text/html), never stderr: stderr is drawn pink, like an error, and
these are notes. The ones that can change later (an interruption that a later cell continued) get a display id.
`RecordNotes`, a base of `NotebookHost` (host.py), updates them and every earlier record of a run through those
display ids when the run moves on in a later cell, is undone, or is superseded by a fork.
"""

from __future__ import annotations

import html
import logging
from typing import TYPE_CHECKING, Any, NamedTuple

from nbagent.ipython.hoststate import HostState

if TYPE_CHECKING:
    from nbagent.ipython.live import LiveDisplay
    from nbagent.runtime import Agent as RuntimeAgent

log = logging.getLogger("nbagent.ipython")


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
    count: int | None  # type: ignore[assignment]  # a field named as tuple.count (which it hides, as intended)


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


class RecordNotes(HostState):
    """The part of `NotebookHost` that keeps every output of a run saying where the run is now (a base class of
    it): the line above a run continued in a later cell, the records and "Interrupted…" lines of earlier cells,
    the records an undo or a fork changed. It uses the host's store, cell id and display ids."""

    def _execution_count(self) -> int | None:
        """The running cell's number as JupyterLab shows it (notes.py: not `shell.execution_count`, one ahead)."""
        return execution_count(self.shell)

    def continuation_text(self, run_id: str) -> str:
        """Where a run continued in this cell started, and whether its record there is kept up to date."""
        state = self.store.run_state(run_id)
        here = self.cell_id()
        earlier = [s for s in self.display_ids.get(run_id, []) if s.cell_id != here or here is None]
        if earlier:
            first = next((s for s in earlier if s.cell_id == state.cell_id), earlier[0])
            where = cell_label(first.cell_id, first.count)
            return (f"↪ continues run {run_id} from {where}; that cell's record is updated to match this one "
                    "when the run stops.")
        if state.cell_id and state.cell_id != here:
            return (f"↪ continues run {run_id}, started in {cell_label(state.cell_id, None)} (an earlier kernel "
                    "showed it, so its record there may show an older state; this record is the latest).")
        return f"↪ continues run {run_id}."

    def _update_earlier(self, run_id: str, live: LiveDisplay) -> None:
        """Every earlier output of this run shows its state now (same display ids), then this one is remembered."""
        from IPython.display import update_display

        from nbagent.ui.record import RunRecord

        shown = self.display_ids.setdefault(run_id, [])
        if shown and live.final_view is not None:
            record = RunRecord(live.final_view)
            for earlier in shown:
                if earlier.display_id != live.display_id:
                    update_display(record, display_id=earlier.display_id)
            # the earlier cells' "Interrupted… %agent resume" lines: the run was continued here, say so
            here = cell_label(self.cell_id(), self._execution_count())
            for note_id in self.interrupt_notes.pop(run_id, []):
                update_display(InterruptNote(f"Interrupted here, then continued in {here}; the record above shows "
                                             f"where the run is now ({live.final_view.get('status')}).", done=True),
                               display_id=note_id)
        shown.append(Shown(live.display_id, self.cell_id(), self._execution_count()))

    def _refresh_records(self, run_ids: list[str]) -> None:
        """Every record of these runs in the notebook shows them as they are now (an undo just put their files
        back: "undone by", no Undo…). This kernel's own outputs through their display ids; the ones an earlier
        kernel made (before a restart, or in a reopened notebook) are out of its reach, so the records go to the lab
        extension too (comm target `nbagent.records`), which updates every older record of each run."""
        from IPython.display import update_display

        from nbagent.ui.record import bundle
        from nbagent.ui.viewstate import run_view

        records = []
        for run_id in run_ids:
            record = bundle(run_view(self.store, run_id))
            records.append(record)
            for s in self.display_ids.get(run_id) or []:
                update_display(record, raw=True, display_id=s.display_id)
        try:
            from comm import create_comm

            create_comm(target_name="nbagent.records", data={"records": records}).close()
        except Exception as exc:  # no front end to tell (a terminal, or a page without the lab extension)
            log.debug("no front end received the records: %s", exc)

    def _refresh_superseded(self, agent: RuntimeAgent) -> None:
        """Runs forked away get their static records re-rendered with the superseded banner, in place."""
        from IPython.display import update_display

        from nbagent.events.state import RunStatus
        from nbagent.ui.record import RunRecord
        from nbagent.ui.viewstate import run_view

        store = self.store  # (once: every run this kernel showed is looked at, and finding the store costs more)
        shown_runs = list(self.display_ids.items())
        for (run_id, shown), state in zip(shown_runs, store.run_states(r for r, _ in shown_runs), strict=True):
            if state.status == RunStatus.SUPERSEDED:
                record = RunRecord(run_view(store, run_id))
                for s in shown:
                    update_display(record, display_id=s.display_id)
                del self.display_ids[run_id]

