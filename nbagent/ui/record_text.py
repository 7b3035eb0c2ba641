"""The record as plain text: the `text/plain` of the record's MIME bundle and `repr(RunRecord)`.

Split out of `record.py`: a compact summary (status, prompt, one line per step, plans, answer, totals, log) in the
words of `record_words`, for a terminal or a front end that shows no HTML.
"""

from __future__ import annotations

from typing import Any

from nbagent.ui.effects_summary import effects_text, undo_note, undoes_line
from nbagent.ui.record_format import NOMINAL_NOTE, clip, indented, plural
from nbagent.ui.record_words import (
    PLAN_STATUS,
    STATUS_ICON,
    answerable,
    cell_label,
    decision_line,
    high_risk_effects,
    model_note,
    outcome_warning,
    pending_hint,
    pending_text,
    plan_decisions,
    plan_summary,
    reproduced_line,
    step_summary,
    step_window,
    timeline_label,
    totals_line,
    tree_line,
    undo_hint,
)


def render_text(view: dict[str, Any]) -> str:
    """A compact plain-text summary: status, prompt, one line per step, plans, answer, totals, log."""
    v = view or {}
    status = str(v.get("status") or "running")
    lines = [f"nbagent run {v.get('run_id', '')} · {STATUS_ICON.get(status, '')} {status} · model {v.get('model')}"
             f" · autonomy {v.get('autonomy')}" + (f" · cell {cell_label(v)}" if v.get("cell_id") else "")]
    if reproduced_line(v):
        lines.append(f"↻ {reproduced_line(v)}")
    if v.get("superseded_by"):
        lines.append(f"superseded by run {v['superseded_by']} (an earlier cell was re-run)")
    if undo_note(v)[1]:
        lines.append(f"↶ {undo_note(v)[1]}")
    if undoes_line(v):
        lines.append(undoes_line(v))
    if v.get("prompt"):
        lines.append("prompt: " + clip(v["prompt"], 300))
    if answerable(v):
        lines.append(f"{pending_text(v)}: in a new cell, {pending_hint(v)}")
    elif status == "interrupted":
        lines.append(f"interrupted: in a new cell, {pending_hint(v)}")
    if outcome_warning(v):
        lines.append(f"⚠ {outcome_warning(v)}")
    steps = v.get("steps") or []
    if steps:
        lines.append(f"{timeline_label(v).lower()}:")
        head, middle, tail = step_window(steps)
        lines += [f"  {n:>2}. {step_summary(s)}" for n, s in enumerate(head, 1)]
        if middle:
            lines.append(f"      … {plural(len(middle), 'more entry', 'more entries')} …")
            lines += [f"  {n:>2}. {step_summary(s)}" for n, s in enumerate(tail, len(steps) - len(tail) + 1)]
    for n, s in enumerate(steps, 1):  # whole, wherever its entry is: what the model works from from there on
        if s.get("summary"):
            lines.append(f"{s.get('summary_label')} (entry {n}):")
            lines.append(indented(str(s["summary"]).strip(), "    "))
    plans = v.get("plans") or []
    if plans:
        lines.append("plans:")
        for i, p in enumerate(plans, 1):
            decided = "; ".join(decision_line(d) for d in plan_decisions(v, p.get("plan_id")))
            state = decided or PLAN_STATUS.get(p.get("status", ""), p.get("status", ""))
            tools = ", ".join(f"{s.get('tool')}[{s.get('risk')}]" for s in p.get("steps") or [])
            lines.append(f"  {i}. {clip(plan_summary(p), 80)} ({tools}): {state}")
            if model_note(p):
                lines.append(f"     the model says: \"{clip(model_note(p), 120)}\"")
            lines += [f"     HIGH RISK: {e}" for e in high_risk_effects(p)]
    lines += effects_text(v)
    if v.get("answer"):
        lines.append("answer:")
        lines.append(indented(str(v["answer"]).strip(), "  "))
    errors = [e for e in v.get("errors") or [] if e]
    if v.get("error") and v["error"] not in errors:
        errors.insert(0, v["error"])
    for e in errors:
        lines.append(f"error: {clip(e, 300)}")
    if undo_hint(v):
        lines.append("undo: " + undo_hint(v))
    nominal = bool(v.get("cost_nominal"))
    lines.append("totals: " + totals_line(v.get("totals") or {}, nominal) + (f" ({NOMINAL_NOTE})" if nominal else ""))
    if tree_line(v.get("tree")):
        lines.append("run tree: " + tree_line(v.get("tree"), nominal))
    if v.get("log_path"):
        lines.append(f"log: {v['log_path']}")
    return "\n".join(lines)
