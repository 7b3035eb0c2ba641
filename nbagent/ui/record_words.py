"""The record's words: the sentences a run's record is written in, shared by every rendering.

The HTML, text and Markdown renderings (`record_html`, `record_text`, `record_markdown`) say the same thing in the
same words: a status, a step's summary, a pending question, a count is worded here once, from the formatters of
`record_format`. Plain Python: no markup, no IPython or widget import.
"""

from __future__ import annotations

import re
from typing import Any

from nbagent.ui.cell_names import cell_short
from nbagent.ui.effects_summary import undo_note
from nbagent.ui.record_format import (
    arguments_of,
    clip,
    fmt_cost,
    fmt_ms,
    fmt_tokens,
    fmt_ts,
    format_args,
    plural,
    short_id,
)

HEAD_STEPS = 8  # a run with more than MAX_STEPS_SHOWN steps shows the first HEAD_STEPS and the last TAIL_STEPS
TAIL_STEPS = 8
MAX_STEPS_SHOWN = 20
DIFF_OPEN_LINES = 30  # a longer diff is collapsed

STATUS_ICON = {"completed": "✓", "completed_with_errors": "⚠", "failed": "✗", "running": "●", "waiting": "‖",
               "interrupted": "■", "superseded": "↷"}
STEP_ICON = {"ok": "✓", "failed": "✗", "denied": "⊘", "running": "…", "waiting": "‖", "info": "·",
             "interrupted": "■"}
RISK_LABEL = {"READ_ONLY": "READ_ONLY", "WRITE_LOW_RISK": "WRITE_LOW_RISK", "WRITE_HIGH_RISK": "WRITE_HIGH_RISK"}
DECISION_VERB = {"approved": "approved", "rejected": "denied", "refined": "refined", "answered": "answered"}
DECISION_LABEL = {"rejected": "reason", "refined": "feedback", "answered": "answer"}  # what a decision's text is
PLAN_STATUS = {"proposed": "proposed", "auto": "ran without asking", "approved": "approved", "rejected": "denied",
               "refined": "sent back to the model"}


# ---------------------------------------------------------------------------------------------- small formatters


def reproduced_line(view: dict[str, Any]) -> str:
    """A reproduced run's first line: the recorded run it reproduced (`options.reproduces`), and that no model was
    called (ipython/reproduce.py)."""
    source = (view or {}).get("reproduces")
    if not source:
        return ""
    if (view or {}).get("decisions_asked"):  # a log that was not this user's: its yes answered nothing (recorded_yes)
        return (f"reproduced run {short_id(source)} from the log: no model call; its decisions were not yours, so "
                "each card is yours to decide")
    return f"reproduced run {short_id(source)} from the log: no model call, the recorded decisions"


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


def next_call_line(estimate: dict[str, Any]) -> str:
    """"sending 12,345 tokens (≈ $0.0019)…": the model call about to be made, before it is (the live view)."""
    n = int(estimate.get("input_tokens") or 0)
    tokens = f"{n:,} tokens" if estimate.get("exact") else f"about {n:,} tokens"
    cost = estimate.get("cost")
    return f"sending {tokens}" + (f" (≈ ${cost:.4f})" if isinstance(cost, int | float) else "") + "…"


def compaction_line(p: Any) -> str:
    """What a `context_compacted` event did, in a line (the record's timeline): the numbers first, as a line may be
    clipped."""
    window = f"{p.window:,}" if p.window else "unknown"
    line = (f"context compacted, {p.tokens_before:,} → {p.tokens_after:,} tokens (window {window})" +
            (", after the provider refused the request for its length" if p.reason == "refused" else ""))
    done = []
    if p.results:
        done.append(plural(len(p.results), "tool result", "tool results") +
                    (" sent as a reference" if len(p.results) == 1 else " sent as references"))
    if p.summary is not None:
        by = "by the model" if p.summary_by == "model" else \
            "as an extract (the summary request failed)" if p.summary_error else "as an extract"
        done.append(plural(len(p.summarized_runs), "earlier request", "earlier requests") + f" summarised {by}")
    again = " (read_result reads it again)" if len(p.results) == 1 else " (read_result reads them again)"
    return line + (": " + "; ".join(done) if done else "") + (again if p.results else "")


def summary_label(p: Any) -> str:
    """What a compaction's summary is, said above it (the record shows the summary itself behind this line)."""
    by = "by the model" if p.summary_by == "model" else \
        "as an extract (the summary request failed)" if p.summary_error else "as an extract"
    runs = plural(len(p.summarized_runs), "earlier request", "earlier requests")
    return f"the summary the model works from in place of {runs}, {by}"


def summary_call_line(p: Any) -> str:
    """A compaction's summary request, as its model call's line says it (the timeline entry before the compaction)."""
    asked = f"summary of {plural(len(p.summarized_runs), 'earlier request', 'earlier requests')}"
    if p.summary_error:
        return f"{asked}: failed ({clip(p.summary_error, 160)}), an extract stands in"
    return f"{asked}, for the compaction below"


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
    stopped = int(t.get("interrupted") or 0)  # cells stopped by an interrupt or their time limit
    what = [x for x in (plural(failed, "tool call failed", "tool calls failed") if failed else "",
                        plural(stopped, "cell was interrupted", "cells were interrupted") if stopped else "",
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
    """For a run that ended having changed files (completed create/write/delete calls) or written cells (run_cell,
    replace_cell, as its Effects list them): how to undo it."""
    if str(view.get("status") or "running") in ("running", "waiting") or not view.get("run_id") or \
            view.get("undone_by"):  # undone already: its changes are not in the folder to undo
        return ""
    paths = {str(s.get("target") or (s.get("arguments") or {}).get("path") or s.get("call_id"))
             for s in view.get("steps") or []
             if s.get("kind") == "tool" and s.get("tool") in FILE_CHANGE_TOOLS and s.get("status") == "ok"}
    cells = [c for c in (view.get("effects") or {}).get("cells") or []
             if isinstance(c, dict) and c.get("verb") in ("added", "replaced")]
    if cells:  # as the kernel's Undo… offer words it (ipython/undo_offers.py)
        what = [plural(len(paths), "file", "files")] if paths else []
        return f"%agent undo {view['run_id']} undoes this run's changes " \
               f"({', '.join([*what, plural(len(cells), 'cell', 'cells')])})"
    if not paths:
        return ""
    return f"%agent undo {view['run_id']} undoes this run's {plural(len(paths), 'file change', 'file changes')}"


def pending_text(view: dict[str, Any]) -> str:
    pending = view.get("pending") or {}
    if pending.get("kind") == "approval":
        plan = next((p for p in view.get("plans") or [] if p.get("plan_id") == pending.get("plan_id")), None)
        what = f"plan {short_id(pending.get('plan_id'))}"
        if plan:
            what += f" ({clip(plan_summary(plan), 80)})"
        return f"waiting for approval of {what}"
    if pending.get("kind") == "human_input":
        return f"waiting for an answer to: {clip(pending.get('question') or '', 200)}"
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


def creates(step: dict[str, Any]) -> bool:
    """A write_file step whose file did not exist when it was planned: a create (files.py), said as one."""
    targets = ((step.get("effect") or {}).get("targets") or []) if isinstance(step.get("effect"), dict) else []
    return bool(targets) and all(isinstance(t, dict) and t.get("op") == "create" for t in targets)


def step_action(step: dict[str, Any]) -> str:
    """What a plan step does, in nbagent's words (as labextension/src/run_view/plans.js stepAction): "delete data.txt",
    "run code"."""
    verb = _FILE_VERB.get(str(step.get("tool")))
    if verb == "overwrite" and creates(step):
        verb = "create"
    if verb:
        return f"{verb} {clip(_step_target(step) or 'a file', 60)}"
    cell = _CELL_ACTION.get(str(step.get("tool")))
    if cell:
        return cell.format(cell_short(step) or clip(_step_target(step) or "a cell", 40))  # "[3]", as the page shows it
    return "run code" if step.get("tool") == "run_python" else f"run {step.get('tool') or 'a tool'}"


# the agent's notebook cells (run_cell, replace_cell, insert_code_cell): what a step does, and what a high-risk one
# does said on the card ({} is the cell the call names)
_CELL_ACTION = {"run_cell": "run a cell", "replace_cell": "replace cell {} and run it",
                "insert_code_cell": "insert a cell"}
_CELL_EFFECT = {"run_cell": "runs a new cell in the kernel, with everything the notebook can reach",
                "replace_cell": "replaces the code of cell {} (diff below) and runs it in the kernel, with everything "
                                "the notebook can reach",
                "insert_code_cell": "inserts a cell of code that Run All (and `nbagent run`, once approved) runs"}
_CELL_DONE = {"run_cell": "ran a cell", "replace_cell": "replaced cell {} (diff)",
              "insert_code_cell": "inserted a cell"}


def plan_summary(plan: dict[str, Any]) -> str:
    """A plan phrased from its steps, never from the model's purpose. The live view shows it from `view["words"]`;
    labextension/src/run_view/plans.js words it the same way for views saved before views carried words."""
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
        t = clip(_step_target(s) or "a file", 80)
        effect = {"delete_file": f"deletes {t}", "write_file": f"creates {t}" if creates(s) else
                  f"replaces the contents of {t}", "create_file": f"creates {t}"}.get(str(s.get("tool")))
        if effect is None and str(s.get("tool")) in _CELL_EFFECT:
            effect = _CELL_EFFECT[str(s.get("tool"))].format(cell_short(s) or clip(_step_target(s) or "a cell", 40))
        if effect is None and (s.get("effect") or {}).get("unknown"):
            # an MCP tool whose writes nbagent cannot see (mcp/rules.py): said as such, never as a known effect
            on = f" on {clip(str(s['target']), 60)}" if s.get("target") else ""
            effect = f"runs {s.get('tool') or 'a tool'}{on}, whose effect is unknown"
        if effect is None:
            effect = ("runs Python code in the kernel, with everything the notebook can reach"
                      if s.get("tool") == "run_python" else
                      f"runs {s.get('tool') or 'a tool'}" + (f" on {clip(str(s['target']), 60)}" if s.get("target")
                                                              else "") + ", a tool marked high risk")
        out.append(f"{effect}: {s['risk_reason']}" if s.get("risk_reason") else effect)
    if not out and plan.get("max_risk") == HIGH:
        out.append("includes a step marked high risk")
    return out


def step_summary(step: dict[str, Any]) -> str:
    """One line for a step, plain text."""
    kind = step.get("kind")
    if kind == "model":
        bits = [f"{fmt_tokens(step.get('tokens'))} tokens", fmt_cost(step.get("cost"), bool(step.get("cost_nominal"))),
                fmt_ms(step.get("latency_ms"))]
        if step.get("retries"):
            bits.append(f"{step['retries']} retr{'y' if step['retries'] == 1 else 'ies'}")
        return f"model {step.get('title', '')}: {step.get('detail', '')} · " + " · ".join(b for b in bits if b)
    if kind == "tool" and step.get("outcome"):
        return said_line(step)
    if kind == "tool":
        line = f"{step.get('tool') or step.get('title')}({format_args(arguments_of(step), 40)})"
        done = _CELL_DONE.get(str(step.get("tool")))
        if done and step.get("status") == "ok":
            line = done.format(clip(_step_target(step) or "a cell", 40)) + ": " + line
        if step.get("risk"):
            line += f" [{step['risk']}]"
        line += f" {step.get('status', '')}"
        if step.get("duration_ms") is not None:
            line += f" {fmt_ms(step['duration_ms'])}"
        if step.get("retries"):
            line += f" ({step['retries']} retr{'y' if step['retries'] == 1 else 'ies'})"
        if step.get("status") == "failed" and step.get("detail"):
            line += f": {clip(step['detail'], 120)}"
        elif step.get("grant_id"):
            line += f" · {clip(step.get('detail') or '', 160)}"
        if step.get("status") != "failed" and step.get("result_preview"):
            line += f" → {clip(step['result_preview'], 100)}"
        return line
    if kind == "denied":
        target = f" {step['target']}" if step.get("target") else ""
        return f"denied {step.get('tool') or step.get('title')}{target}: {clip(step.get('detail') or '', 140)}"
    if kind == "thinking":
        return f"thinking: {clip(step.get('detail') or '', 140)}"
    if kind == "question":
        line = f"question: {clip(step.get('detail') or '', 120)}"
        if step.get("answer") is not None:
            line += f" → answer: {clip(step['answer'], 80)}"
        return line
    if kind == "child":
        return f"sub-agent {short_id(step.get('child_run_id'))}: {clip(step.get('detail') or '', 120)}"
    if kind == "error":
        return f"error {step.get('title', '')}: {clip(step.get('detail') or '', 160)}"
    return clip(step.get("detail") or step.get("title") or "", 160)


def why_shown(step: dict[str, Any]) -> str:
    """A failed or interrupted step's error, when its outcome sentence does not already say it ("" if it does)."""
    detail = str(step.get("detail") or "")
    if step.get("status") not in ("failed", "interrupted") or not detail:
        return ""
    return "" if " ".join(detail.split()) in str(step.get("outcome") or "") else detail


def said_line(step: dict[str, Any]) -> str:
    """"✗ raised KeyError: 'Revenue' · run_cell(code=…) [WRITE_HIGH_RISK] 1.2 s": a tool step that has an outcome
    sentence (ui/step_words.py), plain text, its status as its icon."""
    status = str(step.get("status") or "")
    line = (f"{STEP_ICON.get(status, '·')} {step['outcome']} · "
            f"{step.get('tool') or step.get('title')}({format_args(arguments_of(step), 40)})")
    if step.get("risk"):
        line += f" [{step['risk']}]"
    if step.get("duration_ms") is not None and status != "interrupted":  # (an interrupted one's sentence says it)
        line += f" {fmt_ms(step['duration_ms'])}"
    if step.get("retries"):
        line += f" ({step['retries']} retr{'y' if step['retries'] == 1 else 'ies'})"
    if why_shown(step):
        line += f": {clip(why_shown(step), 120)}"
    elif step.get("grant_id"):
        line += f" · {clip(step.get('detail') or '', 160)}"
    return line


def plan_decisions(view: dict[str, Any], plan_id: Any) -> list[dict[str, Any]]:
    return [d for d in view.get("decisions") or [] if d.get("plan_id") == plan_id and plan_id]


def decision_line(d: dict[str, Any]) -> str:
    verb = DECISION_VERB.get(d.get("kind", ""), d.get("kind", ""))
    line = f"{verb} by {d.get('by') or 'unknown'}"
    if d.get("ts"):
        line += f" at {fmt_ts(d['ts'])}"
    if d.get("text"):
        label = DECISION_LABEL.get(d.get("kind", ""), "note")
        line += f" — {label}: {d['text']}"
    for g in d.get("grants") or []:
        line += f" · {grant_reach(g)}"
    if d.get("grant_error"):
        line += f" · {d['grant_error']}"
    return line


def grant_reach(g: dict[str, Any]) -> str:
    """"and for the rest of this run: write_file path=report.md ... (grant 01JX…)": a grant a decision gave."""
    reach = "the rest of this run" if g.get("scope") == "run" else "this session"
    return f"and for {reach}: {g.get('covers', '')} (grant {g.get('grant_id', '')})"


Steps = list[dict[str, Any]]


def step_window(steps: Steps) -> tuple[Steps, Steps, Steps]:
    """(head, hidden middle, tail) of a long timeline."""
    if len(steps) <= MAX_STEPS_SHOWN:
        return steps, [], []
    return steps[:HEAD_STEPS], steps[HEAD_STEPS:-TAIL_STEPS], steps[-TAIL_STEPS:]


NOT_ASKED = "not asked: a grant or the autonomy answers it, not this decision"


def words(view: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """The words and numbers a run shows, worded once, here: the record's renderings call the functions above, and
    the view state carries their result (`view["words"]`, set by `viewstate.with_words`) for the live view and the
    lab extension (labextension/src/run_view/), which show these strings as they are. labextension/test/words.test.ts
    holds the two to saying the same on the same runs. `summary` is the compact record's words
    (`record_summary.summary_words`), which are made from these functions, so they come in from above."""
    v = view or {}
    nominal = bool(v.get("cost_nominal"))
    return {
        "totals": totals_line(v.get("totals") or {}, nominal),
        "tree": tree_line(v.get("tree"), nominal),
        "timeline": timeline_label(v),
        "outcome": outcome_warning(v),
        "pending": pending_text(v) if v.get("pending") else "",
        "pending_hint": pending_hint(v) if v.get("pending") or v.get("status") in ("waiting", "interrupted") else "",
        "undo_hint": undo_hint(v),
        "undo_note": undo_note(v)[1],  # (effects_summary: what an undo of this run did, by files and cells)
        "plans": {str(p.get("plan_id")): plan_summary(p) for p in v.get("plans") or [] if p.get("plan_id")},
        **summary,
        # a reproduction's first line, worded here when it is not the one record.js words alike (reproducedLine)
        **({"reproduced": reproduced_line(v)} if v.get("decisions_asked") else {}),
    }

