"""The record as HTML: the self-contained `text/html` a saved notebook keeps when the live view is gone.

One scoped `<style>` (`CSS`), no script, no external assets; plain semantic HTML that still reads well where styles
are stripped (GitHub). Every string that came from the model, a tool or a person is escaped before it is placed in
the page; the answer's Markdown goes through `record_markdown.markdown_html`. Split out of `record.py` so the page's
structure can be read in one sitting, apart from the wording (`record_words`) it places.
"""

from __future__ import annotations

from typing import Any

from nbagent.ui.cell_names import cell_name, cell_title
from nbagent.ui.effects_summary import CSS as EFFECTS_CSS
from nbagent.ui.effects_summary import effects_html, undo_banner_html, undoes_line
from nbagent.ui.record_markdown import markdown_html
from nbagent.ui.record_summary import compact, summary_head, summary_tail
from nbagent.ui.record_words import (
    DECISION_VERB,
    DIFF_OPEN_LINES,
    NOMINAL_NOTE,
    NOT_ASKED,
    PLAN_STATUS,
    RISK_LABEL,
    STATUS_ICON,
    STEP_ICON,
    _args_are_long,
    _clip,
    _decision_line,
    _esc,
    _is_long,
    _json,
    _looks_like_diff,
    _plan_decisions,
    _step_window,
    _upper_first,
    answerable,
    arguments_of,
    cell_label,
    fmt_cost,
    fmt_ms,
    fmt_tokens,
    fmt_ts,
    format_args,
    high_risk_effects,
    model_note,
    outcome_warning,
    pending_hint,
    pending_text,
    plan_summary,
    plural,
    reproduced_line,
    short_id,
    timeline_label,
    totals_line,
    tree_line,
    undo_hint,
    why_shown,
)

# ------------------------------------------------------------------------------------------------------- HTML

CSS = """
.nbagent-run{--nbr-fg:var(--jp-ui-font-color1,#1f2328);--nbr-muted:var(--jp-ui-font-color2,#59636e);
--nbr-bg:var(--jp-layout-color1,transparent);--nbr-bg2:var(--jp-layout-color2,#f6f8fa);
--nbr-border:var(--jp-border-color2,#d1d9e0);--nbr-green:#116329;--nbr-amber:#7d4e00;--nbr-red:#b31d28;
--nbr-blue:#0550ae;
--nbr-mono:var(--jp-code-font-family,ui-monospace,SFMono-Regular,Menlo,Consolas,monospace);
--nbr-font:var(--jp-ui-font-family,-apple-system,BlinkMacSystemFont,"Segoe UI",Helvetica,Arial,sans-serif);
color:var(--nbr-fg);background:var(--nbr-bg);font-family:var(--nbr-font);font-size:13px;line-height:1.45;
border:1px solid var(--nbr-border);border-radius:6px;padding:10px 14px;margin:2px 0;max-width:100%;
box-sizing:border-box;overflow-wrap:anywhere}
@media (prefers-color-scheme:dark){.nbagent-run{--nbr-fg:var(--jp-ui-font-color1,#e6edf3);
--nbr-muted:var(--jp-ui-font-color2,#9198a1);--nbr-bg:var(--jp-layout-color1,#0d1117);
--nbr-bg2:var(--jp-layout-color2,#161b22);--nbr-border:var(--jp-border-color2,#3d444d);
--nbr-green:#56d364;--nbr-amber:#e3b341;--nbr-red:#ffa198;--nbr-blue:#79c0ff}}
body[data-jp-theme-light="false"] .nbagent-run{--nbr-green:#56d364;--nbr-amber:#e3b341;--nbr-red:#ffa198;
--nbr-blue:#79c0ff}
.nbagent-run *{box-sizing:border-box}
.nbagent-run .nbr-sep{display:none}
.nbagent-run h4,.nbagent-run h5{margin:12px 0 4px;font-size:13px;font-weight:600;color:var(--nbr-fg)}
.nbagent-run h4.nbr-title{margin:0 0 4px;font-size:14px;display:flex;flex-wrap:wrap;gap:8px;align-items:center}
.nbagent-run .nbr-section{font-size:11px;text-transform:uppercase;letter-spacing:.04em;color:var(--nbr-muted)}
.nbagent-run code,.nbagent-run pre{font-family:var(--nbr-mono);font-size:12px}
.nbagent-run pre{background:var(--nbr-bg2);border:1px solid var(--nbr-border);border-radius:4px;padding:6px 8px;
margin:4px 0;overflow:auto;max-height:28em;white-space:pre-wrap;color:var(--nbr-fg)}
.nbagent-run :not(pre)>code{background:var(--nbr-bg2);border-radius:3px;padding:0 3px}
.nbagent-run .nbr-meta{color:var(--nbr-muted);margin:0 0 6px;font-size:12px}
.nbagent-run .nbr-meta code{color:var(--nbr-fg)}
.nbagent-run .nbr-muted{color:var(--nbr-muted)}
.nbagent-run .nbr-prompt{margin:4px 0 8px;padding:4px 10px;border-left:3px solid var(--nbr-blue);
background:var(--nbr-bg2);white-space:pre-wrap;border-radius:0 4px 4px 0}
.nbagent-run .nbr-badge{display:inline-block;padding:0 7px;border-radius:10px;font-size:11px;font-weight:600;
line-height:18px;border:1px solid currentColor;white-space:nowrap;vertical-align:middle;
background:var(--nbr-bg2)}
.nbagent-run .nbr-ok{color:var(--nbr-green)}.nbagent-run .nbr-warn{color:var(--nbr-amber)}
.nbagent-run .nbr-bad{color:var(--nbr-red)}.nbagent-run .nbr-info{color:var(--nbr-blue)}
.nbagent-run .nbr-dim{color:var(--nbr-muted)}
.nbagent-run .nbr-risk{font-family:var(--nbr-mono);font-weight:600;font-size:10px;letter-spacing:.02em}
.nbagent-run .nbr-risk-read_only{color:var(--nbr-green)}
.nbagent-run .nbr-risk-write_low_risk{color:var(--nbr-amber)}
.nbagent-run .nbr-risk-write_high_risk{color:var(--nbr-red)}
.nbagent-run .nbr-plan-high{border-color:var(--nbr-red);border-left-width:5px}
.nbagent-run .nbr-danger{margin:4px 0 6px;padding:4px 10px;border:1px solid var(--nbr-red);border-radius:4px}
.nbagent-run .nbr-danger ul{margin:2px 0;padding-left:1.4em}
.nbagent-run .nbr-risk-reason{font-size:11.5px;margin-top:2px}
.nbagent-run .nbr-not-asked{font-size:11.5px;margin-top:2px;opacity:.8}
.nbagent-run .nbr-purpose{margin:2px 0 4px}
.nbagent-run .nbr-banner{padding:6px 10px;border-radius:4px;margin:0 0 8px;border:1px solid currentColor}
.nbagent-run .nbr-banner code{color:var(--nbr-fg)}
.nbagent-run .nbr-hint{display:block;margin-top:3px;color:var(--nbr-fg);font-family:var(--nbr-mono);font-size:12px}
.nbagent-run ol.nbr-steps{margin:4px 0;padding-left:2.4em}
.nbagent-run ol.nbr-steps>li{margin:2px 0;padding:1px 0}
.nbagent-run ol.nbr-steps>li::marker{color:var(--nbr-muted);font-size:11px}
.nbagent-run .nbr-kind{display:inline-block;min-width:6.2em;margin-right:2px;font-size:11px;color:var(--nbr-muted);
text-transform:uppercase;letter-spacing:.03em}
.nbagent-run .nbr-tool{font-family:var(--nbr-mono);font-weight:600}
.nbagent-run .nbr-said{font-weight:600}
.nbagent-run .nbr-args{font-family:var(--nbr-mono);font-size:12px;color:var(--nbr-muted)}
.nbagent-run .nbr-facts{color:var(--nbr-muted);font-size:12px}
.nbagent-run .nbr-why{color:var(--nbr-muted);font-size:11.5px;margin:0}
.nbagent-run .nbr-why.nbr-bad{color:var(--nbr-red)}
.nbagent-run .nbr-thinking{color:var(--nbr-muted);font-style:italic;white-space:pre-wrap}
.nbagent-run .nbr-st-failed>.nbr-line,.nbagent-run .nbr-k-error>.nbr-line{color:var(--nbr-red)}
.nbagent-run .nbr-k-denied>.nbr-line .nbr-tool{color:var(--nbr-red)}
.nbagent-run details{margin:2px 0}
.nbagent-run summary{cursor:pointer;color:var(--nbr-muted);font-size:12px}
.nbagent-run .nbr-plan{border:1px solid var(--nbr-border);border-radius:5px;padding:6px 10px;margin:6px 0;
background:var(--nbr-bg)}
.nbagent-run .nbr-plan-head{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin:0}
.nbagent-run table{border-collapse:collapse;margin:4px 0;font-size:12px}
.nbagent-run th,.nbagent-run td{border:1px solid var(--nbr-border);padding:2px 8px;text-align:left;
vertical-align:top}
.nbagent-run th{background:var(--nbr-bg2);font-weight:600}
.nbagent-run .nbr-diff{padding:4px 0}
.nbagent-run .nbr-diff>span{display:inline-block;min-width:100%;padding:0 8px}
.nbagent-run .nbr-add{color:var(--nbr-green);background:rgba(46,160,67,.12)}
.nbagent-run .nbr-del{color:var(--nbr-red);background:rgba(248,81,73,.12)}
.nbagent-run .nbr-hunk{color:var(--nbr-blue)}
.nbagent-run .nbr-fhead{color:var(--nbr-muted);font-weight:600}
.nbagent-run .nbr-decisions{margin:4px 0 0;padding-left:1.4em}
.nbagent-run .nbr-answer{border-top:1px solid var(--nbr-border);margin-top:8px;padding-top:2px}
.nbagent-run .nbr-answer h3,.nbagent-run .nbr-answer h4,.nbagent-run .nbr-answer h5,.nbagent-run .nbr-answer h6{
margin:10px 0 4px;font-size:13.5px}
.nbagent-run .nbr-answer h3{font-size:15px}
.nbagent-run .nbr-answer p{margin:4px 0}
.nbagent-run .nbr-answer ul,.nbagent-run .nbr-answer ol{margin:4px 0;padding-left:1.8em}
.nbagent-run .nbr-answer blockquote{margin:4px 0;padding:0 10px;border-left:3px solid var(--nbr-border);
color:var(--nbr-muted)}
.nbagent-run a{color:var(--nbr-blue)}
.nbagent-run .nbr-foot{border-top:1px solid var(--nbr-border);margin-top:8px;padding-top:5px;font-size:12px;
color:var(--nbr-muted);display:flex;flex-wrap:wrap;gap:4px 16px}
.nbagent-run .nbr-foot strong{color:var(--nbr-fg);font-weight:600}
.nbagent-run .nbr-errors{color:var(--nbr-red);margin:4px 0;padding-left:1.4em}
.nbagent-run details.nbr-compact{margin:0}
.nbagent-run details.nbr-compact>summary.nbr-summary-line{color:var(--nbr-fg);font-size:13px;padding:1px 0}
.nbagent-run .nbr-summary-more{display:block;color:var(--nbr-muted);font-size:12px;margin-left:1.15em}
.nbagent-run details.nbr-compact[open]>summary.nbr-summary-line{margin-bottom:6px}
"""

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
    t = f' title="{_esc(title)}"' if title else ""
    return f'<span class="nbr-badge {tone}"{t}>{_OPEN}{_esc(text)}{_CLOSE}</span>'


def risk_badge(risk: Any) -> str:
    if not risk:
        return ""
    r = str(risk)
    return (f'<span class="nbr-badge nbr-risk nbr-risk-{_esc(r.lower())}">{_OPEN}{_esc(RISK_LABEL.get(r, r))}'
            f"{_CLOSE}</span>")


def _pre(text: str, cls: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    return f"<pre{c}>{_esc(text)}</pre>"


def _collapsible(summary: str, body_html: str, *, open_: bool = False) -> str:
    return f"<details{' open' if open_ else ''}><summary>{summary}</summary>{body_html}</details>"


def _text_block(text: str, label: str, cls: str = "") -> str:
    """A <pre> of text, collapsed behind a summary when it is long."""
    if _is_long(text):
        n = text.count("\n") + 1
        return _collapsible(f"{_esc(label)} ({n} line{'s' if n != 1 else ''}, {len(text):,} chars)", _pre(text, cls))
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
        parts.append(f'<span class="{cls}">{_esc(line)}</span>')
    return '<pre class="nbr-diff">' + "\n".join(parts) + "</pre>"


def _diff_block(diff: str, target: str) -> str:
    n = diff.rstrip("\n").count("\n") + 1
    adds = sum(1 for ln in diff.split("\n") if ln.startswith("+") and not ln.startswith("+++"))
    dels = sum(1 for ln in diff.split("\n") if ln.startswith("-") and not ln.startswith("---"))
    summary = f"diff of <code>{_esc(target)}</code>: +{adds} -{dels}"
    if n > DIFF_OPEN_LINES:
        return _collapsible(summary + f" ({n} lines)", diff_html(diff))
    return _collapsible(summary, diff_html(diff), open_=True)


def _step_html(step: dict[str, Any], decisions_by_request: dict[str, dict[str, Any]]) -> str:
    kind = step.get("kind", "info")
    status = step.get("status", "info")
    tone = STEP_TONE.get(status, "nbr-dim")
    icon = f'<span class="{tone}" title="{_esc(status)}">{STEP_ICON.get(status, "·")}</span>'
    label = {"model": "model", "tool": "tool", "denied": "denied", "thinking": "thinking", "question": "question",
             "child": "sub-agent", "error": "error", "info": "info"}.get(kind, kind)
    head = f'{icon} <span class="nbr-kind">{_esc(label)}</span> '
    body = ""
    if kind == "model":
        facts = [f"{fmt_tokens(step.get('tokens'))} tokens", fmt_cost(step.get("cost"), bool(step.get("cost_nominal"))),
                 fmt_ms(step.get("latency_ms"))]
        if step.get("retries"):
            facts.append(f"{step['retries']} retr{'y' if step['retries'] == 1 else 'ies'}")
        head += (f'<code>{_esc(step.get("title"))}</code> → {_esc(step.get("detail"))} '
                 f'<span class="nbr-facts">· {" · ".join(_esc(f) for f in facts if f)}</span>')
    elif kind == "tool" and step.get("outcome"):  # the icon, then what it did: "✗ raised KeyError: 'Revenue'"
        head, body = _said_html(step, f"{icon} ")
    elif kind == "tool":
        args = arguments_of(step)
        head += (f'<span class="nbr-tool">{_esc(step.get("tool") or step.get("title"))}</span>'
                 f'<span class="nbr-args">({_esc(format_args(args))})</span> {risk_badge(step.get("risk"))}')
        facts = [status]
        if step.get("duration_ms") is not None:
            facts.append(fmt_ms(step["duration_ms"]))
        if step.get("retries"):
            facts.append(f"{step['retries']} retr{'y' if step['retries'] == 1 else 'ies'}")
        head += f' <span class="nbr-facts">· {" · ".join(_esc(f) for f in facts)}</span>'
        if status == "failed" and step.get("detail"):
            body += f'<div class="nbr-why nbr-bad">{_esc(step["detail"])}</div>'
        elif step.get("detail"):
            body += f'<div class="nbr-why">{_esc(step["detail"])}</div>'
        if step.get("risk_reason"):
            body += f'<div class="nbr-why nbr-bad">high risk: {_esc(step["risk_reason"])}</div>'
        if isinstance(args, dict) and args and _args_are_long(args):
            body += _collapsible("arguments", _pre(_json(args, indent=2)))
        if step.get("result_preview"):
            preview = str(step["result_preview"])
            body += _text_block(preview, "result") if _is_long(preview) else _pre(preview, "nbr-result")
    elif kind == "denied":
        target = f' <code>{_esc(step["target"])}</code>' if step.get("target") else ""
        rule = f' <span class="nbr-facts">(rule {_esc(step["rule"])})</span>' if step.get("rule") else ""
        head += f'<span class="nbr-tool">{_esc(step.get("tool") or step.get("title"))}</span>{target}{rule}'
        body += f'<div class="nbr-why nbr-bad">{_esc(step.get("detail"))}</div>'
    elif kind == "thinking":
        text = str(step.get("detail") or "")
        if _is_long(text):
            body += _collapsible(_esc(_clip(text, 90)), f'<div class="nbr-thinking">{_esc(text)}</div>')
        else:
            head += f'<span class="nbr-thinking">{_esc(text)}</span>'
    elif kind == "question":
        head += f"<strong>{_esc(step.get('detail'))}</strong>"
        if step.get("answer") is not None:
            d = decisions_by_request.get(step.get("request_id") or "")
            by = f' <span class="nbr-facts">— {_esc(_decision_line({**d, "text": ""}))}</span>' if d else ""
            body += f'<div class="nbr-why">answer: <q>{_esc(step["answer"])}</q>{by}</div>'
    elif kind == "child":
        head += (f'<code>{_esc(short_id(step.get("child_run_id")))}</code> '
                 f'<span class="nbr-facts">{_esc(_clip(step.get("detail") or "", 200))}</span>')
    elif kind == "error":
        head += f"<strong>{_esc(step.get('title'))}</strong>"
        if step.get("retries"):
            head += f' <span class="nbr-facts">· {step["retries"]} retries</span>'
        body += _text_block(str(step.get("detail") or ""), "error")
    else:
        head += f'<span class="nbr-facts">{_esc(step.get("detail") or step.get("title"))}</span>'
    if step.get("summary"):  # a compaction's summary: what the model works from, behind its label
        body += _collapsible(_esc(step.get("summary_label")), _pre(str(step["summary"]), "nbr-summary"))
    return (f'<li class="nbr-step nbr-k-{_esc(kind)} nbr-st-{_esc(status)}"><span class="nbr-line">{head}</span>'
            f"{body}</li>")


def _said_html(step: dict[str, Any], head: str) -> tuple[str, str]:
    """A tool step worded as a sentence (ui/step_words.py): what it did first, then the call; its traceback and its
    raw result (JSON, digests) behind disclosures."""
    args = arguments_of(step)
    tone = STEP_TONE.get(str(step.get("status")), "nbr-dim")
    facts = [fmt_ms(step["duration_ms"]) if step.get("duration_ms") is not None and tone != "nbr-warn" else "",
             f"{step['retries']} retr{'y' if step['retries'] == 1 else 'ies'}" if step.get("retries") else ""]
    head += (f'<span class="nbr-said {tone if tone != "nbr-ok" else ""}">{_esc(step["outcome"])}</span> '
             f'<span class="nbr-facts">·</span> <span class="nbr-tool">{_esc(step.get("tool") or step.get("title"))}'
             f'</span><span class="nbr-args">({_esc(format_args(args))})</span> {risk_badge(step.get("risk"))}')
    if any(facts):
        head += f' <span class="nbr-facts">· {" · ".join(_esc(f) for f in facts if f)}</span>'
    body = ""
    if why_shown(step):
        body += f'<div class="nbr-why nbr-bad">{_esc(why_shown(step))}</div>'
    elif step.get("detail") and step.get("status") == "ok":  # what let it run
        body += f'<div class="nbr-why">{_esc(step["detail"])}</div>'
    if step.get("risk_reason"):
        body += f'<div class="nbr-why nbr-bad">high risk: {_esc(step["risk_reason"])}</div>'
    if step.get("traceback"):
        body += _collapsible("traceback (its end)", _pre(str(step["traceback"]), "nbr-traceback"))
    if isinstance(args, dict) and args and _args_are_long(args):
        body += _collapsible("arguments", _pre(_json(args, indent=2)))
    if step.get("result_preview"):
        body += _collapsible("result", _pre(str(step["result_preview"]), "nbr-result"))
    return head, body


def _steps_html(view: dict[str, Any]) -> str:
    steps = view.get("steps") or []
    if not steps:
        return ""
    by_request = {d.get("request_id"): d for d in view.get("decisions") or [] if d.get("request_id")}
    head, middle, tail = _step_window(steps)
    out = [f'<h4 class="nbr-section">{_esc(timeline_label(view))}</h4>', '<ol class="nbr-steps">']
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
    out = [f'<div class="nbr-plan{" nbr-plan-high" if effects else ""}" data-plan-id="{_esc(plan.get("plan_id"))}">',
           f'<h5 class="nbr-plan-head">Plan {index}: {_esc(_upper_first(plan_summary(plan)))} '
           f'{_badge(status_text, "nbr-warn" if waiting else PLAN_TONE.get(status, "nbr-dim"))} '
           f'<span class="nbr-facts">max risk</span> {risk_badge(plan.get("max_risk"))}</h5>']
    if model_note(plan):  # the model's words: a quote, not the question
        out.append(f'<p class="nbr-purpose"><span class="nbr-facts">the model says </span>'
                   f'<q>{_esc(model_note(plan))}</q></p>')
    if effects:
        items = "".join(f"<li>{_esc(e)}</li>" for e in effects)
        out.append(f'<div class="nbr-danger" role="note"><strong>⚠ High risk</strong> — this plan:'
                   f"<ul>{items}</ul></div>")
    steps = plan.get("steps") or []
    if steps:
        out.append("<table><thead><tr><th>#</th><th>tool</th><th>target</th><th>risk</th><th>arguments</th></tr>"
                   "</thead><tbody>")
        for n, s in enumerate(steps, 1):
            out.append(f'<tr><td>{n}</td><td><span class="nbr-tool">{_esc(s.get("tool"))}</span></td>'
                       f'<td>{_target_html(s)}</td>'
                       f'<td>{risk_badge(s.get("risk"))}{_risk_reason_html(s)}</td>'
                       f'<td><span class="nbr-args">{_esc(format_args(arguments_of(s), 48))}</span></td></tr>')
        out.append("</tbody></table>")
        for s in steps:
            diff = s.get("diff") or s.get("preview")
            if not diff:
                continue
            if s.get("diff") or _looks_like_diff(str(diff)):
                out.append(_diff_block(str(diff), str(s.get("target") or s.get("tool") or "")))
            else:
                out.append(_text_block(str(diff), f"preview of {s.get('tool')}"))
    decisions = _plan_decisions(view, plan.get("plan_id"))
    if decisions:
        out.append('<ul class="nbr-decisions">' + "".join(
            f'<li><span class="{PLAN_TONE.get(d.get("kind", ""), "nbr-dim")}">'
            f'{_esc(DECISION_VERB.get(d.get("kind", ""), d.get("kind", "")))}</span>'
            f'{_esc(_decision_line(d)[len(DECISION_VERB.get(d.get("kind", ""), d.get("kind", ""))):])}</li>'
            for d in decisions) + "</ul>")
    elif plan.get("auto_executing"):
        out.append('<p class="nbr-facts">ran without asking: within the autonomy level</p>')
    out.append("</div>")
    return "".join(out)


def _target_html(step: dict[str, Any]) -> str:
    """A plan step's target; an agent's cell as the notebook shows it ("[3] df = …"), its ids on hover."""
    if cell_name(step):
        return f'<code class="nbr-cell-name" title="{_esc(cell_title(step))}">{_esc(cell_name(step))}</code>'
    return f"<code>{_esc(step.get('target'))}</code>" if step.get("target") else ""


def _risk_reason_html(step: dict[str, Any]) -> str:
    reason = step.get("risk_reason")
    out = f'<div class="nbr-risk-reason">{_esc(reason)}</div>' if reason else ""
    if step.get("asks") is False:
        out += f'<div class="nbr-not-asked">{_esc(NOT_ASKED)}</div>'
    return out


def _summary_html(v: dict[str, Any], status: str) -> str:
    """The compact record's summary (record_summary): the status and the request, then the outcome and counts."""
    state, sep, request = summary_head(v).partition(" · ")
    more = summary_tail(v)
    tone = STATUS_TONE.get("superseded" if v.get("superseded_by") else status, "nbr-dim")
    return (f'<details class="nbr-compact"><summary class="nbr-summary-line"><strong class="{tone}">{_esc(state)}'
            f'</strong>{_esc(sep)}{_esc(request)}<span class="nbr-summary-more">{_esc(more)}</span></summary>')


def render_html(view: dict[str, Any]) -> str:
    """The run as a self-contained HTML fragment (scoped style, no script, no external assets)."""
    v = view or {}
    status = str(v.get("status") or "running")
    run_id = str(v.get("run_id") or "")
    out = [f'<div class="nbagent-run nbr-status-{_esc(status)}" data-run-id="{_esc(run_id)}">',
           f"<style>{CSS}{EFFECTS_CSS}</style>"]
    folded = compact(v)
    if reproduced_line(v):  # in sight, folded or not
        out.append(f'<p class="nbr-reproduced"><strong>↻</strong> {_esc(_upper_first(reproduced_line(v)))}</p>')
    if v.get("superseded_by"):  # in sight, folded or not, as the undo banner: what became of the run
        out.append(f'<div class="nbr-banner nbr-dim"><strong>↷ Superseded</strong> by run '
                   f'<code>{_esc(v["superseded_by"])}</code>: an earlier cell was re-run; this record is kept '
                   "as history.</div>")
    out.append(undo_banner_html(v))
    if folded:  # two lines; the whole record behind them (a <details>: no script needed)
        out.append(_summary_html(v, status))
    tone = STATUS_TONE.get(status, "nbr-dim")
    label = f"{STATUS_ICON.get(status, '')} {status.replace('_', ' ')}"
    out.append(f'<h4 class="nbr-title">{_badge(label, tone)} <span>nbagent run</span></h4>')
    meta = [f"model <code>{_esc(v.get('model'))}</code>", f"autonomy <code>{_esc(v.get('autonomy'))}</code>",
            f"run <code>{_esc(run_id)}</code>"]
    if v.get("cell_id"):  # the short label; the whole id on hover
        meta.append(f'cell <code title="{_esc(v["cell_id"])}">{_esc(cell_label(v))}</code>')
    if v.get("previous_run_id"):
        meta.append(f"continues <code>{_esc(short_id(v['previous_run_id']))}</code>")
    if v.get("parent_run_id"):
        meta.append(f"sub-agent of <code>{_esc(short_id(v['parent_run_id']))}</code>")
    if undoes_line(v):
        meta.append(_esc(undoes_line(v)))
    if v.get("started_at"):
        meta.append(f"started {_esc(fmt_ts(v['started_at']))}")
    out.append('<p class="nbr-meta">' + " · ".join(meta) + "</p>")
    if v.get("prompt"):
        out.append(f'<blockquote class="nbr-prompt">{_esc(v["prompt"])}</blockquote>')
    if answerable(v):
        out.append(f'<div class="nbr-banner nbr-warn"><strong>‖ {_esc(pending_text(v))}</strong>'
                   f'<span class="nbr-hint">in a new cell: {_esc(pending_hint(v))}</span></div>')
    elif status == "interrupted":
        out.append(f'<div class="nbr-banner nbr-warn"><strong>■ interrupted</strong>'
                   f'<span class="nbr-hint">in a new cell: {_esc(pending_hint(v))}</span></div>')
    if outcome_warning(v):
        out.append(f'<div class="nbr-banner nbr-warn"><strong>⚠ {_esc(outcome_warning(v))}</strong></div>')
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
                   + "".join(f"<li>{_esc(e)}</li>" for e in errors) + "</ul>")
    nominal = bool(v.get("cost_nominal"))
    foot = [f"<span><strong>Totals</strong> {_esc(totals_line(v.get('totals') or {}, nominal))}</span>"]
    if tree_line(v.get("tree")):
        foot.append(f"<span><strong>Run tree</strong> {_esc(tree_line(v.get('tree'), nominal))}</span>")
    if nominal:
        foot.append(f'<span class="nbr-nominal">{_esc(NOMINAL_NOTE)}</span>')
    if v.get("log_path"):
        foot.append(f"<span><strong>Log</strong> <code>{_esc(v['log_path'])}</code></span>")
    if undo_hint(v):
        command, _, rest = undo_hint(v).partition(" undoes ")
        out.append(f'<p class="nbr-undo"><strong>↶ Undo</strong> <code>{_esc(command)}</code> undoes '
                   f"{_esc(rest)}</p>")
    out.append('<div class="nbr-foot">' + "".join(foot) + "</div>" + ("</details>" if folded else "") + "</div>")
    return "\n".join(o for o in out if o)
