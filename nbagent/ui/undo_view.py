"""The Undo panel: what undoing a run would change, checked against the folder before any button (`undo_offer`),
and what the undo did (`undo_result`), drawn by the same front-end code as the run view (widget.py)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import traitlets

from nbagent.ui.undo_record import again_hint, undo_bundle
from nbagent.ui.widget import CSS, ESM, Clickable

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------- the Undo panel

UNDO_ACTION = {"remove": "removed", "restore": "restored", "recreate": "restored (the run deleted it)"}
CELL_ACTION = {"remove": "removed (the agent added it)", "restore": "restored to its code from before the agent "
               "replaced it", "keep": "kept: you edited it since; it is yours",
               "gone": "not in the notebook any more (deleted since): nothing to undo"}


def _cell_changes(report: Any, conflicts: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The agent's cells the undo removes, restores or keeps (the person's now), listed beside the files by the name
    a person finds them by ("[4] x = 1"); a kept cell is no change."""
    return [{"path": c.name, "kind": "cell", "cell_id": c.cell_id, "action": CELL_ACTION[c.acted],
             "kept": c.kept or c.gone,
             "conflict": (conflicts or {}).get(f"cell {c.cell_id}"), "overwrites_edit": False}
            for c in getattr(report, "cells", [])]


def _words(files: int, cells: int, kept: int, gone: int = 0) -> dict[str, str]:
    """The panel's sentences, by what the undo changes: files, cells, or both (never "files" for cells)."""
    def n(k: int, one: str, many: str) -> str:
        return f"{k} {one if k == 1 else many}"
    every = cells + kept + gone
    what = " and ".join(x for x in (n(files, "file", "files") if files else "", n(every, "cell", "cells")
                                    if every else "") if x) or "nothing undo can change"
    how = [x for x in ("each file goes back to how it was before the run" if files else "",
                       "each cell of the agent's is removed or gets its old code back" if cells else "",
                       "a cell you edited since stays as it is: it is yours" if kept else "",
                       "a cell you deleted stays deleted" if gone else "") if x]
    said = "; ".join(how) + ":"
    question = f"Undo {n(files + cells, 'change', 'changes')}? {said[:1].upper()}{said[1:]}"
    return {"summary": f"it changed {what}", "question": question}


def undo_offer(store: Any, run_id: str, *, to: bool = False, force: bool = False,
               folder: str | Path | None = None, kept: Any = (), gone: Any = ()) -> dict[str, Any]:
    """What undoing `run_id` would do, checked against the folder now (`nbagent.undo.files.preview`), for the Undo panel
    to show before any button: one entry per file with what happens to it, each file changed since the run (a
    conflict, with its diff), an earlier undo that already put the run back, and the calls undo cannot reverse.

    `state` is "ready" (`button` says what a click does), "conflicts" or "undone" (`button` is None: nothing would
    happen but a refusal; `why_not` says why and what to run instead). UndoError when there is nothing to undo."""
    from nbagent.undo.files import preview

    report = preview(store, run_id, to=to, force=force, folder=folder, kept=kept, gone=gone)
    run_id = report.runs[0]
    conflicts = {c.path: c.reason for c in report.conflicts}
    edited = [r.path for r in report.restores if force and r.current_sha256 != r.expect_sha256]
    state = "undone" if report.undone_by else "conflicts" if conflicts else "ready"
    cells = getattr(report, "cells", [])
    n = len(report.restores) + sum(1 for c in cells if not c.kept and not c.gone)
    button = None
    if state == "ready":
        button = f"Undo {n} change{'s' if n != 1 else ''}" + (
            f", overwriting {len(edited)} edited file{'s' if len(edited) != 1 else ''}" if edited else "")
    why_not = (f"already undone by run {report.undone_by}: %agent undo {report.undone_by} brings its changes back"
               if state == "undone" else
               f"{_since(conflicts)} changed since the run: nothing would be "
               f"undone; %agent undo {run_id} --force restores anyway" if state == "conflicts" else None)
    return {"run_id": run_id, "to": to, "force": force, "runs": report.runs, "state": state, "button": button,
            "why_not": why_not, "undone_by": report.undone_by,
            "changes": [{"path": r.path, "action": UNDO_ACTION[r.action], "conflict": conflicts.get(r.path),
                         "overwrites_edit": r.path in edited} for r in report.restores]
            + _cell_changes(report, conflicts),
            "conflicts": [c.model_dump(mode="json") for c in report.conflicts],
            "not_undoable": _once([f"{p.tool} (run {p.run_id}): {p.why}" for p in report.not_undoable]),
            **_words(len(report.restores), n - len(report.restores), sum(1 for c in cells if c.kept and not c.gone),
                     sum(1 for c in cells if c.gone))}


def _once(lines: list[str]) -> list[str]:
    """Each line once, with how many calls it stands for ("run_cell (run R): … (3 calls)")."""
    counts: dict[str, int] = {}
    for line in lines:
        counts[line] = counts.get(line, 0) + 1
    return [line + (f" ({n} calls)" if n > 1 else "") for line, n in counts.items()]


def _since(conflicts: dict[str, str]) -> str:
    """"1 file", "2 cells", "1 file and 1 cell": what changed since the run, by what it is."""
    cells = sum(1 for p in conflicts if p.startswith("cell "))
    files = len(conflicts) - cells
    return " and ".join(f"{k} {w}{'s' if k != 1 else ''}" for k, w in ((files, "file"), (cells, "cell")) if k)


def undo_result(report: Any, store: Any = None) -> dict[str, Any]:
    """An UndoReport as the panel shows it: done, refused (the conflicts with their diffs) or failed. With the
    store, `records`: the static records (MIME bundles) of the runs it undid as the log now tells them ("undone by
    ..."), for the page to put in place of their older records, which a kernel started since cannot reach."""
    state = "refused" if report.conflicts else "failed" if report.failed else "done"
    cells = getattr(report, "cells", [])
    out = {"state": state, "text": report.text(), "undo_run_id": report.undo_run_id,
           "restored": [{"path": r.path, "action": UNDO_ACTION[r.action]} for r in report.restores],
           "cells": [{"path": c["path"], "action": c["action"], "kept": c["kept"]} for c in _cell_changes(report)],
           "conflicts": [c.model_dump(mode="json") for c in report.conflicts], "runs": list(report.runs),
           "said": report.summary() if state == "done" else "",
           "hint": again_hint(report.undo_run_id, bool(report.restores), any(not c.kept and not c.gone for c in cells))
           if state == "done" else ""}
    if store is not None and state == "done":
        from nbagent.ui.record import bundle
        from nbagent.ui.viewstate import run_view

        out["records"] = [bundle(run_view(store, rid)) for rid in report.runs]
    return out


class UndoView(Clickable):
    """The Undo panel: what undoing a run will change, an "Undo N changes" button that asks first, and the result.

    The click is a custom comm message `{"event": "undo"}` (as decisions are, see above); the handler runs
    `run_undo()` (nbagent.undo.files.undo with the run and flags fixed by the host) once, and `result` carries the
    outcome to the page. `{"event": "rendered"}` says a person can see the panel. An offer with nothing to confirm
    (`state` "conflicts" or "undone") runs nothing, whatever is clicked.

    When the undo ends (or, for an offer with nothing to confirm, once the panel is drawn) the panel's output is
    replaced through `display_id` by its static record (ui/undo_record.py), and `ended` carries that bundle to the
    page, so the saved notebook keeps the outcome as HTML and text, not a widget that needs its kernel. `show()`
    displays the panel under that id; `on_done(report)` (the host's) runs after an undo, to refresh the records of
    the runs it undid.
    """

    _esm = ESM
    _css = CSS

    offer = traitlets.Dict().tag(sync=True)
    result = traitlets.Dict().tag(sync=True)
    ended = traitlets.Dict().tag(sync=True)  # the static bundle that replaces the panel, once it is final

    def __init__(self, offer: dict[str, Any], run_undo: Callable[[], Any], *, display_id: str | None = None,
                 store: Any = None, **kwargs: Any) -> None:
        import uuid

        self.run_undo = run_undo
        self.store = store  # given: `result.records` carries the undone runs' records as they are now
        self.display_id = display_id or f"nbagent-undo-{uuid.uuid4().hex}"
        self.on_done: Callable[[Any], None] | None = None
        self._lock = threading.Lock()
        self._started = False
        super().__init__(offer=offer, **kwargs)
        self._listen()

    def show(self) -> None:
        """Display the panel under its display id (the one its static record replaces)."""
        from IPython.display import display

        display(self, display_id=self.display_id)

    def _on_custom(self, widget: Any, content: Any, buffers: Any) -> None:
        super()._on_custom(widget, content, buffers)
        if isinstance(content, dict) and content.get("event") == "rendered" and \
                self.offer.get("state") in ("conflicts", "undone"):
            self.settle()  # nothing to confirm: the refusal, as the saved notebook will keep it

    def _on_event(self, event: str, content: dict[str, Any]) -> None:
        if event == "undo":
            self.undo()

    def __repr__(self) -> str:  # the text/plain beside the widget: what a page without the kernel shows
        run_id = self.offer.get("run_id", "")
        state = self.result.get("state")
        if state:
            return f"nbagent undo of run {run_id}: {state}"
        return f"nbagent undo panel for run {run_id} (%agent undo {run_id} shows it again)"

    def undo(self) -> bool:
        """Run the undo once (a second click, from any view of this panel, is ignored); never raises. An offer with
        nothing to confirm runs nothing."""
        if self.offer.get("state", "ready") != "ready":
            log.debug("ignored an undo click: the offer is %r", self.offer.get("state"))
            return False
        with self._lock:
            if self._started:
                return False
            self._started = True
        from nbagent.undo.files import UndoError

        report = None
        try:
            report = self.run_undo()
            self.result = undo_result(report, self.store)
        except (UndoError, Exception) as exc:
            log.debug("undo from the panel failed", exc_info=True)
            self.result = {"state": "error", "text": str(exc) or type(exc).__name__}
        self.settle()
        if report is not None and self.on_done is not None:
            try:
                self.on_done(report)
            except Exception:
                log.debug("on_done failed", exc_info=True)
        return True

    def settle(self) -> dict[str, str]:
        """Replace the panel's output by its static record (same display id) and hand the page that bundle."""
        bundle = undo_bundle(self.offer, self.result or None)
        self.ended = dict(bundle)
        try:
            from IPython.core.interactiveshell import InteractiveShell
            from IPython.display import update_display

            if InteractiveShell.initialized():  # (outside IPython, update_display would print the bundle)
                update_display(bundle, raw=True, display_id=self.display_id)
        except Exception:
            log.debug("could not replace the undo panel's output", exc_info=True)
        return bundle

    def close(self) -> None:
        layout = getattr(self, "layout", None)
        super().close()
        if layout is not None:
            layout.close()
