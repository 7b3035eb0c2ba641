"""The Undo panel as the saved notebook keeps it: `text/html` and `text/plain`, no widget.

A widget saved without its state reads "Error displaying widget: model not found" once the notebook is reopened, so
the panel's output is replaced (same display id) by this static bundle when its undo ends, or at once when there
is nothing to confirm (a conflict, a run already undone). It renders the panel's own dicts: the offer
(`undo_view.undo_offer`) and the result (`undo_view.undo_result`). Plain Python, escaped as record.py escapes.
"""

from __future__ import annotations

import html
from typing import Any

from nbagent.ui.record import CSS, diff_html, plural


def again_hint(undo_run_id: Any, files: bool, cells: bool) -> str:
    """What undoing this undo run does: it brings files back, never cells (a removed cell is not inserted again)."""
    head = f"The undo is a recorded run: %agent undo {undo_run_id} undoes it"
    if not cells:
        return head + "."
    return head + (": the files come back, the cells do not" if files else ", but the cells do not come back") + \
        " (ask the agent to run them again)."


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _changes(items: list[dict[str, Any]]) -> tuple[list[str], str]:
    lines = [f"{c.get('path')} — {c.get('action')}" for c in items]
    body = "".join(f"<li><code>{_esc(c.get('path'))}</code> — {_esc(c.get('action'))}</li>" for c in items)
    return lines, f"<ul>{body}</ul>" if body else ""


def _conflicts(items: list[dict[str, Any]]) -> tuple[list[str], str]:
    lines, parts = [], []
    for c in items:
        lines.append(f"conflict: {c.get('path')}: {c.get('reason')}")
        lines += ["    " + line for line in str(c.get("diff") or "").rstrip("\n").splitlines()]
        parts.append(f"<li><code>{_esc(c.get('path'))}</code>: {_esc(c.get('reason'))}"
                     f"{diff_html(str(c['diff'])) if c.get('diff') else ''}</li>")
    return lines, f"<ul>{''.join(parts)}</ul>" if parts else ""


def outcome(offer: dict[str, Any], result: dict[str, Any] | None) -> tuple[str, str, list[str], str, str]:
    """(tone, title, text lines, html body, hint) of the panel's final state."""
    run_id = offer.get("run_id", "")
    result = result or {}
    state = result.get("state")
    if state == "done":
        restored = result.get("restored") or []
        cells = result.get("cells") or []
        lines, body = _changes(restored + cells)
        uid = result.get("undo_run_id") or ""
        said = str(result.get("said") or plural(len(restored), "file", "files") + " put back")
        hint = str(result.get("hint") or again_hint(uid, bool(restored), any(not c.get("kept") for c in cells)))
        return "ok", f"✓ undone: {said} (undo run {uid})", lines, body, hint
    if state == "refused" or (state is None and offer.get("state") == "conflicts"):
        conflicts = result.get("conflicts") if state else offer.get("conflicts")
        lines, body = _conflicts(conflicts or [])
        cells = sum(1 for c in conflicts or [] if str(c.get("path") or "").startswith("cell "))
        files = len(conflicts or []) - cells
        what = " and ".join(plural(k, w, w + "s") for k, w in ((files, "file"), (cells, "cell")) if k) or "nothing"
        title = (f"⚠ undo refused: {what} {'was' if len(conflicts or []) == 1 else 'were'} changed since the run; "
                 "nothing was changed")
        return "warn", title, lines, body, f"To restore anyway: %agent undo {run_id} --force"
    if state is None and offer.get("state") == "undone":
        by = offer.get("undone_by") or ""
        return ("dim", f"↶ already undone by run {by}: nothing to undo", [], "",
                f"To bring the run's changes back: %agent undo {by}")
    if state is None:
        lines, body = _changes(offer.get("changes") or [])
        return "dim", "not undone: the panel was closed before anyone confirmed", lines, body, \
            f"%agent undo {run_id} shows it again"
    text = str(result.get("text") or "")
    return "bad", "✗ undo failed", text.splitlines(), f"<pre>{_esc(text)}</pre>" if text else "", \
        f"%agent undo {run_id} shows it again"


def undo_bundle(offer: dict[str, Any], result: dict[str, Any] | None = None) -> dict[str, str]:
    """The static bundle of an Undo panel, for `update_display(..., raw=True, display_id=...)`."""
    tone, title, lines, body, hint = outcome(offer, result)
    run_id = offer.get("run_id", "")
    not_undoable = [str(x) for x in offer.get("not_undoable") or []]
    text = [f"nbagent undo of run {run_id}: {title}", *("  " + line for line in lines)]
    text += [f"  not undoable: {x}" for x in not_undoable]
    text.append(hint)
    cannot = ("<p>Not undoable (listed, not touched):</p><ul>" + "".join(f"<li>{_esc(x)}</li>" for x in not_undoable)
              + "</ul>") if not_undoable else ""
    page = (f'<div class="nbagent-run nbr-undo-record" data-run-id="{_esc(run_id)}"><style>{CSS}</style>'
            f'<h4 class="nbr-title"><span>Undo of run <code>{_esc(run_id)}</code></span></h4>'
            f'<p class="nbr-{tone}"><strong>{_esc(title)}</strong></p>{body}{cannot}'
            f'<p class="nbr-hint">{_esc(hint)}</p></div>')
    return {"text/plain": "\n".join(text), "text/html": page}
