"""Markdown in the record: the model's Markdown made safe HTML, and the record written as Markdown.

`markdown_html` renders the answer's untrusted Markdown for the HTML record: markdown-it (CommonMark, raw HTML off)
then nh3 (the Ammonia sanitiser) with a short allow-list, so a gap in either alone lets no markup through.
`render_markdown` is `%agent export --format md`: the record as Markdown, untrusted prose escaped, the answer kept as
Markdown with raw HTML outside code neutralised. Split out of `record.py`: both are about Markdown's one hazard,
untrusted text that turns into markup.
"""

from __future__ import annotations

import html
import re
from typing import Any

from nbagent.ui.effects_summary import effects_text, undo_note
from nbagent.ui.record_format import (
    NOMINAL_NOTE,
    arguments_of,
    fmt_ms,
    fmt_ts,
    format_args,
    indented,
    looks_like_diff,
    upper_first,
)
from nbagent.ui.record_words import (
    NOT_ASKED,
    PLAN_STATUS,
    STATUS_ICON,
    STEP_ICON,
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
    timeline_label,
    totals_line,
    tree_line,
    why_shown,
)

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
    # links are judged below, so a refused one keeps its text, not its syntax (markdown-it-py: set on the instance)
    md.validateLink = lambda url: True  # type: ignore[method-assign]

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
    if reproduced_line(v):
        out += [f"> **↻** {_md_text(upper_first(reproduced_line(v)))}", ""]
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
            if kind == "tool" and s.get("outcome"):  # "1. ✗ raised KeyError: 'Revenue' · **run_cell** `code=…`"
                out.append(f"{n}. {STEP_ICON.get(str(s.get('status')), '·')} {_md_text(s['outcome'])} · "
                           f"**{_md_text(s.get('tool') or s.get('title'))}** {_code(format_args(arguments_of(s)))}"
                           + (f" — `{s['risk']}`" if s.get("risk") else "")
                           + (f", {fmt_ms(s['duration_ms'])}" if s.get("duration_ms") is not None
                              and s.get("status") != "interrupted" else ""))
                if why_shown(s):
                    out.append(f"   - error: {_md_text(why_shown(s))}")
            elif kind == "tool":
                line = (f"{n}. **{_md_text(s.get('tool') or s.get('title'))}** {_code(format_args(arguments_of(s)))}"
                        + (f" — `{s['risk']}`" if s.get("risk") else "") + f" — {s.get('status')}"
                        + (f", {fmt_ms(s['duration_ms'])}" if s.get("duration_ms") is not None else "")
                        + (f", {s['retries']} retries" if s.get("retries") else ""))
                out.append(line)
                if s.get("status") == "failed" and s.get("detail"):
                    out.append(f"   - error: {_md_text(s['detail'])}")
                if s.get("result_preview"):
                    out += ["", indented(_fence(str(s["result_preview"])), " " * len(f"{n}. ")), ""]
            else:
                out.append(f"{n}. {_md_text(step_summary(s))}")
            if s.get("summary"):
                out += ["", indented(f"{_md_text(upper_first(str(s.get('summary_label'))))}:\n\n"
                                    f"{_fence(str(s['summary']))}", " " * len(f"{n}. ")), ""]
        out.append("")
    plans = v.get("plans") or []
    if plans:
        out += [f"### Plans ({len(plans)})", ""]
        for i, p in enumerate(plans, 1):
            out += [f"#### Plan {i}: {_md_text(upper_first(plan_summary(p)))} — "
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
                    out += [_fence(str(diff), "diff" if looks_like_diff(str(diff)) else ""), ""]
            for d in plan_decisions(v, p.get("plan_id")):
                out.append(f"- {_md_text(decision_line(d))}")
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
