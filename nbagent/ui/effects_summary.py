"""What a run did to the folder and what it was refused, from the log alone: shown beside its answer in every record.

The answer is the model's own account: a record showing only it could say "Wrote report.md" about a write that a
person or a policy denied. `effects(events)` folds the file tools' results (`created`, `written`, `deleted`, and
undo's `restored`) into each file's net change, and lists every call that was refused (a denied plan, a policy's or
a rule's denial, a reject grant) and the writes whose effects are not tracked file by file (`run_python`, user and
MCP tools). The view state carries it as `effects`, with `undone_by` / `undo_history` (nbagent.undo: which undo
run put the run's changes back); record.py and run_view.js render them.

    "effects": {"created": [path], "changed": [path], "deleted": [path],
                "refused": [{"tool", "target", "by", "why", "kind": "plan"|"rule"|"grant"}],
                "other": [{"tool", "target"}]}
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

from ..events import EventBase
from ..tools.control import CONTROL_TOOLS

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
    return (path, key[1], key[2]) if key and isinstance(path, str) else None


def effects(events: Iterable[EventBase]) -> dict[str, Any]:
    """A run's effects (the events of it and of its sub-agents, in log order), as the view state carries them."""
    first: dict[str, tuple[bool, str | None]] = {}  # path -> (there before, its sha256 before)
    last: dict[str, tuple[bool, str | None]] = {}
    plans: dict[str, list[Any]] = {}
    started: dict[tuple[str | None, str], Any] = {}  # (run, call id) -> its tool_call_started payload
    refused: list[dict[str, Any]] = []
    other: list[dict[str, Any]] = []
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
    out: dict[str, Any] = {"created": [], "changed": [], "deleted": [], "refused": refused, "other": other}
    for path, (before, sha_before) in first.items():
        after, sha_after = last[path]
        if before and after and not (sha_before and sha_before == sha_after):
            out["changed"].append(path)
        elif after and not before:
            out["created"].append(path)
        elif before and not after:
            out["deleted"].append(path)
    return out


def _path(arguments: Any) -> str | None:
    value = arguments.get("path") if isinstance(arguments, dict) else None
    return value if isinstance(value, str) else None


def file_count(fx: dict[str, Any] | None) -> int:
    fx = fx or {}
    return sum(len(fx.get(k) or []) for k in ("created", "changed", "deleted"))


def refusal_line(r: dict[str, Any]) -> str:
    """"create_file report.md: denied by policy:none: ...": one refused call, in plain text."""
    what = f"{r.get('tool') or 'a call'}" + (f" {r['target']}" if r.get("target") else "")
    why = str(r.get("why") or "").strip()
    if r.get("kind") == "plan":
        by = "" if why.lower().startswith("denied") else f"plan denied by {r.get('by') or 'someone'}"
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


def shows_effects(view: dict[str, Any]) -> bool:
    """Every ended run shows its effects (none is a fact too); a running one once it has any."""
    fx = view.get("effects")
    if not isinstance(fx, dict):
        return False
    ended = str(view.get("status") or "running") not in ("running", "waiting")
    return ended or bool(file_count(fx) or fx.get("refused") or fx.get("other"))


# ---------------------------------------------------------------------------------------------- undone by

def undo_note(view: dict[str, Any]) -> tuple[str, str]:
    """(tone, sentence) about undos of this run: undone by a standing undo run, or undone and brought back."""
    by = view.get("undone_by")
    if by:
        return "warn", (f"undone by run {by}: the files this run changed were put back, so what it says it did is "
                        f"no longer in the folder (%agent undo {by} brings the changes back)")
    history = [h for h in view.get("undo_history") or [] if isinstance(h, dict)]
    if history:
        h = history[-1]
        return "dim", (f"undone by run {h.get('run_id')}, which run {h.get('undone_by')} undid: this run's changes "
                       "are back in the folder")
    return "", ""


def undoes_line(view: dict[str, Any]) -> str:
    spec = view.get("undoes")
    if not isinstance(spec, dict) or not spec.get("run_id"):
        return ""
    return f"undo of run {spec['run_id']}" + (" and every later run" if spec.get("to") else "")


# ---------------------------------------------------------------------------------------------- rendering

CSS = """
.nbagent-run .nbr-effects{margin:6px 0 4px;padding:5px 10px;border:1px solid var(--nbr-border);border-radius:4px;
background:var(--nbr-bg2)}
.nbagent-run .nbr-effects ul{margin:2px 0;padding-left:1.4em}.nbagent-run .nbr-effects p{margin:2px 0}
.nbagent-run .nbr-effects .nbr-verb{display:inline-block;min-width:5.2em;font-size:11px;text-transform:uppercase;
letter-spacing:.03em}
"""

_VERB_TONE = {"created": "nbr-ok", "changed": "nbr-warn", "deleted": "nbr-bad"}


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def effects_html(view: dict[str, Any]) -> str:
    """The Effects box: each file created, changed, deleted; each refused call; writes not tracked by file."""
    if not shows_effects(view):
        return ""
    fx = view["effects"]
    items = [f'<li><span class="nbr-verb {_VERB_TONE[verb]}">{verb}</span> <code>{_esc(path)}</code></li>'
             for verb in ("created", "changed", "deleted") for path in fx.get(verb) or []]
    items += [f'<li class="nbr-bad"><span class="nbr-verb">⊘ not done</span> {_esc(refusal_line(r))}</li>'
              for r in fx.get("refused") or []]
    if other_line(fx):
        items.append(f'<li class="nbr-muted">{_esc(other_line(fx))}</li>')
    none = '<p class="nbr-muted">No file was created, changed or deleted.</p>'
    body = f"<ul>{''.join(items)}</ul>" if items else none
    undone = f" — put back since by undo run {view['undone_by']}" if view.get("undone_by") and file_count(fx) else ""
    return (f'<h4 class="nbr-section">Effects{_esc(undone)}</h4><div class="nbr-effects" role="note" '
            f'data-files="{file_count(fx)}" data-refused="{len(fx.get("refused") or [])}">{body}</div>')


def effects_text(view: dict[str, Any]) -> list[str]:
    if not shows_effects(view):
        return []
    fx = view["effects"]
    undone = f" (put back since by undo run {view['undone_by']})" if view.get("undone_by") and file_count(fx) else ""
    lines = [f"effects: {files_line(fx)}{undone}"]
    lines += [f"not done: {refusal_line(r)}" for r in fx.get("refused") or []]
    if other_line(fx):
        lines.append(f"effects: {other_line(fx)}")
    return lines


def undo_banner_html(view: dict[str, Any]) -> str:
    tone, sentence = undo_note(view)
    if not sentence:
        return ""
    head, _, rest = sentence.partition(": ")
    return (f'<div class="nbr-banner nbr-{tone}" data-undone-by="{_esc(view.get("undone_by") or "")}">'
            f"<strong>↶ {_esc(head[:1].upper() + head[1:])}</strong>: {_esc(rest)}</div>")
