"""The static record of a run: what the saved notebook keeps when the live view is gone.

Renders the view-state dict (`nbagent.ui.viewstate`) as `text/html` (self-contained: one scoped `<style>`, no
script, no external assets; plain semantic HTML still reads well where styles are stripped, as on GitHub),
`text/plain`, and Markdown (`%agent export --format md`). `bundle(view)` is the MIME bundle a display handle
shows; `RunRecord(view)` is the same as a displayable object.

Every string that came from the model, a tool or a person is untrusted: it is escaped before it is placed in
HTML, and the answer's Markdown is rendered by markdown-it with raw HTML off, then sanitised by nh3 against a
short allow-list (links: http, https and mailto only). Plain Python: no IPython or widget import.
"""

from __future__ import annotations

import html
import json
import re
from datetime import datetime
from typing import Any

from .effects_summary import CSS as EFFECTS_CSS
from .effects_summary import effects_html, effects_text, undo_banner_html, undo_note, undoes_line
from .viewstate import MIME

HEAD_STEPS = 8  # a run with more than MAX_STEPS_SHOWN steps shows the first HEAD_STEPS and the last TAIL_STEPS
TAIL_STEPS = 8
MAX_STEPS_SHOWN = 20
DIFF_OPEN_LINES = 30  # a longer diff is collapsed
LONG_TEXT_CHARS = 300  # a longer result or thinking text is collapsed
LONG_TEXT_LINES = 6

STATUS_ICON = {"completed": "✓", "completed_with_errors": "⚠", "failed": "✗", "running": "●", "waiting": "‖",
               "interrupted": "■", "superseded": "↷"}
STEP_ICON = {"ok": "✓", "failed": "✗", "denied": "⊘", "running": "…", "waiting": "‖", "info": "·"}
RISK_LABEL = {"READ_ONLY": "READ_ONLY", "WRITE_LOW_RISK": "WRITE_LOW_RISK", "WRITE_HIGH_RISK": "WRITE_HIGH_RISK"}
DECISION_VERB = {"approved": "approved", "rejected": "denied", "refined": "refined", "answered": "answered"}
PLAN_STATUS = {"proposed": "proposed", "auto": "ran without asking", "approved": "approved", "rejected": "denied",
               "refined": "sent back to the model"}


# ---------------------------------------------------------------------------------------------- small formatters

def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def fmt_ms(ms: Any) -> str:
    if ms is None:
        return ""
    ms = float(ms)
    if ms < 1:
        return f"{ms:.2f} ms"
    if ms < 10:
        return f"{ms:.1f} ms"
    if ms < 1000:
        return f"{ms:.0f} ms"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f} s"
    m, s = divmod(round(s), 60)
    if m < 60:
        return f"{m} min {s} s"
    h, m = divmod(m, 60)
    return f"{h} h {m} min"


NOMINAL_NOTE = "nominal: an offline model's made-up prices, so cost tracking can be tried; no money was spent"


def fmt_cost(cost: Any, nominal: bool = False) -> str:
    """A dollar amount; `nominal` (an offline model) says so beside it, so it never reads as money spent."""
    if cost is None:
        return "cost unknown"
    cost = float(cost)
    if cost == 0:
        text = "$0"
    elif cost < 0.01:
        text = f"${cost:.2g}" if cost >= 0.0001 else f"${cost:.1e}"
    else:
        text = f"${cost:,.2f}"
    return f"{text} nominal" if nominal else text


def plural(n: Any, one: str, many: str) -> str:
    n = int(n or 0)
    return f"{n} {one if n == 1 else many}"


def fmt_tokens(n: Any) -> str:
    return f"{int(n or 0):,}"


def fmt_ts(ts: Any) -> str:
    if not ts:
        return ""
    try:
        t = datetime.fromisoformat(str(ts).replace("Z", "+00:00"))
    except ValueError:
        return str(ts)
    return t.strftime("%Y-%m-%d %H:%M:%S") + (" UTC" if t.utcoffset() is not None and not t.utcoffset() else "")


def short_id(run_id: Any) -> str:
    return str(run_id or "")[:12]


def _clip(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _json(value: Any, indent: int | None = None) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, indent=indent, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _is_long(text: str) -> bool:
    return len(text) > LONG_TEXT_CHARS or text.count("\n") >= LONG_TEXT_LINES


def arguments_of(step: dict[str, Any]) -> Any:
    """A step's arguments in the order the model sent them (`arg_keys`: the log's JSON has its keys sorted)."""
    args, keys = step.get("arguments"), step.get("arg_keys")
    if not isinstance(args, dict) or not isinstance(keys, list):
        return args
    rank = {str(k): i for i, k in enumerate(keys)}
    return dict(sorted(args.items(), key=lambda kv: rank.get(kv[0], len(rank))))


def format_args(arguments: Any, width: int = 60) -> str:
    """`path="a.csv", depth=2`: each value as compact JSON, clipped."""
    if not isinstance(arguments, dict):
        return _clip(_json(arguments), width)
    return ", ".join(f"{k}={_clip(_json(v), width)}" for k, v in arguments.items())


def _args_are_long(arguments: Any) -> bool:
    return len(_json(arguments)) > 120 or any(
        isinstance(v, str) and ("\n" in v or len(v) > 60) for v in (arguments or {}).values()
    ) if isinstance(arguments, dict) else len(_json(arguments)) > 120


def tree_line(tree: dict[str, Any] | None, nominal: bool = False) -> str:
    """What a run and its sub-agents spent together (what budgets count), and each run's share."""
    if not tree or len(tree.get("runs") or {}) < 2:
        return ""
    runs = tree["runs"]
    shares = ", ".join(f"{rid[-6:]}: {plural(r.get('model_calls'), 'call', 'calls')}"
                       f" {fmt_cost(r.get('cost'), nominal)}" for rid, r in runs.items())
    return (f"with {plural(len(runs) - 1, 'sub-agent', 'sub-agents')}: "
            f"{plural(tree.get('model_calls'), 'model call', 'model calls')}"
            f" · {fmt_tokens(tree.get('tokens'))} tokens · "
            f"{fmt_cost(tree.get('cost') if tree.get('cost_known', True) else None, nominal)} · "
            f"{plural(tree.get('tool_steps'), 'tool call', 'tool calls')} (by run: {shares})")


def tool_calls(totals: dict[str, Any]) -> int:
    """A run's tool calls; views written before `tool_calls` had it as `steps`."""
    t = totals or {}
    return int(t.get("tool_calls", t.get("steps")) or 0)


def totals_line(totals: dict[str, Any], nominal: bool = False) -> str:
    """"5 tool calls · 4 model calls · 895 tokens (738 in, 157 out) · $0.0011 · 3.8 s": tool calls, never "steps",
    so the count is not read against the timeline's entries."""
    t = totals or {}
    parts = [plural(tool_calls(t), "tool call", "tool calls"),
             plural(t.get("model_calls"), "model call", "model calls"),
             f"{fmt_tokens(t.get('tokens'))} tokens"
             + (f" ({fmt_tokens(t.get('prompt_tokens'))} in, {fmt_tokens(t.get('completion_tokens'))} out)"
                if t.get("prompt_tokens") or t.get("completion_tokens") else ""),
             fmt_cost(t.get("cost"), nominal)]
    if t.get("wall_ms") is not None:
        parts.append(fmt_ms(t.get("wall_ms")))
    return " · ".join(parts)


def timeline_label(view: dict[str, Any]) -> str:
    return f"Timeline · {plural(len(view.get('steps') or []), 'entry', 'entries')}"


def cell_label(view: dict[str, Any]) -> str:
    return str(view.get("cell_label") or view.get("cell_id") or "")


def outcome_warning(view: dict[str, Any]) -> str:
    """For a run that ended with failed or denied tool calls: say so before its answer, which is the model's own
    account and may claim what did not happen."""
    if view.get("status") != "completed_with_errors":
        return ""
    t = view.get("totals") or {}
    failed = int(t.get("failed") or 0)
    refused = (view.get("effects") or {}).get("refused")  # denied plans too, which never became tool steps
    denied = len(refused) if isinstance(refused, list) else int(t.get("denied") or 0)
    what = [x for x in (plural(failed, "tool call failed", "tool calls failed") if failed else "",
                        plural(denied, "tool call was denied", "tool calls were denied") if denied else "") if x]
    head = " and ".join(what) if what else "the run recorded errors"
    return (f"{head[:1].upper()}{head[1:]}: the answer is the model's own account and may describe what did not "
            "happen; check Effects and Errors")


def pending_hint(view: dict[str, Any]) -> str:
    """The `%agent` line that answers a waiting run (plain text)."""
    pending = view.get("pending") or {}
    rid = short_id(view.get("run_id"))
    if pending.get("kind") == "approval":
        return (f'%agent approve {rid}  ·  %agent deny {rid} "reason"  ·  %agent refine {rid} "feedback"'
                + ("  (then %agent resume " + rid + ")" if view.get("status") == "interrupted" else ""))
    if pending.get("kind") == "human_input":
        return f'%agent answer {rid} "your answer"'
    return f"%agent resume {rid}"


def answerable(view: dict[str, Any]) -> bool:
    """A pending decision someone can still give: a superseded run keeps its pending request in the log, but its
    record must not offer `%agent approve` beside "superseded" (as run_view.js)."""
    return bool(view.get("pending")) and not view.get("superseded_by") and view.get("status") != "superseded"


FILE_CHANGE_TOOLS = ("create_file", "write_file", "delete_file")


def undo_hint(view: dict[str, Any]) -> str:
    """For a run that ended having changed files (completed create/write/delete calls): how to undo it."""
    if str(view.get("status") or "running") in ("running", "waiting") or not view.get("run_id") or \
            view.get("undone_by"):  # undone already: its changes are not in the folder to undo
        return ""
    paths = {str(s.get("target") or (s.get("arguments") or {}).get("path") or s.get("call_id"))
             for s in view.get("steps") or []
             if s.get("kind") == "tool" and s.get("tool") in FILE_CHANGE_TOOLS and s.get("status") == "ok"}
    if not paths:
        return ""
    return f"%agent undo {view['run_id']} undoes this run's {plural(len(paths), 'file change', 'file changes')}"


def pending_text(view: dict[str, Any]) -> str:
    pending = view.get("pending") or {}
    if pending.get("kind") == "approval":
        plan = next((p for p in view.get("plans") or [] if p.get("plan_id") == pending.get("plan_id")), None)
        what = f"plan {short_id(pending.get('plan_id'))}"
        if plan:
            what += f" ({_clip(plan_summary(plan), 80)})"
        return f"waiting for approval of {what}"
    if pending.get("kind") == "human_input":
        return f"waiting for an answer to: {_clip(pending.get('question') or '', 200)}"
    return "waiting"


HIGH = "WRITE_HIGH_RISK"
# the runtime's stand-in purpose when the model wrote nothing ("2 tool call(s): a, b"): not the model's words
_NO_NOTE = re.compile(r"\d+ tool call\(s\): [\w.:-]+(, [\w.:-]+)*")
_FILE_VERB = {"delete_file": "delete", "write_file": "overwrite", "create_file": "create"}


def _step_target(step: dict[str, Any]) -> str:
    if step.get("target"):
        return str(step["target"])
    args = step.get("arguments")
    return str(args["path"]) if isinstance(args, dict) and isinstance(args.get("path"), str) else ""


def model_note(plan: dict[str, Any]) -> str:
    """The model's own words about a plan (shown quoted, never as the question); "" if it wrote none."""
    purpose = str(plan.get("purpose") or "")
    return "" if _NO_NOTE.fullmatch(purpose) else purpose


def step_action(step: dict[str, Any]) -> str:
    """What a plan step does, in nbagent's words (as run_view.js's stepAction): "delete data.txt", "run code"."""
    verb = _FILE_VERB.get(str(step.get("tool")))
    if verb:
        return f"{verb} {_clip(_step_target(step) or 'a file', 60)}"
    return "run code" if step.get("tool") == "run_python" else f"run {step.get('tool') or 'a tool'}"


def plan_summary(plan: dict[str, Any]) -> str:
    """A plan phrased from its steps, never from the model's purpose (as run_view.js's planSummary)."""
    steps = plan.get("steps") or []
    if not steps:
        return "no steps"
    if len(steps) == 1:
        return step_action(steps[0])
    shown = ", ".join(step_action(s) for s in steps[:3])
    return f"{len(steps)} steps: {shown}" + (f", and {len(steps) - 3} more" if len(steps) > 3 else "")


def high_risk_effects(plan: dict[str, Any]) -> list[str]:
    """What makes a plan high risk: each WRITE_HIGH_RISK step's effect, with its risk_reason."""
    out = []
    for s in plan.get("steps") or []:
        if s.get("risk") != HIGH:
            continue
        t = _clip(_step_target(s) or "a file", 80)
        effect = {"delete_file": f"deletes {t}", "write_file": f"replaces the contents of {t}",
                  "create_file": f"creates {t}"}.get(str(s.get("tool")))
        if effect is None:
            effect = ("runs Python code in the kernel, with everything the notebook can reach"
                      if s.get("tool") == "run_python" else
                      f"runs {s.get('tool') or 'a tool'}" + (f" on {_clip(str(s['target']), 60)}" if s.get("target")
                                                              else "") + ", a tool marked high risk")
        out.append(f"{effect}: {s['risk_reason']}" if s.get("risk_reason") else effect)
    if not out and plan.get("max_risk") == HIGH:
        out.append("includes a step marked high risk")
    return out


def step_summary(step: dict[str, Any]) -> str:
    """One line for a step, plain text."""
    kind = step.get("kind")
    if kind == "model":
        bits = [f"{fmt_tokens(step.get('tokens'))} tokens", fmt_cost(step.get("cost"), step.get("cost_nominal")),
                fmt_ms(step.get("latency_ms"))]
        if step.get("retries"):
            bits.append(f"{step['retries']} retr{'y' if step['retries'] == 1 else 'ies'}")
        return f"model {step.get('title', '')}: {step.get('detail', '')} · " + " · ".join(b for b in bits if b)
    if kind == "tool":
        line = f"{step.get('tool') or step.get('title')}({format_args(arguments_of(step), 40)})"
        if step.get("risk"):
            line += f" [{step['risk']}]"
        line += f" {step.get('status', '')}"
        if step.get("duration_ms") is not None:
            line += f" {fmt_ms(step['duration_ms'])}"
        if step.get("retries"):
            line += f" ({step['retries']} retr{'y' if step['retries'] == 1 else 'ies'})"
        if step.get("status") == "failed" and step.get("detail"):
            line += f": {_clip(step['detail'], 120)}"
        elif step.get("grant_id"):
            line += f" · {_clip(step.get('detail') or '', 160)}"
        if step.get("status") != "failed" and step.get("result_preview"):
            line += f" → {_clip(step['result_preview'], 100)}"
        return line
    if kind == "denied":
        target = f" {step['target']}" if step.get("target") else ""
        return f"denied {step.get('tool') or step.get('title')}{target}: {_clip(step.get('detail') or '', 140)}"
    if kind == "thinking":
        return f"thinking: {_clip(step.get('detail') or '', 140)}"
    if kind == "question":
        line = f"question: {_clip(step.get('detail') or '', 120)}"
        if step.get("answer") is not None:
            line += f" → answer: {_clip(step['answer'], 80)}"
        return line
    if kind == "child":
        return f"sub-agent {short_id(step.get('child_run_id'))}: {_clip(step.get('detail') or '', 120)}"
    if kind == "error":
        return f"error {step.get('title', '')}: {_clip(step.get('detail') or '', 160)}"
    return _clip(step.get("detail") or step.get("title") or "", 160)


def _plan_decisions(view: dict[str, Any], plan_id: Any) -> list[dict[str, Any]]:
    return [d for d in view.get("decisions") or [] if d.get("plan_id") == plan_id and plan_id]


def _decision_line(d: dict[str, Any]) -> str:
    verb = DECISION_VERB.get(d.get("kind", ""), d.get("kind", ""))
    line = f"{verb} by {d.get('by') or 'unknown'}"
    if d.get("ts"):
        line += f" at {fmt_ts(d['ts'])}"
    if d.get("text"):
        label = {"rejected": "reason", "refined": "feedback", "answered": "answer"}.get(d.get("kind", ""), "note")
        line += f" — {label}: {d['text']}"
    for g in d.get("grants") or []:
        line += f" · {grant_reach(g)}"
    return line


def grant_reach(g: dict[str, Any]) -> str:
    """"and for the rest of this run: write_file path=report.md ... (grant 01JX…)": a grant a decision gave."""
    reach = "the rest of this run" if g.get("scope") == "run" else "this session"
    return f"and for {reach}: {g.get('covers', '')} (grant {g.get('grant_id', '')})"


Steps = list[dict[str, Any]]


def _step_window(steps: Steps) -> tuple[Steps, Steps, Steps]:
    """(head, hidden middle, tail) of a long timeline."""
    if len(steps) <= MAX_STEPS_SHOWN:
        return steps, [], []
    return steps[:HEAD_STEPS], steps[HEAD_STEPS:-TAIL_STEPS], steps[-TAIL_STEPS:]


# ------------------------------------------------------------------------------------------------- Markdown → HTML

# The model's Markdown goes through markdown-it (CommonMark, raw HTML off: any tag in the text comes out as text),
# then through nh3 (the Ammonia sanitiser) with a short allow-list, so a gap in either alone lets no markup through.
LINK_SCHEMES = frozenset({"http", "https", "mailto"})
LINK_REL = "noopener noreferrer"
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_CODE_CLASS = re.compile(r"language-[\w+.#-]{1,40}")
_MD_TAGS = {"p", "br", "hr", "h3", "h4", "h5", "h6", "strong", "em", "s", "del", "code", "pre", "blockquote", "ul",
            "ol", "li", "table", "thead", "tbody", "tr", "th", "td", "a"}
_MD_ATTRS = {"a": {"href"}, "ol": {"start"}, "code": {"class"}, "th": {"style"}, "td": {"style"}}


def link_allowed(url: str) -> bool:
    """Only absolute http, https and mailto links are followed; anything else (javascript:, data:, a path that the
    notebook server would resolve) is shown as text."""
    m = _SCHEME.match(url)
    return m is not None and m.group(1).lower() in LINK_SCHEMES


def _attribute_filter(tag: str, attr: str, value: str) -> str | None:
    if tag == "code" and attr == "class":
        return value if _CODE_CLASS.fullmatch(value) else None
    if tag == "a" and attr == "href":
        return value if link_allowed(value) else None
    return value


def _markdown_it() -> Any:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
    md.validateLink = lambda url: True  # links are judged below, so a refused one keeps its text, not its syntax

    def judge_links(state: Any) -> None:
        for block in state.tokens:
            if block.type in ("heading_open", "heading_close"):
                block.tag = f"h{min(6, int(block.tag[1]) + 2)}"  # the answer sits under the record's own headings
            refused = False  # CommonMark links never nest: a link_close closes the last link_open
            for token in block.children or []:
                if token.type == "link_open":
                    refused = not link_allowed(str(token.attrGet("href") or ""))
                    token.meta["refused"] = refused
                elif token.type == "link_close":
                    token.meta["refused"] = refused
                elif token.type == "image":  # no external assets in the record: an image is a link to it
                    token.meta["refused"] = not link_allowed(str(token.attrGet("src") or ""))

    md.core.ruler.push("nbagent_links", judge_links)

    def link_open(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        return "" if tokens[idx].meta.get("refused") else self.renderToken(tokens, idx, options, env)

    def link_close(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        return "" if tokens[idx].meta.get("refused") else self.renderToken(tokens, idx, options, env)

    def image(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        token = tokens[idx]
        alt = html.escape(self.renderInlineAsText(token.children or [], options, env) or "image")
        if token.meta.get("refused"):
            return alt
        return f'<a href="{html.escape(str(token.attrGet("src")), quote=True)}">image: {alt}</a>'

    md.add_render_rule("link_open", link_open)
    md.add_render_rule("link_close", link_close)
    md.add_render_rule("image", image)
    return md


_MD: Any = None


def markdown_html(source: str) -> str:
    """Untrusted Markdown (the model's answer) as safe HTML: CommonMark with tables and strikethrough, headings
    from h3 down, raw HTML shown as text, links only to http(s) and mailto (rel="noopener noreferrer")."""
    import nh3

    global _MD
    if _MD is None:
        _MD = _markdown_it()
    rendered = _MD.render(str(source or "").replace("\x00", ""))
    return nh3.clean(rendered, tags=_MD_TAGS, attributes=_MD_ATTRS, attribute_filter=_attribute_filter,
                     clean_content_tags={"script", "style"}, link_rel=LINK_REL, url_schemes=set(LINK_SCHEMES),
                     url_relative="deny", filter_style_properties={"text-align"}).strip()


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
"""

STATUS_TONE = {"completed": "nbr-ok", "completed_with_errors": "nbr-warn", "failed": "nbr-bad",
               "running": "nbr-info", "waiting": "nbr-warn", "interrupted": "nbr-warn", "superseded": "nbr-dim"}
STEP_TONE = {"ok": "nbr-ok", "failed": "nbr-bad", "denied": "nbr-bad", "running": "nbr-info", "waiting": "nbr-warn",
             "info": "nbr-dim"}
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
        facts = [f"{fmt_tokens(step.get('tokens'))} tokens", fmt_cost(step.get("cost"), step.get("cost_nominal")),
                 fmt_ms(step.get("latency_ms"))]
        if step.get("retries"):
            facts.append(f"{step['retries']} retr{'y' if step['retries'] == 1 else 'ies'}")
        head += (f'<code>{_esc(step.get("title"))}</code> → {_esc(step.get("detail"))} '
                 f'<span class="nbr-facts">· {" · ".join(_esc(f) for f in facts if f)}</span>')
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
    return (f'<li class="nbr-step nbr-k-{_esc(kind)} nbr-st-{_esc(status)}"><span class="nbr-line">{head}</span>'
            f"{body}</li>")


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
                       f'<td>{"<code>" + _esc(s.get("target")) + "</code>" if s.get("target") else ""}</td>'
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


def _upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]


NOT_ASKED = "not asked: a grant or the autonomy answers it, not this decision"


def _risk_reason_html(step: dict[str, Any]) -> str:
    reason = step.get("risk_reason")
    out = f'<div class="nbr-risk-reason">{_esc(reason)}</div>' if reason else ""
    if step.get("asks") is False:
        out += f'<div class="nbr-not-asked">{_esc(NOT_ASKED)}</div>'
    return out


def _looks_like_diff(text: str) -> bool:
    return text.startswith(("--- ", "diff ", "@@")) or "\n@@ " in text


def render_html(view: dict[str, Any]) -> str:
    """The run as a self-contained HTML fragment (scoped style, no script, no external assets)."""
    v = view or {}
    status = str(v.get("status") or "running")
    run_id = str(v.get("run_id") or "")
    out = [f'<div class="nbagent-run nbr-status-{_esc(status)}" data-run-id="{_esc(run_id)}">',
           f"<style>{CSS}{EFFECTS_CSS}</style>"]
    if v.get("superseded_by"):
        out.append(f'<div class="nbr-banner nbr-dim"><strong>↷ Superseded</strong> by run '
                   f'<code>{_esc(v["superseded_by"])}</code>: an earlier cell was re-run; this record is kept '
                   "as history.</div>")
    out.append(undo_banner_html(v))
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
    out.append('<div class="nbr-foot">' + "".join(foot) + "</div></div>")
    return "\n".join(o for o in out if o)


# ------------------------------------------------------------------------------------------------------- text

def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in str(text).split("\n"))


def render_text(view: dict[str, Any]) -> str:
    """A compact plain-text summary: status, prompt, one line per step, plans, answer, totals, log."""
    v = view or {}
    status = str(v.get("status") or "running")
    lines = [f"nbagent run {v.get('run_id', '')} · {STATUS_ICON.get(status, '')} {status} · model {v.get('model')}"
             f" · autonomy {v.get('autonomy')}" + (f" · cell {cell_label(v)}" if v.get("cell_id") else "")]
    if v.get("superseded_by"):
        lines.append(f"superseded by run {v['superseded_by']} (an earlier cell was re-run)")
    if undo_note(v)[1]:
        lines.append(f"↶ {undo_note(v)[1]}")
    if undoes_line(v):
        lines.append(undoes_line(v))
    if v.get("prompt"):
        lines.append("prompt: " + _clip(v["prompt"], 300))
    if answerable(v):
        lines.append(f"{pending_text(v)}: in a new cell, {pending_hint(v)}")
    elif status == "interrupted":
        lines.append(f"interrupted: in a new cell, {pending_hint(v)}")
    if outcome_warning(v):
        lines.append(f"⚠ {outcome_warning(v)}")
    steps = v.get("steps") or []
    if steps:
        lines.append(f"{timeline_label(v).lower()}:")
        head, middle, tail = _step_window(steps)
        lines += [f"  {n:>2}. {step_summary(s)}" for n, s in enumerate(head, 1)]
        if middle:
            lines.append(f"      … {plural(len(middle), 'more entry', 'more entries')} …")
            lines += [f"  {n:>2}. {step_summary(s)}" for n, s in enumerate(tail, len(steps) - len(tail) + 1)]
    plans = v.get("plans") or []
    if plans:
        lines.append("plans:")
        for i, p in enumerate(plans, 1):
            decided = "; ".join(_decision_line(d) for d in _plan_decisions(v, p.get("plan_id")))
            state = decided or PLAN_STATUS.get(p.get("status", ""), p.get("status", ""))
            tools = ", ".join(f"{s.get('tool')}[{s.get('risk')}]" for s in p.get("steps") or [])
            lines.append(f"  {i}. {_clip(plan_summary(p), 80)} ({tools}): {state}")
            if model_note(p):
                lines.append(f"     the model says: \"{_clip(model_note(p), 120)}\"")
            lines += [f"     HIGH RISK: {e}" for e in high_risk_effects(p)]
    lines += effects_text(v)
    if v.get("answer"):
        lines.append("answer:")
        lines.append(_indent(str(v["answer"]).strip(), "  "))
    errors = [e for e in v.get("errors") or [] if e]
    if v.get("error") and v["error"] not in errors:
        errors.insert(0, v["error"])
    for e in errors:
        lines.append(f"error: {_clip(e, 300)}")
    if undo_hint(v):
        lines.append("undo: " + undo_hint(v))
    nominal = bool(v.get("cost_nominal"))
    lines.append("totals: " + totals_line(v.get("totals") or {}, nominal) + (f" ({NOMINAL_NOTE})" if nominal else ""))
    if tree_line(v.get("tree")):
        lines.append("run tree: " + tree_line(v.get("tree"), nominal))
    if v.get("log_path"):
        lines.append(f"log: {v['log_path']}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------- Markdown

def _fence(text: str, lang: str = "") -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text.rstrip(chr(10))}\n{ticks}"


def _code(text: str) -> str:
    text = " ".join(str(text).split())
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _md_text(text: Any) -> str:
    """Untrusted text placed in Markdown prose: no HTML, no accidental emphasis or links."""
    s = html.escape(" ".join(str(text or "").split()), quote=False)
    return re.sub(r"([\\`*_\[\]#|])", r"\\\1", s)


_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})\s*([\w+.#-]*)")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def _md_answer(answer: str) -> str:
    """The model's Markdown, kept as Markdown, but with raw HTML outside code neutralised."""
    out = []
    in_fence = None
    for line in answer.split("\n"):
        m = _FENCE.match(line)
        if m and (in_fence is None or line.strip().startswith(in_fence)):
            in_fence = m.group(1) if in_fence is None else None
            out.append(line)
            continue
        if in_fence is not None:
            out.append(line)
            continue
        heading = _HEADING.match(line)
        if heading:  # the answer sits under a level-3 heading of its own: its headings go below it
            line = "#" * min(6, len(heading.group(1)) + 3) + " " + heading.group(2)
        pieces = re.split(r"(`+[^`]*`+)", line)
        out.append("".join(p if p.startswith("`") else p.replace("<", "&lt;").replace(">", "&gt;") for p in pieces))
    return "\n".join(out)


def render_markdown(view: dict[str, Any]) -> str:
    """The run as Markdown (for `%agent export --format md`)."""
    v = view or {}
    status = str(v.get("status") or "running")
    out = [f"## nbagent run `{v.get('run_id', '')}` — {STATUS_ICON.get(status, '')} {status.replace('_', ' ')}", ""]
    meta = [f"**model** {_code(v.get('model') or '')}", f"**autonomy** {v.get('autonomy')}"]
    if v.get("cell_id"):
        meta.append(f"**cell** {_code(cell_label(v))}")
    if v.get("previous_run_id"):
        meta.append(f"**continues** {_code(v['previous_run_id'])}")
    if v.get("started_at"):
        meta.append(f"**started** {fmt_ts(v['started_at'])}")
    out += [" · ".join(meta), ""]
    if v.get("superseded_by"):
        out += [f"> **Superseded** by run {_code(v['superseded_by'])}: an earlier cell was re-run.", ""]
    if undo_note(v)[1]:
        out += [f"> **↶** {_md_text(undo_note(v)[1])}", ""]
    if v.get("prompt"):
        out += ["> " + "\n> ".join(_md_text(line) for line in str(v["prompt"]).split("\n")), ""]
    if answerable(v):
        out += [f"**{_md_text(pending_text(v))}** — in a new cell: {_code(pending_hint(v))}", ""]
    if outcome_warning(v):
        out += [f"**⚠ {_md_text(outcome_warning(v))}**", ""]
    steps = v.get("steps") or []
    if steps:
        out += [f"### {timeline_label(v)}", ""]
        for n, s in enumerate(steps, 1):
            kind = s.get("kind")
            if kind == "tool":
                line = (f"{n}. **{_md_text(s.get('tool') or s.get('title'))}** {_code(format_args(arguments_of(s)))}"
                        + (f" — `{s['risk']}`" if s.get("risk") else "") + f" — {s.get('status')}"
                        + (f", {fmt_ms(s['duration_ms'])}" if s.get("duration_ms") is not None else "")
                        + (f", {s['retries']} retries" if s.get("retries") else ""))
                out.append(line)
                if s.get("status") == "failed" and s.get("detail"):
                    out.append(f"   - error: {_md_text(s['detail'])}")
                if s.get("result_preview"):
                    out += ["", _indent(_fence(str(s["result_preview"])), " " * len(f"{n}. ")), ""]
            else:
                out.append(f"{n}. {_md_text(step_summary(s))}")
        out.append("")
    plans = v.get("plans") or []
    if plans:
        out += [f"### Plans ({len(plans)})", ""]
        for i, p in enumerate(plans, 1):
            out += [f"#### Plan {i}: {_md_text(_upper_first(plan_summary(p)))} — "
                    f"{PLAN_STATUS.get(p.get('status', ''), p.get('status'))} (max risk `{p.get('max_risk')}`)", ""]
            if model_note(p):
                out += [f"> the model says: {_md_text(model_note(p))}", ""]
            out += [f"**⚠ High risk:** this plan {_md_text(e)}" + "  " for e in high_risk_effects(p)]
            out += ["", "| # | tool | target | risk | arguments |", "|---|---|---|---|---|"]
            for n, s in enumerate(p.get("steps") or [], 1):
                reason = f" ({_md_text(s['risk_reason'])})" if s.get("risk_reason") else ""
                reason += f" ({NOT_ASKED})" if s.get("asks") is False else ""
                out.append(f"| {n} | {_md_text(s.get('tool'))} | {_md_text(s.get('target') or '')} | "
                           f"`{s.get('risk')}`{reason} | {_md_text(format_args(arguments_of(s), 48))} |")
            out.append("")
            for s in p.get("steps") or []:
                diff = s.get("diff") or s.get("preview")
                if diff:
                    out += [_fence(str(diff), "diff" if _looks_like_diff(str(diff)) else ""), ""]
            for d in _plan_decisions(v, p.get("plan_id")):
                out.append(f"- {_md_text(_decision_line(d))}")
            out.append("")
    if effects_text(v):
        out += ["### Effects", ""] + [f"- {_md_text(line)}" for line in effects_text(v)] + [""]
    if v.get("answer"):
        out += ["### Answer", "", _md_answer(str(v["answer"]).strip()), ""]
    errors = [e for e in v.get("errors") or [] if e]
    if v.get("error") and v["error"] not in errors:
        errors.insert(0, v["error"])
    if errors:
        out += ["### Errors", ""] + [f"- {_md_text(e)}" for e in errors] + [""]
    nominal = bool(v.get("cost_nominal"))
    out.append(f"**Totals:** {totals_line(v.get('totals') or {}, nominal)}  ")
    if tree_line(v.get("tree")):
        out.append(f"**Run tree:** {tree_line(v.get('tree'), nominal)}  ")
    if nominal:
        out.append(f"*{NOMINAL_NOTE}*  ")
    if v.get("log_path"):
        out.append(f"**Log:** {_code(v['log_path'])}")
    return "\n".join(out).rstrip() + "\n"


# ------------------------------------------------------------------------------------------------------ display

def bundle(view: dict[str, Any]) -> dict[str, object]:
    """The MIME bundle of a run's static record."""
    return {"text/plain": render_text(view), "text/html": render_html(view), MIME: view}


class RunRecord:
    """A displayable static record: `display(RunRecord(view))`, `handle.update(RunRecord(view))`."""

    def __init__(self, view: dict[str, Any]) -> None:
        self.view = view

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, object]:
        data = bundle(self.view)
        if include:
            data = {k: v for k, v in data.items() if k in include}
        if exclude:
            data = {k: v for k, v in data.items() if k not in exclude}
        return data

    def __repr__(self) -> str:
        return render_text(self.view)
