"""What a run did to the folder and what it was refused, from the log alone: shown beside its answer in every record.

The answer is the model's own account: a record showing only it could say "Wrote report.md" about a write that a
person or a policy denied. `effects(events)` folds the file tools' results (`created`, `written`, `deleted`, and
undo's `restored`) into each file's net change, and lists every call that was refused (a denied plan, a policy's or
a rule's denial, a reject grant) and the writes whose effects are not tracked file by file (`run_python`, user and
MCP tools). The view state carries it as `effects`, with `undone_by` / `undo_history` (nbagent.undo.files: which undo
run put the run's changes back); record.py and run_view.js render them.

    "effects": {"created": [path], "changed": [path], "deleted": [path],
                "cells": [{"cell_id", "verb": "added"|"replaced"|"removed"|"restored"|"kept", "name": "[4] x = 1"}],
                "refused": [{"tool", "target", "by", "why", "kind": "plan"|"rule"|"grant"}],
                "other": [{"tool", "target"}]}

A cell is named as the person finds it: the execution count JupyterLab shows beside it, then its first line of code
(undo_cells.cell_name); `cells` holds the notebook cells the run's run_cell and replace_cell calls wrote, and what an
undo run did to cells (removed, restored, or kept because the person edited it).
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

from nbagent.events.model import EventBase
from nbagent.tools.control import CONTROL_TOOLS
from nbagent.undo.cells import ACTED, CELL_TOOLS, CELL_UNDO_TOOL, cell_name, first_line

# A file tool's result key naming the path it changed, and what the file was before and after (True: a file there).
_FILE_RESULTS = {"create_file": ("created", False, True), "write_file": ("written", True, True),
                 "delete_file": ("deleted", True, False)}
_RESTORE = {"remove": (True, False), "restore": (True, True), "recreate": (False, True)}
# Rules that state a fact about the folder (a missing file...): a failed call, listed under Errors, not refused.
_FILE_FACTS = frozenset({"scope.missing", "scope.exists", "scope.not_a_file", "scope.not_a_folder", "scope.changed",
                         "scope.unreadable", "scope.symlink_loop"})


def _change(tool: str, result: dict[str, Any]) -> tuple[str, bool, bool] | None:
    """(path, a file there before, a file there after) of a completed file tool call, from its recorded result."""
    if tool == "restore_file":
        path, action = result.get("restored"), _RESTORE.get(str(result.get("action")))
        return (path, *action) if isinstance(path, str) and action else None
    key = _FILE_RESULTS.get(tool)
    path = result.get(key[0]) if key else None
    if key and isinstance(path, str) and tool == "write_file" and result.get("created") is True:
        return path, False, True  # a write_file where no file was: a create (tools/files.py)
    return (path, key[1], key[2]) if key and isinstance(path, str) else None


def effects(events: Iterable[EventBase]) -> dict[str, Any]:
    """A run's effects (the events of it and of its sub-agents, in log order), as the view state carries them."""
    first: dict[str, tuple[bool, str | None]] = {}  # path -> (there before, its sha256 before)
    last: dict[str, tuple[bool, str | None]] = {}
    plans: dict[str, list[Any]] = {}
    started: dict[tuple[str | None, str], Any] = {}  # (run, call id) -> its tool_call_started payload
    refused: list[dict[str, Any]] = []
    other: list[dict[str, Any]] = []
    cells: dict[str, dict[str, Any]] = {}  # cell id -> its entry, in the order first written
    for e in events:
        p: Any = e.payload
        if e.type == "plan_proposed":
            plans[p.plan_id] = list(p.steps)
        elif e.type == "tool_call_started":
            started[(e.run_id, p.call_id)] = p
        elif e.type == "tool_call_completed":
            result = p.result if isinstance(p.result, dict) else {}
            change = _change(p.tool, result)
            if change is not None:
                path, before, after = change
                first.setdefault(path, (before, result.get("before_sha256")))
                last[path] = (after, result.get("after_sha256"))
                continue
            if _cell(p.tool, result, cells):
                continue
            call = started.get((e.run_id, p.call_id))
            # control tools have nothing to show here: their effect is the conversation (spawn_agent's children show
            # their own)
            if p.tool not in CONTROL_TOOLS and call is not None and str(call.risk) != "READ_ONLY":
                other.append({"tool": p.tool, "target": call.target})
        elif e.type == "plan_rejected":
            for s in plans.get(p.plan_id, []):
                if (e.run_id, s.call_id) not in started:
                    refused.append({"tool": s.tool, "target": s.target or _path(s.arguments), "by": p.by,
                                    "why": p.reason, "kind": "plan"})
        elif e.type == "authorization_denied" and p.rule not in _FILE_FACTS:
            person = p.rule == "grant.reject"
            refused.append({"tool": p.tool, "target": p.target, "by": "a reject grant" if person else
                            f"rule {p.rule}" if p.rule else "policy", "why": p.reason,
                            "kind": "grant" if person else "rule"})
    out: dict[str, Any] = {"created": [], "changed": [], "deleted": [], "cells": list(cells.values()),
                           "refused": refused, "other": other}
    for path, (before, sha_before) in first.items():
        after, sha_after = last[path]
        if before and after and not (sha_before and sha_before == sha_after):
            out["changed"].append(path)
        elif after and not before:
            out["created"].append(path)
        elif before and not after:
            out["deleted"].append(path)
    return out


def _cell(tool: str, result: dict[str, Any], cells: dict[str, dict[str, Any]]) -> bool:
    """Fold a cell tool's completed call into `cells`: a run_cell adds a cell, a replace_cell replaces one (of an
    earlier run; a cell this run added stays "added", named as it was left), an undo's restore_cell removes,
    restores or keeps one. False for any other call."""
    cell_id = result.get("cell_id")
    if not isinstance(cell_id, str) or tool not in (*CELL_TOOLS, CELL_UNDO_TOOL):
        return False
    held = cells.get(cell_id)
    if tool == CELL_UNDO_TOOL:
        action = str(result.get("action"))
        if action not in ACTED:
            return False
        name = str(result.get("name") or cell_name(cell_id, result.get("execution_count"), ""))
        cells[cell_id] = {"cell_id": cell_id, "verb": ACTED[action], "name": name}
        return True
    if not result.get("ran"):
        return False
    verb = held["verb"] if held is not None and held["verb"] == "added" else \
        "added" if tool == "run_cell" else "replaced"
    cells[cell_id] = {"cell_id": cell_id, "verb": verb,
                      "name": cell_name(cell_id, result.get("execution_count"), first_line(result.get("source")))}
    return True


def _path(arguments: Any) -> str | None:
    value = arguments.get("path") if isinstance(arguments, dict) else None
    return value if isinstance(value, str) else None


def file_count(fx: dict[str, Any] | None) -> int:
    fx = fx or {}
    return sum(len(fx.get(k) or []) for k in ("created", "changed", "deleted"))


def by_whom(by: Any) -> str:
    """Who decided, for a person reading their own notebook: the click in this notebook was "you"."""
    return "you" if not by or by == "user" else str(by)


def refusal_line(r: dict[str, Any], *, reader: bool = False) -> str:
    """"create_file report.md: denied by policy:none: ...": one refused call, in plain text (`reader`: the page's
    words, where the person who clicked is "you")."""
    what = f"{r.get('tool') or 'a call'}" + (f" {r['target']}" if r.get("target") else "")
    why = str(r.get("why") or "").strip()
    if r.get("kind") == "plan":
        who = by_whom(r.get("by")) if reader and r.get("by") else r.get("by") or "someone"
        by = "" if why.lower().startswith("denied") else f"plan denied by {who}"
        return f"{what}: " + ": ".join(x for x in (by, why) if x)
    return f"{what}: denied ({r.get('by')}): {why}" if why else f"{what}: denied ({r.get('by')})"


def files_line(fx: dict[str, Any] | None) -> str:
    """"created report.md · changed notes.md", or that no file was touched."""
    fx = fx or {}
    parts = [f"{verb} {', '.join(fx.get(verb) or [])}" for verb in ("created", "changed", "deleted")
             if fx.get(verb)]
    return " · ".join(parts) if parts else "no file created, changed or deleted"


def other_line(fx: dict[str, Any] | None) -> str:
    other = (fx or {}).get("other") or []
    if not other:
        return ""
    names = list(dict.fromkeys(str(o.get("tool")) for o in other))
    return f"also ran {', '.join(names)}: effects not tracked file by file"


def cell_lines(fx: dict[str, Any] | None) -> list[str]:
    """"added [4] df = load()": each cell the run wrote or an undo acted on, as a person finds it."""
    return [f"{c.get('verb')} {c.get('name')}" for c in (fx or {}).get("cells") or [] if isinstance(c, dict)]


def cells_note(fx: dict[str, Any] | None) -> str:
    """Said under the cells a run wrote (not an undo's): their code's own effects are outside Effects."""
    written = [c for c in (fx or {}).get("cells") or [] if isinstance(c, dict) and c.get("verb") in ("added",
                                                                                                    "replaced")]
    return "what these cells' code did (variables, files it wrote) is not tracked here, nor undone by an undo" \
        if written else ""


def shows_effects(view: dict[str, Any]) -> bool:
    """Every ended run shows its effects (none is a fact too); a running one once it has any."""
    fx = view.get("effects")
    if not isinstance(fx, dict):
        return False
    ended = str(view.get("status") or "running") not in ("running", "waiting")
    return ended or bool(file_count(fx) or fx.get("refused") or fx.get("other") or fx.get("cells"))


# ---------------------------------------------------------------------------------------------- undone by

def undo_note(view: dict[str, Any]) -> tuple[str, str]:
    """(tone, sentence) about undos of this run: undone by a standing undo run, or undone and brought back."""
    by = view.get("undone_by")
    history = [h for h in view.get("undo_history") or [] if isinstance(h, dict)]
    if by:
        did = next((h for h in reversed(history) if h.get("run_id") == by), {})
        return "warn", f"undone by run {by}: {_undone(did, by)}"
    if history:
        h = history[-1]
        cells = [c for c in h.get("cells") or [] if isinstance(c, dict) and c.get("action") != "keep"]
        back = ("this run's changes are back in the folder" if not cells else
                "this run's files are back in the folder" if h.get("files") else "its cells did not come back")
        if cells and h.get("files"):
            back += "; its cells did not come back"
        return "dim", f"undone by run {h.get('run_id')}, which run {h.get('undone_by')} undid: {back}"
    return "", ""


def _undone(did: dict[str, Any], by: str) -> str:
    """What the undo run did, from its own steps (nbagent.undo.files.undo_did): the files put back, each cell removed,
    restored or kept, and what undoing it brings back. A log without those counts says it as before: files."""
    if "files" not in did:
        return (f"the files this run changed were put back, so what it says it did is no longer in the folder "
                f"(%agent undo {by} brings the changes back)")
    files = int(did.get("files") or 0)
    cells = [c for c in did.get("cells") or [] if isinstance(c, dict)]
    names = {a: [str(c.get("name")) for c in cells if c.get("action") == a]
             for a in ("remove", "restore", "keep", "gone")}
    one = files == 1
    parts = [f"the {'file' if one else f'{files} files'} this run changed {'was' if one else 'were'} put back, so "
             f"what it says it did to {'it' if one else 'them'} is no longer in the folder"] if files else []
    if names["remove"]:
        parts.append(f"{'cell' if len(names['remove']) == 1 else 'cells'} {', '.join(names['remove'])} removed")
    if names["restore"]:
        parts.append(f"{', '.join(names['restore'])} got back {'its' if len(names['restore']) == 1 else 'their'} "
                     "code from before")
    parts += [f"{n} kept: you edited it since; it is yours" for n in names["keep"]]
    parts += [f"{n} was deleted since: nothing to undo" for n in names["gone"]]
    touched = bool(names["remove"] or names["restore"])  # cells the undo changed (not kept, not gone)
    text = "; ".join(parts)
    again = (f" (%agent undo {by} brings the files back, not the cells)" if files and touched else
             f" (%agent undo {by} brings the files back)" if files else
             f" (undoing run {by} does not bring cells back)" if touched else "")
    return text + again


def undone_since(view: dict[str, Any]) -> str:
    """Beside the Effects heading of a run undone: "put back since by undo run U" (files), "undone since…" (cells)."""
    fx = view.get("effects") or {}
    by = view.get("undone_by")
    if not by:
        return ""
    if file_count(fx):
        return f"put back since by undo run {by}"
    return f"undone since by undo run {by}" if fx.get("cells") else ""


def undoes_line(view: dict[str, Any]) -> str:
    spec = view.get("undoes")
    if not isinstance(spec, dict) or not spec.get("run_id"):
        return ""
    return f"undo of run {spec['run_id']}" + (" and every later run" if spec.get("to") else "")


# ---------------------------------------------------------------------------------------------- rendering


_VERB_TONE = {"created": "nbr-ok", "changed": "nbr-warn", "deleted": "nbr-bad"}
_CELL_TONE = {"added": "nbr-ok", "replaced": "nbr-warn", "removed": "nbr-bad", "restored": "nbr-warn"}


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def effects_html(view: dict[str, Any]) -> str:
    """The Effects box: each file created, changed, deleted; each refused call; writes not tracked by file."""
    if not shows_effects(view):
        return ""
    fx = view["effects"]
    items = [f'<li><span class="nbr-verb {_VERB_TONE[verb]}">{verb}</span> <code>{_esc(path)}</code></li>'
             for verb in ("created", "changed", "deleted") for path in fx.get(verb) or []]
    items += [f'<li data-cell-id="{_esc(c.get("cell_id"))}"><span class="nbr-verb '
              f'{_CELL_TONE.get(str(c.get("verb")), "")}">{_esc(c.get("verb"))}</span> <code>{_esc(c.get("name"))}'
              '</code></li>' for c in fx.get("cells") or [] if isinstance(c, dict)]
    if cells_note(fx):
        items.append(f'<li class="nbr-muted">{_esc(cells_note(fx))}</li>')
    items += [f'<li class="nbr-bad"><span class="nbr-verb">⊘ not done</span> {_esc(refusal_line(r, reader=True))}</li>'
              for r in fx.get("refused") or []]
    if other_line(fx):
        items.append(f'<li class="nbr-muted">{_esc(other_line(fx))}</li>')
    none = '<p class="nbr-muted">No file was created, changed or deleted.</p>'
    body = f"<ul>{''.join(items)}</ul>" if items else none
    undone = f" — {undone_since(view)}" if undone_since(view) else ""
    return (f'<h4 class="nbr-section">Effects{_esc(undone)}</h4><div class="nbr-effects" role="note" '
            f'data-files="{file_count(fx)}" data-cells="{len(fx.get("cells") or [])}"'
            f' data-refused="{len(fx.get("refused") or [])}">{body}</div>')


def effects_text(view: dict[str, Any]) -> list[str]:
    if not shows_effects(view):
        return []
    fx = view["effects"]
    undone = f" ({undone_since(view)})" if undone_since(view) else ""
    lines = [f"effects: {files_line(fx)}{undone}"]
    lines += [f"effects: {line}" for line in cell_lines(fx)]
    if cells_note(fx):
        lines.append(f"effects: {cells_note(fx)}")
    lines += [f"not done: {refusal_line(r)}" for r in fx.get("refused") or []]
    if other_line(fx):
        lines.append(f"effects: {other_line(fx)}")
    return lines


def undo_banner_html(view: dict[str, Any]) -> str:
    tone, sentence = undo_note(view)
    if not sentence:
        return ""
    head, _, rest = sentence.partition(": ")
    return (f'<div class="nbr-banner nbr-{tone} nbr-undone" data-undone-by="{_esc(view.get("undone_by") or "")}">'
            f"<strong>↶ {_esc(head[:1].upper() + head[1:])}</strong>: {_esc(rest)}</div>")
