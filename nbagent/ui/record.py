"""The static record of a run: what the saved notebook keeps when the live view is gone.

Renders the view-state dict (`nbagent.ui.viewstate`) as `text/html` (self-contained: one scoped `<style>`, no
script, no external assets; plain semantic HTML still reads well where styles are stripped, as on GitHub),
`text/plain`, and Markdown (`%agent export --format md`). `bundle(view)` is the MIME bundle a display handle
shows; `RunRecord(view)` is the same as a displayable object.

Every string that came from the model, a tool or a person is untrusted: it is escaped before it is placed in
HTML, and the answer's Markdown is rendered by markdown-it with raw HTML off, then sanitised by nh3 against a
short allow-list (links: http, https and mailto only). Plain Python: no IPython or widget import.

The renderings live in their own modules, each readable in one sitting: `record_format` (the formatters),
`record_words` (the sentences every rendering shares), `record_markdown` (the answer's Markdown as safe HTML; the
record as Markdown), `record_html` and `record_text`. This module is the entry point: `bundle`, `RunRecord`, and
every name those modules define, re-exported so `from nbagent.ui.record import ...` keeps working.
"""

from __future__ import annotations

from typing import Any

from nbagent.ui.record_format import (
    LONG_TEXT_CHARS,
    LONG_TEXT_LINES,
    NOMINAL_NOTE,
    arguments_of,
    fmt_cost,
    fmt_ms,
    fmt_tokens,
    fmt_ts,
    format_args,
    plural,
    short_id,
)
from nbagent.ui.record_html import CSS, PLAN_TONE, STATUS_TONE, STEP_TONE, diff_html, render_html, risk_badge
from nbagent.ui.record_markdown import LINK_REL, LINK_SCHEMES, link_allowed, markdown_html, render_markdown
from nbagent.ui.record_text import render_text
from nbagent.ui.record_words import (
    DECISION_VERB,
    DIFF_OPEN_LINES,
    FILE_CHANGE_TOOLS,
    HEAD_STEPS,
    HIGH,
    MAX_STEPS_SHOWN,
    NOT_ASKED,
    PLAN_STATUS,
    RISK_LABEL,
    STATUS_ICON,
    STEP_ICON,
    TAIL_STEPS,
    Steps,
    answerable,
    cell_label,
    grant_reach,
    high_risk_effects,
    model_note,
    outcome_warning,
    pending_hint,
    pending_text,
    plan_summary,
    step_action,
    step_summary,
    timeline_label,
    tool_calls,
    totals_line,
    tree_line,
    undo_hint,
)
from nbagent.ui.viewstate import MIME

__all__ = [
    "CSS", "DECISION_VERB", "DIFF_OPEN_LINES", "FILE_CHANGE_TOOLS", "HEAD_STEPS", "HIGH", "LINK_REL",
    "LINK_SCHEMES", "LONG_TEXT_CHARS", "LONG_TEXT_LINES", "MAX_STEPS_SHOWN", "MIME", "NOMINAL_NOTE", "NOT_ASKED",
    "PLAN_STATUS", "PLAN_TONE", "RISK_LABEL", "STATUS_ICON", "STATUS_TONE", "STEP_ICON", "STEP_TONE", "TAIL_STEPS",
    "RunRecord", "Steps", "answerable", "arguments_of", "bundle", "cell_label", "diff_html", "fmt_cost", "fmt_ms",
    "fmt_tokens", "fmt_ts", "format_args", "grant_reach", "high_risk_effects", "link_allowed", "markdown_html",
    "model_note", "outcome_warning", "pending_hint", "pending_text", "plan_summary", "plural", "render_html",
    "render_markdown", "render_text", "risk_badge", "short_id", "step_action", "step_summary", "timeline_label",
    "tool_calls", "totals_line", "tree_line", "undo_hint",
]


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
