"""The record as HTML: the self-contained `text/html` a saved notebook keeps when the live view is gone.

One scoped `<style>` (`CSS`), no script, no external assets; plain semantic HTML that still reads well where styles
are stripped (GitHub). Every string that came from the model, a tool or a person is escaped before it is placed in
the page; the answer's Markdown goes through `record_markdown.markdown_html`. Split out of `record.py` so the page's
structure can be read in one sitting, apart from the wording (`record_words`) it places.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from importlib.resources import files
from typing import Any

from nbagent.ui.cell_names import cell_name, cell_title
from nbagent.ui.effects_summary import by_whom, effects_html, undo_banner_html, undoes_line
from nbagent.ui.record_format import (
    NOMINAL_NOTE,
    args_are_long,
    arguments_of,
    clip,
    esc,
    fmt_cost,
    fmt_ms,
    fmt_tokens,
    fmt_ts,
    format_args,
    is_long,
    json_text,
    looks_like_diff,
    plural,
    short_id,
    upper_first,
)
from nbagent.ui.record_markdown import markdown_html
from nbagent.ui.record_summary import compact, summary_head, summary_tail
from nbagent.ui.record_words import (
    DECISION_LABEL,
    DECISION_VERB,
    DIFF_OPEN_LINES,
    HIGH,
    NOT_ASKED,
    PLAN_STATUS,
    RISK_LABEL,
    STATUS_ICON,
    STEP_ICON,
    answerable,
    cell_label,
    grant_reach,
    high_risk_effects,
    model_note,
    outcome_warning,
    pending_hint,
    pending_text,
    plan_decisions,
    plan_summary,
    reproduced_line,
    step_window,
    timeline_label,
    totals_line,
    tree_line,
    undo_hint,
    why_shown,
)

# ------------------------------------------------------------------------------------------------------- HTML

# the one stylesheet of the record (record.css), inlined in its text/html
_SHEET = files("nbagent.ui").joinpath("record.css").read_text(encoding="utf-8")
CSS = _SHEET[_SHEET.index("*/") + 3:]  # (its opening comment is for the reader of the file)

STATUS_TONE = {"completed": "nbr-ok", "completed_with_errors": "nbr-warn", "failed": "nbr-bad",
               "running": "nbr-info", "waiting": "nbr-warn", "interrupted": "nbr-warn", "superseded": "nbr-dim"}
STEP_TONE = {"ok": "nbr-ok", "failed": "nbr-bad", "denied": "nbr-bad", "running": "nbr-info", "waiting": "nbr-warn",
             "info": "nbr-dim", "interrupted": "nbr-warn"}
PLAN_TONE = {"approved": "nbr-ok", "auto": "nbr-ok", "rejected": "nbr-bad", "refined": "nbr-warn",
             "proposed": "nbr-warn"}


# brackets that only show where styles are stripped (GitHub), so badges still read as badges there
_OPEN = '<span class="nbr-sep">[</span>'
_CLOSE = '<span class="nbr-sep">]</span>'


def _badge(text: str, tone: str, title: str = "") -> str:
    t = f' title="{esc(title)}"' if title else ""
    return f'<span class="nbr-badge {tone}"{t}>{_OPEN}{esc(text)}{_CLOSE}</span>'


def _when_html(ts: Any) -> str:
    """A decision's time as a `<time>`: "14:02 UTC" where the record is read as saved (nbconvert, GitHub), the
    reader's own clock in JupyterLab (the lab extension words every `<time datetime>` in local time), the whole
    timestamp on hover."""
    try:
        t = datetime.fromisoformat(str(ts or "").replace("Z", "+00:00"))
    except ValueError:
        return ""
    t = (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC)
    return (f'<time datetime="{t.strftime("%Y-%m-%dT%H:%M:%SZ")}" title="{esc(fmt_ts(ts))}">'
            f'{t.strftime("%H:%M")} UTC</time>')


def _decided_html(d: dict[str, Any]) -> str:
    """"by you · 14:02" (the verb is the caller's)."""
    when = _when_html(d.get("ts"))
    return f" by {esc(by_whom(d.get('by')))}" + (f" · {when}" if when else "")


def risk_badge(risk: Any) -> str:
    if not risk:
        return ""
    r = str(risk)
    return (f'<span class="nbr-badge nbr-risk nbr-risk-{esc(r.lower())}">{_OPEN}{esc(RISK_LABEL.get(r, r))}'
            f"{_CLOSE}</span>")


def _pre(text: str, cls: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    return f"<pre{c}>{esc(text)}</pre>"


def _collapsible(summary: str, body_html: str, *, open_: bool = False) -> str:
    return f"<details{' open' if open_ else ''}><summary>{summary}</summary>{body_html}</details>"


def _text_block(text: str, label: str, cls: str = "") -> str:
    """A <pre> of text, collapsed behind a summary when it is long."""
    if is_long(text):
        n = text.count("\n") + 1
        return _collapsible(f"{esc(label)} ({n} line{'s' if n != 1 else ''}, {len(text):,} chars)", _pre(text, cls))
    return _pre(text, cls)


def diff_html(diff: str) -> str:
    """A unified diff as a <pre> with added, removed, hunk and header lines marked."""
    parts = []
    for line in str(diff).rstrip("\n").split("\n"):
        if line.startswith(("+++", "---")):
            cls = "nbr-fhead"
        elif line.startswith("+"):
            cls = "nbr-add"
        elif line.startswith("-"):
            cls = "nbr-del"
        elif line.startswith("@@"):
            cls = "nbr-hunk"
        else:
            cls = "nbr-ctx"
        parts.append(f'<span class="{cls}">{esc(line)}</span>')
    return '<pre class="nbr-diff">' + "\n".join(parts) + "</pre>"


def _diff_block(diff: str, target: str) -> str:
    n = diff.rstrip("\n").count("\n") + 1
    adds = sum(1 for ln in diff.split("\n") if ln.startswith("+") and not ln.startswith("+++"))
    dels = sum(1 for ln in diff.split("\n") if ln.startswith("-") and not ln.startswith("---"))
    summary = f"diff of <code>{esc(target)}</code>: +{adds} -{dels}"
    if n > DIFF_OPEN_LINES:
        return _collapsible(summary + f" ({n} lines)", diff_html(diff))
    return _collapsible(summary, diff_html(diff), open_=True)


def _step_html(step: dict[str, Any], decisions_by_request: dict[str, dict[str, Any]]) -> str:
    kind = step.get("kind", "info")
    status = step.get("status", "info")
    tone = STEP_TONE.get(status, "nbr-dim")
    icon = f'<span class="nbr-icon {tone}" title="{esc(status)}">{STEP_ICON.get(status, "·")}</span>'
    label = {"model": "model", "tool": "tool", "denied": "denied", "thinking": "thinking", "question": "question",
             "child": "sub-agent", "error": "error", "info": "info"}.get(kind, kind)
    # the line is three columns (icon | kind | the rest: `head`); a step said as a sentence has no kind column
    said = kind == "tool" and bool(step.get("outcome"))
    head = ""
    body = ""
    if kind == "model":
        facts = [f"{fmt_tokens(step.get('tokens'))} tokens", fmt_cost(step.get("cost"), bool(step.get("cost_nominal"))),
                 fmt_ms(step.get("latency_ms"))]
        if step.get("retries"):
            facts.append(f"{step['retries']} retr{'y' if step['retries'] == 1 else 'ies'}")
        head += (f'<code>{esc(step.get("title"))}</code> → {esc(step.get("detail"))} '
                 f'<span class="nbr-facts">· {" · ".join(esc(f) for f in facts if f)}</span>')
    elif kind == "tool" and step.get("outcome"):  # the icon, then what it did: "✗ raised KeyError: 'Revenue'"
        head, body = _said_html(step, "")
    elif kind == "tool":
        args = arguments_of(step)
        head += (f'<span class="nbr-tool">{esc(step.get("tool") or step.get("title"))}</span>'
                 f'<span class="nbr-args">({esc(format_args(args))})</span> {risk_badge(step.get("risk"))}')
        facts = [status]
        if step.get("duration_ms") is not None:
            facts.append(fmt_ms(step["duration_ms"]))
        if step.get("retries"):
            facts.append(f"{step['retries']} retr{'y' if step['retries'] == 1 else 'ies'}")
        head += f' <span class="nbr-facts">· {" · ".join(esc(f) for f in facts)}</span>'
        body += _why_html(step, status)
        if step.get("risk_reason"):
            body += f'<div class="nbr-why nbr-bad">high risk: {esc(step["risk_reason"])}</div>'
        body += _all_arguments(args)
        if step.get("result_preview"):
            preview = str(step["result_preview"])
            body += _text_block(preview, "result") if is_long(preview) else _pre(preview, "nbr-result")
    elif kind == "denied":
        target = f' <code>{esc(step["target"])}</code>' if step.get("target") else ""
        rule = f' <span class="nbr-facts">(rule {esc(step["rule"])})</span>' if step.get("rule") else ""
        head += f'<span class="nbr-tool">{esc(step.get("tool") or step.get("title"))}</span>{target}{rule}'
        body += f'<div class="nbr-why nbr-bad">{esc(step.get("detail"))}</div>'
    elif kind == "thinking":
        text = str(step.get("detail") or "")
        if is_long(text):
            body += _collapsible(esc(clip(text, 90)), f'<div class="nbr-thinking">{esc(text)}</div>')
        else:
            head += f'<span class="nbr-thinking">{esc(text)}</span>'
    elif kind == "question":
        head += f"<strong>{esc(step.get('detail'))}</strong>"
        if step.get("answer") is not None:
            d = decisions_by_request.get(step.get("request_id") or "")
            by = f' <span class="nbr-facts">— answered{_decided_html(d)}</span>' if d else ""
            body += f'<div class="nbr-why">answer: <q>{esc(step["answer"])}</q>{by}</div>'
    elif kind == "child":
        head += (f'<code>{esc(short_id(step.get("child_run_id")))}</code> '
                 f'<span class="nbr-facts">{esc(clip(step.get("detail") or "", 200))}</span>')
    elif kind == "error":
        head += f"<strong>{esc(step.get('title'))}</strong>"
        if step.get("retries"):
            head += f' <span class="nbr-facts">· {step["retries"]} retries</span>'
        body += _text_block(str(step.get("detail") or ""), "error")
    elif step.get("title") in _DECIDED:  # who and when are on its plan card (shown once); here, where it happened
        head += f'<span class="nbr-facts">{esc(_DECIDED[step["title"]])}</span>'
    else:
        head += f'<span class="nbr-facts">{esc(step.get("detail") or step.get("title"))}</span>'
    if step.get("summary"):  # a compaction's summary: what the model works from, behind its label
        body += _collapsible(esc(step.get("summary_label")), _pre(str(step["summary"]), "nbr-summary"))
    kind_html = "" if said else f'<span class="nbr-kind">{esc(label)}</span> '
    line = (f'<span class="nbr-line{" nbr-said-line" if said else ""}">{icon} {kind_html}'
            f'<span class="nbr-main">{head}</span></span>')
    return f'<li class="nbr-step nbr-k-{esc(kind)} nbr-st-{esc(status)}">{line}{body}</li>'


_PLAN_ID = re.compile(r"\s*\(plan [^)]*\)")  # "(plan 01JX…)": the plan card names it
_DECIDED = {"plan approved": "plan approved", "plan rejected": "plan denied",
            "plan refined": "plan sent back with feedback"}


def _why_html(step: dict[str, Any], status: str) -> str:
    """The authorization reason only where it matters: a failure says what went wrong; a grant that let it through
    says so; a high-risk step that ran without asking says why. "READ_ONLY runs without asking" under every read, or
    the approval (shown once, on its plan card), is noise."""
    why = str(step.get("detail") or "")
    if not why:
        return ""
    if status == "failed":
        return f'<div class="nbr-why nbr-bad">{esc(why)}</div>'
    if step.get("grant_id"):
        return _grant_why(step, why)
    if step.get("risk") == HIGH and not re.match(r"(approved|plan approved)\b", why):
        return f'<div class="nbr-why">{esc(_PLAN_ID.sub("", why, count=1))}</div>'
    return ""


def _grant_why(step: dict[str, Any], why: str) -> str:
    """The grant that let a call through without asking ("allowed by grant G …")."""
    return f'<div class="nbr-why nbr-grant-why">{esc(why)}</div>' if why and step.get("grant_id") else ""


def _all_arguments(args: Any, width: int = 60, *, long_too: bool = True) -> str:
    """The whole arguments behind "all arguments", where the one-line form (`width`) cuts them (or, `long_too`,
    wraps them)."""
    if not isinstance(args, dict) or not args:
        return ""
    shown = any(len(json_text(v)) > width for v in args.values()) or (long_too and args_are_long(args))
    return _collapsible("all arguments", _pre(json_text(args, indent=2))) if shown else ""


def _said_html(step: dict[str, Any], head: str) -> tuple[str, str]:
    """A tool step worded as a sentence (ui/step_words.py): what it did first, then the call; its traceback and its
    raw result (JSON, digests) behind disclosures."""
    args = arguments_of(step)
    tone = STEP_TONE.get(str(step.get("status")), "nbr-dim")
    facts = [fmt_ms(step["duration_ms"]) if step.get("duration_ms") is not None and tone != "nbr-warn" else "",
             f"{step['retries']} retr{'y' if step['retries'] == 1 else 'ies'}" if step.get("retries") else ""]
    head += (f'<span class="nbr-said {tone if tone != "nbr-ok" else ""}">{esc(step["outcome"])}</span> '
             f'<span class="nbr-facts">·</span> <span class="nbr-tool">{esc(step.get("tool") or step.get("title"))}'
             f'</span><span class="nbr-args">({esc(format_args(args))})</span> {risk_badge(step.get("risk"))}')
    if any(facts):
        head += f' <span class="nbr-facts">· {" · ".join(esc(f) for f in facts if f)}</span>'
    body = ""
    if why_shown(step):
        body += f'<div class="nbr-why nbr-bad">{esc(why_shown(step))}</div>'
    else:
        body += _grant_why(step, str(step.get("detail") or ""))
    if step.get("risk_reason"):
        body += f'<div class="nbr-why nbr-bad">high risk: {esc(step["risk_reason"])}</div>'
    if step.get("traceback"):
        body += _collapsible("traceback (its end)", _pre(str(step["traceback"]), "nbr-traceback"))
    body += _all_arguments(args)
    if step.get("result_preview"):
        body += _collapsible("result", _pre(str(step["result_preview"]), "nbr-result"))
    return head, body


def _steps_html(view: dict[str, Any]) -> str:
    steps = view.get("steps") or []
    if not steps:
        return ""
    by_request = {d.get("request_id"): d for d in view.get("decisions") or [] if d.get("request_id")}
    head, middle, tail = step_window(steps)
    out = [f'<h4 class="nbr-section">{esc(timeline_label(view))}</h4>', '<ol class="nbr-steps">']
    out += [_step_html(s, by_request) for s in head]
    out.append("</ol>")
    if middle:
        inner = f'<ol class="nbr-steps" start="{len(head) + 1}">' + "".join(_step_html(s, by_request) for s in middle)
        out.append(_collapsible(f"… {plural(len(middle), 'more entry', 'more entries')}", inner + "</ol>"))
        out.append(f'<ol class="nbr-steps" start="{len(steps) - len(tail) + 1}">')
        out += [_step_html(s, by_request) for s in tail]
        out.append("</ol>")
    return "".join(out)


def _plan_html(plan: dict[str, Any], index: int, view: dict[str, Any]) -> str:
    status = plan.get("status", "proposed")
    pending = view.get("pending") or {}
    waiting = answerable(view) and pending.get("kind") == "approval" and pending.get("plan_id") == plan.get("plan_id")
    status_text = "waiting for approval" if waiting else PLAN_STATUS.get(status, status)
    effects = high_risk_effects(plan)
    out = [f'<div class="nbr-plan{" nbr-plan-high" if effects else ""}" data-plan-id="{esc(plan.get("plan_id"))}">',
           f'<h5 class="nbr-plan-head">Plan {index}: {esc(upper_first(plan_summary(plan)))} '
           f'{_badge(status_text, "nbr-warn" if waiting else PLAN_TONE.get(status, "nbr-dim"))} '
           f'<span class="nbr-facts">max risk</span> {risk_badge(plan.get("max_risk"))}</h5>']
    if model_note(plan):  # the model's words: a quote, not the question
        out.append(f'<p class="nbr-purpose"><span class="nbr-facts">the model says </span>'
                   f'<q>{esc(model_note(plan))}</q></p>')
    if effects:
        out.append(_danger_html(effects, asking=waiting or status == "proposed"))
    steps = plan.get("steps") or []
    if steps:
        out.append("<table><thead><tr><th>#</th><th>tool</th><th>target</th><th>risk</th><th>arguments</th></tr>"
                   "</thead><tbody>")
        for n, s in enumerate(steps, 1):
            out.append(f'<tr><td>{n}</td><td><span class="nbr-tool">{esc(s.get("tool"))}</span></td>'
                       f'<td>{_target_html(s)}</td>'
                       f'<td>{risk_badge(s.get("risk"))}{_risk_reason_html(s)}</td>'
                       f'<td><span class="nbr-args">{esc(format_args(arguments_of(s), 48))}</span>'
                       f"{_all_arguments(arguments_of(s), 48, long_too=False)}</td></tr>")
        out.append("</tbody></table>")
        for s in steps:
            diff = s.get("diff") or s.get("preview")
            if not diff:
                continue
            if s.get("diff") or looks_like_diff(str(diff)):
                out.append(_diff_block(str(diff), str(s.get("target") or s.get("tool") or "")))
            else:
                out.append(_text_block(str(diff), f"preview of {s.get('tool')}"))
    decisions = plan_decisions(view, plan.get("plan_id"))
    if decisions:
        out.append('<ul class="nbr-decisions">' + "".join(_decision_html(d) for d in decisions) + "</ul>")
    elif plan.get("auto_executing"):
        out.append('<p class="nbr-facts">ran without asking: within the autonomy level</p>')
    out.append("</div>")
    return "".join(out)


def _danger_html(effects: list[str], *, asking: bool) -> str:
    """What makes a plan high risk, and, while it waits for a person, to check it first."""
    check = (" Check each step before you approve." if len(effects) > 1 else " Check it before you approve.") \
        if asking else ""
    head = '<div class="nbr-danger" role="note"><strong>⚠ High risk</strong> — this plan'
    if len(effects) == 1:
        return f"{head} {esc(effects[0])}.{esc(check)}</div>"
    items = "".join(f"<li>{esc(e)}</li>" for e in effects)
    return f"{head}:<ul>{items}</ul>{esc(check.strip())}</div>"


def _decision_html(d: dict[str, Any]) -> str:
    """"approved by you · 14:02", "denied by you · 14:02 — reason: …", and the grants it gave."""
    kind = str(d.get("kind") or "")
    label = DECISION_LABEL.get(kind, "note")
    text = f" — {label}: {d['text']}" if d.get("text") else ""
    given = "".join(f'<div class="nbr-facts nbr-grant-given">{esc(grant_reach(g))}</div>'
                    for g in d.get("grants") or [])
    if d.get("grant_error"):
        given += f'<div class="nbr-facts nbr-bad">{esc(d["grant_error"])}</div>'
    return (f'<li><span class="{PLAN_TONE.get(kind, "nbr-dim")}">{esc(DECISION_VERB.get(kind, kind))}</span>'
            f"{_decided_html(d)}{esc(text)}{given}</li>")


def _target_html(step: dict[str, Any]) -> str:
    """A plan step's target; an agent's cell as the notebook shows it ("[3] df = …"), its ids on hover."""
    if cell_name(step):
        return f'<code class="nbr-cell-name" title="{esc(cell_title(step))}">{esc(cell_name(step))}</code>'
    return f"<code>{esc(step.get('target'))}</code>" if step.get("target") else ""


def _risk_reason_html(step: dict[str, Any]) -> str:
    reason = step.get("risk_reason")
    out = f'<div class="nbr-risk-reason">{esc(reason)}</div>' if reason else ""
    if step.get("asks") is False:
        out += f'<div class="nbr-not-asked">{esc(NOT_ASKED)}</div>'
    return out


def _summary_html(v: dict[str, Any], status: str) -> str:
    """The compact record's summary (record_summary): the status and the request, then the outcome and counts."""
    state, sep, request = summary_head(v).partition(" · ")
    more = summary_tail(v)
    tone = STATUS_TONE.get("superseded" if v.get("superseded_by") else status, "nbr-dim")
    return (f'<details class="nbr-compact"><summary class="nbr-summary-line"><strong class="nbr-summary-state {tone}">'
            f'{esc(state)}</strong><span class="nbr-summary-request">{esc(sep)}{esc(request)}</span>'
            f'<span class="nbr-summary-more">{esc(more)}</span></summary>')


def render_html(view: dict[str, Any]) -> str:
    """The run as a self-contained HTML fragment (scoped style, no script, no external assets)."""
    v = view or {}
    status = str(v.get("status") or "running")
    run_id = str(v.get("run_id") or "")
    out = [f'<div class="nbagent-run nbr-status-{esc(status)}" data-run-id="{esc(run_id)}">',
           f"<style>{CSS}</style>"]
    folded = compact(v)
    if reproduced_line(v):  # in sight, folded or not
        out.append(f'<p class="nbr-reproduced"><strong>↻</strong> {esc(upper_first(reproduced_line(v)))}</p>')
    if v.get("superseded_by"):  # in sight, folded or not, as the undo banner: what became of the run
        out.append(f'<div class="nbr-banner nbr-dim nbr-superseded"><strong>↷ Superseded</strong> by run '
                   f'<code>{esc(v["superseded_by"])}</code>: an earlier cell was re-run; this record is kept '
                   "as history.</div>")
    out.append(undo_banner_html(v))
    if folded:  # two lines; the whole record behind them (a <details>: no script needed)
        out.append(_summary_html(v, status))
    tone = STATUS_TONE.get(status, "nbr-dim")
    label = f"{STATUS_ICON.get(status, '')} {status.replace('_', ' ')}"
    out.append(f'<h4 class="nbr-title">{_badge(label, tone)} <span>nbagent run</span></h4>')
    meta = [f"model <code>{esc(v.get('model'))}</code>", f"autonomy <code>{esc(v.get('autonomy'))}</code>",
            f'run <code title="{esc(run_id)}">{esc(short_id(run_id))}</code>']
    if v.get("cell_id"):  # the short label; the whole id on hover
        meta.append(f'cell <code title="{esc(v["cell_id"])}">{esc(cell_label(v))}</code>')
    if v.get("previous_run_id"):
        meta.append(f"continues <code>{esc(short_id(v['previous_run_id']))}</code>")
    if v.get("parent_run_id"):
        meta.append(f"sub-agent of <code>{esc(short_id(v['parent_run_id']))}</code>")
    if undoes_line(v):
        meta.append(esc(undoes_line(v)))
    if v.get("started_at"):
        meta.append(f"started {esc(fmt_ts(v['started_at']))}")
    out.append('<p class="nbr-meta">' + " · ".join(meta) + "</p>")
    if v.get("prompt"):
        out.append(f'<blockquote class="nbr-prompt">{esc(v["prompt"])}</blockquote>')
    if answerable(v):
        out.append(f'<div class="nbr-banner nbr-warn nbr-pending"><strong>‖ {esc(pending_text(v))}</strong>'
                   f'<span class="nbr-hint">in a new cell: {esc(pending_hint(v))}</span></div>')
    elif status == "interrupted":
        out.append(f'<div class="nbr-banner nbr-warn nbr-pending"><strong>■ interrupted</strong>'
                   f'<span class="nbr-hint">in a new cell: {esc(pending_hint(v))}</span></div>')
    if outcome_warning(v):
        out.append(f'<div class="nbr-banner nbr-warn nbr-outcome"><strong>⚠ {esc(outcome_warning(v))}</strong></div>')
    out.append(_steps_html(v))
    plans = v.get("plans") or []
    if plans:
        out.append(f'<h4 class="nbr-section">Plans ({len(plans)})</h4>')
        out += [_plan_html(p, i, v) for i, p in enumerate(plans, 1)]
    out.append(effects_html(v))
    if v.get("answer"):
        out.append('<div class="nbr-answer"><h4 class="nbr-section">Answer</h4>'
                   f'{markdown_html(str(v["answer"]))}</div>')
    errors = [e for e in v.get("errors") or [] if e]
    if v.get("error") and v.get("error") not in errors:
        errors.insert(0, v["error"])
    if errors:
        out.append('<h4 class="nbr-section">Errors</h4><ul class="nbr-errors">'
                   + "".join(f"<li>{esc(e)}</li>" for e in errors) + "</ul>")
    nominal = bool(v.get("cost_nominal"))
    foot = [f"<span><strong>Totals</strong> {esc(totals_line(v.get('totals') or {}, nominal))}</span>"]
    if tree_line(v.get("tree")):
        foot.append(f"<span><strong>Run tree</strong> {esc(tree_line(v.get('tree'), nominal))}</span>")
    if nominal:
        foot.append(f'<span class="nbr-nominal">{esc(NOMINAL_NOTE)}</span>')
    if run_id:
        foot.append(f'<span><strong>Run</strong> <code class="nbr-run-id">{esc(run_id)}</code></span>')
    if v.get("log_path"):
        foot.append(f"<span><strong>Log</strong> <code class=\"nbr-log\">{esc(v['log_path'])}</code></span>")
    undo = ""
    if undo_hint(v):
        command, _, rest = undo_hint(v).partition(" undoes ")
        undo = f'<p class="nbr-undo"><strong>↶ Undo</strong> <code>{esc(command)}</code> undoes {esc(rest)}</p>'
    foot_html = '<div class="nbr-foot">' + "".join(foot) + "</div>"
    # a folded record keeps its ↶ Undo line in sight below the summary
    tail = [t for t in ([foot_html + "</details>", undo] if folded else [undo, foot_html]) if t]
    out += [*tail[:-1], tail[-1] + "</div>"]
    return "\n".join(o for o in out if o)
