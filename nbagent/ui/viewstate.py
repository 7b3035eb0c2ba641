"""The view of a run: one JSON-able dict built from its events, shared by every way a run is shown.

The live widget, the static record left in the saved notebook (`text/html`, `text/plain`, and
`application/vnd.nbagent.run+json` for the lab extension), `%agent export`, and the CLI all render this
dict, so they cannot disagree. It is derived from events only (plain Python: no IPython, no widgets).

Shape (version 1):

    {"version": 1, "run_id", "session_id", "status", "model", "autonomy", "prompt", "cell_id", "cell_label",
     "log_path", "previous_run_id", "parent_run_id", "superseded_by", "started_at", "ended_at", "revision",
     "cost_nominal",
     "steps": [{"id", "kind": "model"|"tool"|"denied"|"thinking"|"question"|"child"|"error"|"info",
                "title", "detail", "status": "running"|"ok"|"failed"|"interrupted"|"denied"|"waiting"|"info",
                "outcome", "traceback",
                "call_id", "tool", "arguments", "risk", "risk_reason", "target", "preview", "result_preview",
                "arg_keys", "error_type", "rule", "grant_id", "tokens", "cost", "cost_nominal", "latency_ms",
                "duration_ms", "retries", "ts", "depth"}],
     "plans": [{"plan_id", "purpose", "steps": [PlanStep], "max_risk", "auto_executing", "status", "grant_offer"}],
     "pending": null | {"kind": "approval"|"human_input", "request_id", "plan_id", "question"},
     "decisions": [{"kind", "by", "text", "ts", "plan_id", "request_id",
                    "grants": [{"grant_id", "scope", "effect", "covers"}]}],
     "answer": str | null, "error": str | null, "errors": [str],
     "effects": {"created": [path], "changed": [path], "deleted": [path],
                 "refused": [{"tool", "target", "by", "why", "kind"}], "other": [{"tool", "target"}]},
     "undone_by": str | null, "undo_history": [{"run_id", "ended_at", "undone_by"}],
     "undoes": null | {"run_id", "to", "runs"},
     "totals": {"tool_calls", "steps", "model_calls", "tokens", "prompt_tokens", "completion_tokens", "cost",
                "wall_ms", "failed", "denied", "interrupted"},
     "words": {"totals", "tree", "timeline", "outcome", "pending", "pending_hint", "undo_hint", "plans": {plan_id}}}

`steps` is the timeline (every entry: model calls, tool calls, denials, questions...); `totals.tool_calls` counts
the run's tool calls (`totals.steps` is the same number, kept for views written before the name). Label them
"Timeline · N entries" and "N tool calls" so the two never read as one thing counted twice.
`arg_keys` (tool and plan steps) is the order in which the model wrote a call's arguments, from its raw reply: the
log's JSON (and a saved notebook's) has its keys sorted, so views order `arguments` by it.
`cell_label` is the cell id as short as it can be while no other cell of the same log shares it.
A `run_cell`/`replace_cell` step (of the timeline and of a plan) carries `cell`, the agent's cell as the notebook
shows it (its execution count and first line, or the new cell's place): ui/cell_names.py.
`cost_nominal` is true for the offline models (`nbagent/scripted`, `nbagent/function`, `nbagent/replay`): their
prices are made up so that cost tracking runs end to end; no money was spent.
`effects` is what the run and its sub-agents did to the folder, from the file tools' recorded results, and every call
that was refused (ui/effects_summary.py): records show it beside the answer, which may claim otherwise.
`undone_by` names the undo run whose restores of this run still stand (then no Undo is offered); `undo_history` every
completed undo of it, each with the undo that undid it, if any; `undoes`, on an undo run, what it undid.
`words` is what the run's record says of it, worded by `record_words` (the one source): the totals and run-tree
lines, the timeline's label, the outcome warning, the pending question and the `%agent` line that answers it, the
undo hint, each plan's summary. The live view and the lab extension show these strings as they are.
`log_path` is relative to the notebook (the log's folder name: it sits beside the notebook), so a shared notebook
carries no home-folder path.
A tool step's `outcome` is what it did, as a sentence ("wrote log.md, 16 bytes, +1 line", "raised KeyError: 'Revenue'",
"interrupted after 4.6 s"; ui/step_words.py), from its recorded result: a cell whose result reports that its code
raised is `failed`, one stopped is `interrupted` (with the end of its `traceback`), never `ok`.
A tool call refused because of a fact about the folder (a missing file...) is a failed tool call, not a denial:
logs written before the runtime recorded it so (as `authorization_denied` with a `scope.missing`... rule) are
shown the new way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import PurePath
from typing import Any

from nbagent.events.model import EventBase
from nbagent.events.state import RunState
from nbagent.ui.cell_names import Known, name_cells
from nbagent.ui.effects_summary import effects as effects_of
from nbagent.ui.record_words import compaction_line, summary_call_line, summary_label
from nbagent.ui.step_words import said_step
from nbagent.ui.timeline import clip

VERSION = 1
MIME = "application/vnd.nbagent.run+json"

# Rules of the scope check that state a fact about the folder, not a policy. The runtime records these as failed tool
# calls (its FILE_FACTS); older logs hold them as denials, which the view turns into errors the same way.
FILE_FACT_RULES = frozenset({"scope.missing", "scope.exists", "scope.not_a_file", "scope.not_a_folder",
                             "scope.changed", "scope.unreadable", "scope.symlink_loop"})
# Offline models are named `nbagent/<name>` (the `nbagent` litellm provider); their prices are nominal.
OFFLINE_MODEL_PREFIX = "nbagent/"
UUID_CELL = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")
SHORT_CELL = 16  # a cell id this long or shorter is shown whole
MIN_UUID_PREFIX = 8


def is_nominal(model: str | None) -> bool:
    """Whether a model's prices are nominal (an offline model: no money spent)."""
    return bool(model) and str(model).startswith(OFFLINE_MODEL_PREFIX)


def cell_labels(cell_ids: Iterable[str | None]) -> dict[str, str]:
    """The shortest form of each cell id that no other id of the set shares: whole when short, a prefix of at
    least 8 characters for a UUID (as Jupyter's), at least SHORT_CELL for other long ids."""
    ids = sorted({c for c in cell_ids if c})
    out: dict[str, str] = {}
    for c in ids:
        if len(c) <= SHORT_CELL:
            out[c] = c
            continue
        n = MIN_UUID_PREFIX if UUID_CELL.fullmatch(c) else SHORT_CELL
        while n < len(c) and any(o != c and o.startswith(c[:n]) for o in ids):
            n += 1
        out[c] = c[:n]
    return out


def is_file_fact(rule: str | None) -> bool:
    return rule in FILE_FACT_RULES


def _ms_between(a: str | None, b: str | None) -> float | None:
    if not a or not b:
        return None
    return round((datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds() * 1000, 1)


def sent_line(p: Any) -> str:
    """" · sent 12,345 tokens (≈ $0.0019 before the call) · 8,192 read from the provider's cache", or "": what a
    model call's request was counted at before it was made (fitting.py), and what the provider took from its cache."""
    out = ""
    counted = p.request.get("input_tokens") if isinstance(p.request, dict) else None
    if isinstance(counted, dict) and counted.get("input_tokens"):
        n = int(counted["input_tokens"])
        out += f" · sent {n:,} tokens" if counted.get("exact") else f" · sent about {n:,} tokens"
        if isinstance(counted.get("cost"), int | float):
            out += f" (≈ ${counted['cost']:.4f} before the call)"
        if "window" in counted and counted["window"] is None:
            out += " · the model's input limit is unknown to litellm: set context_window to keep requests within it"
    cached = getattr(p.usage, "cached_tokens", 0)
    if cached:
        out += f" · {cached:,} read from the provider's cache"
    if getattr(p.usage, "counted", None):  # usage.floored: the provider reported less than nbagent counted, or none
        out += " · usage by nbagent's count (the provider reported less, or none)"
    return out


def _step(e: EventBase, depth: int) -> dict[str, Any] | None:
    p: Any = e.payload
    base: dict[str, Any] = {"id": e.id, "ts": e.ts, "depth": depth}
    if e.type == "llm_called":
        message = ((p.response.get("choices") or [{}])[0].get("message") or {})
        calls = message.get("tool_calls") or []
        what = (f"{len(calls)} tool call{'s' if len(calls) != 1 else ''}") if calls else "answer"
        what += sent_line(p)
        return {**base, "kind": "model", "title": f"{p.model}", "detail": what, "status": "ok",
                "tokens": p.usage.total_tokens or p.usage.prompt_tokens + p.usage.completion_tokens,
                "prompt_tokens": p.usage.prompt_tokens, "completion_tokens": p.usage.completion_tokens,
                "cost": p.cost, "cost_nominal": is_nominal(p.model), "latency_ms": p.latency_ms,
                "retries": p.retry_count}
    if e.type == "thinking":
        return {**base, "kind": "thinking", "title": "thinking", "detail": p.text, "status": "info"}
    if e.type == "tool_call_started":
        if p.tool == "ask_human":
            return None  # its question is a step of its own
        return {**base, "kind": "tool", "title": p.tool, "tool": p.tool, "call_id": p.call_id,
                "arguments": p.arguments, "risk": str(p.risk), "target": p.target, "status": "running",
                "detail": p.reason, "risk_reason": getattr(p, "risk_reason", None),
                "grant_id": getattr(p, "grant_id", None)}
    if e.type == "authorization_denied":
        if is_file_fact(p.rule):  # an older log's "denial" of a missing file...: an error, as the runtime now says
            return {**base, "kind": "tool", "title": p.tool, "tool": p.tool, "call_id": p.call_id, "arguments": {},
                    "target": p.target, "status": "failed", "detail": p.reason, "error_type": p.rule}
        return {**base, "kind": "denied", "title": p.tool, "tool": p.tool, "call_id": p.call_id,
                "target": p.target, "status": "denied", "detail": p.reason, "rule": p.rule,
                "grant_id": getattr(p, "grant_id", None)}
    if e.type == "human_input_requested":
        return {**base, "kind": "question", "title": "question", "detail": p.question, "status": "waiting",
                "call_id": p.call_id, "request_id": p.request_id}
    if e.type == "child_run_started":
        return {**base, "kind": "child", "title": "sub-agent", "detail": p.prompt, "status": "info",
                "child_run_id": p.child_run_id}
    if e.type == "context_compacted":
        step = {**base, "kind": "info", "title": "context compacted", "detail": compaction_line(p), "status": "info"}
        if p.summary is not None:  # what the model works from in place of the runs it summarised: shown, whole
            step.update(summary=p.summary, summary_by=p.summary_by, summary_label=summary_label(p))
        return step
    if e.type == "error":
        return {**base, "kind": "error", "title": p.error_type or "error", "detail": p.message, "status": "failed",
                "retries": p.retry_count}
    if e.type in ("interrupted", "run_resumed", "run_superseded", "plan_rejected", "plan_refined",
                  "plan_approved"):
        detail = {"interrupted": "interrupted: resume with %agent resume, or answer with %agent approve/deny",
                  "run_resumed": "resumed", "run_superseded": "superseded: an earlier cell was re-run"}.get(e.type)
        if detail is None:
            text = getattr(p, "reason", "") or getattr(p, "feedback", "")
            verb = {"plan_approved": "approved", "plan_rejected": "denied", "plan_refined": "refined"}[e.type]
            detail = f"plan {verb} by {p.by}" + (f": {text}" if text else "")
            if getattr(p, "grant_error", None):
                detail += f" · {p.grant_error}"
        return {**base, "kind": "info", "title": e.type.replace("_", " "), "detail": detail, "status": "info"}
    return None


def _summary_call(e: EventBase, depth: int, model: str | None) -> dict[str, Any]:
    """The summary request of a compaction, as the model call it was (recorded in the `context_compacted` event)."""
    p: Any = e.payload
    return {"id": f"{e.id}-summary", "ts": e.ts, "depth": depth, "kind": "model", "title": f"{model}",
            "detail": summary_call_line(p), "status": "failed" if p.summary_error else "ok",
            "tokens": p.usage.total_tokens or p.usage.prompt_tokens + p.usage.completion_tokens,
            "prompt_tokens": p.usage.prompt_tokens, "completion_tokens": p.usage.completion_tokens,
            "cost": p.cost, "cost_nominal": is_nominal(model), "latency_ms": None, "retries": 0}


def run_view(store: Any, run_id: str, known: Known | None = None) -> dict[str, Any]:
    """`view_state` of a run in a store, with the totals of its sub-agents when it has any; `known`: the cells the
    kernel ran (cell_names.Known), to name a cell an earlier run wrote."""
    state = store.run_state(run_id)
    tree = None
    if state.children:
        from nbagent.gate.policy import TreeUsage
        from nbagent.runtime.recording import run_tree

        tree = TreeUsage.of(store.run_state(r) for r in run_tree(store, run_id)).model_dump(mode="json")
    # the runs table's rows, not list_runs(): that folds every run (200 ms at 300 runs), and live views call this
    # on every update
    cells = {row.get("cell_id") for row in store.runs.all() if isinstance(row.get("cell_id"), str)}
    labels = cell_labels(cells | {state.cell_id})
    events = store.run_events(run_id)
    fx = None
    if state.children:  # what its sub-agents did is the run's doing too (undo reverses them with it)
        from nbagent.runtime.recording import run_tree

        tree_events = [e for rid in run_tree(store, run_id) for e in store.run_events(rid)]
        fx = effects_of(sorted(tree_events, key=lambda e: e.ts))
    from nbagent.undo.files import undo_history

    return view_state(state, events, log_path=store.path.name, tree=tree, cell_label=labels.get(state.cell_id or ""),
                      effects=fx, undo_history=undo_history(store, state.run_id or run_id), known=known)


def _asked(p: Any) -> dict[str, dict[str, Any]]:
    """The arguments the model gave each tool call of a reply, by nbagent's call id (for a call that failed before
    it started, whose own events carry none)."""
    message = ((p.response.get("choices") or [{}])[0].get("message") or {})
    out: dict[str, dict[str, Any]] = {}
    for call_id, call in zip(p.call_ids or [], message.get("tool_calls") or [], strict=False):
        raw = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            continue
        if isinstance(args, dict):
            out[call_id] = args
    return out


def view_state(state: RunState, events: list[EventBase], *, log_path: str = "",
               tree: dict[str, Any] | None = None, cell_label: str | None = None,
               effects: dict[str, Any] | None = None, undo_history: list[dict[str, Any]] | None = None,
               known: Known | None = None) -> dict[str, Any]:
    """Everything a view shows about a run, from its events; `tree`: what it and its sub-agents spent
    (`policy.TreeUsage`), which is what budgets are checked against; `cell_label`: the cell id as `run_view`
    shortens it among the log's cells (default: the whole id); `effects`: of the run tree (default: of `events`);
    `undo_history`: the undos of this run (`nbagent.undo.files.undo_history`, which reads other runs); `known`: the
    kernel's cells, naming a cell an earlier run wrote (cell_names)."""
    steps: list[dict[str, Any]] = []
    by_call: dict[str, dict[str, Any]] = {}
    depth: dict[str, int] = {}
    asked: dict[str, dict[str, Any]] = {}
    facts: set[str] = set()  # an older log's fact "denials", as the errors list words them
    plan_steps: dict[str, Any] = {}  # call id -> its plan step (the diff a file change was shown with)
    for e in events:
        if e.type == "plan_proposed":
            plan_steps.update((s.call_id, s) for s in e.payload.steps)  # type: ignore[attr-defined]
        d = depth.get(e.parent_event_id or "", -1) + 1 if e.parent_event_id else 0
        depth[e.id] = d
        p: Any = e.payload
        if e.type == "llm_called":
            asked.update(_asked(p))
        if e.type == "authorization_denied" and is_file_fact(p.rule):
            facts.add(f"{p.tool}: denied: {p.reason}")
        if e.type in ("tool_call_completed", "tool_call_failed"):
            step = by_call.get(p.call_id)
            if step is None:  # refused before it started (a malformed call, a missing file): a step of its own
                step = {"id": e.id, "ts": e.ts, "depth": d, "kind": "tool", "title": p.tool, "tool": p.tool,
                        "call_id": p.call_id, "arguments": asked.get(p.call_id, {}), "detail": "",
                        "arg_keys": list(asked.get(p.call_id, {}))}
                steps.append(step)
                by_call[p.call_id] = step
            # a call that never started took no time: no "0.00 ms" for it
            step["duration_ms"] = p.duration_ms if step.get("status") == "running" or p.duration_ms else None
            step["retries"] = p.retry_count
            if e.type == "tool_call_completed":
                step["status"] = "ok"
                step["result_preview"] = p.preview or clip(p.result, 300)
                said_step(step, p.result, plan_steps)  # its status from the result (a cell that raised), its sentence
            else:
                step["status"] = "failed"
                step["detail"] = p.error
                if getattr(p, "error_type", None):
                    step["error_type"] = p.error_type
            continue
        if e.type == "human_input_received":
            for s in reversed(steps):
                if s.get("request_id") == p.request_id:
                    s["status"], s["answer"] = "ok", p.answer
            step = by_call.get(p.call_id or "")
            if step is not None:
                step["status"], step["result_preview"] = "ok", clip(p.answer, 300)
            continue
        if e.type == "context_compacted" and p.summary_requested:  # its summary request: a model call, shown so
            steps.append(_summary_call(e, d, p.summary_model or state.model))
        step = _step(e, d)
        if step is None:
            continue
        if step.get("kind") == "tool" and step.get("call_id") in asked:
            if not step.get("arguments"):
                step["arguments"] = asked[step["call_id"]]
            step["arg_keys"] = list(asked[step["call_id"]])
        if step.get("call_id") and step["kind"] == "tool":
            by_call[step["call_id"]] = step
        steps.append(step)
    plans = [
        {"plan_id": plan.plan_id, "purpose": plan.purpose, "max_risk": str(plan.max_risk),
         "auto_executing": plan.auto_executing, "status": plan.status, "grant_offer": plan.grant_offer,
         "steps": [_with_order(s.model_dump(mode="json"), asked) for s in plan.steps]}
        for plan in state.plans.values()
    ]
    pending = None
    if state.pending is not None:
        pending = {"kind": state.pending.kind, "request_id": state.pending.request_id,
                   "plan_id": state.pending.plan_id, "question": state.pending.question}
    errors = [_error_text(x, facts) for x in state.errors]
    history = list(undo_history or [])
    standing = [h for h in history if not h.get("undone_by")]
    undoes = state.options.get("undo") if isinstance(state.options.get("undo"), dict) else None
    tool_steps = [s for s in steps if s["kind"] in ("tool", "denied")]
    return with_words(name_cells({
        "version": VERSION,
        "run_id": state.run_id, "session_id": state.session_id, "status": state.status.value,
        "model": state.model, "autonomy": state.autonomy.value, "prompt": state.prompt, "cell_id": state.cell_id,
        "cell_label": cell_label or state.cell_id, "cost_nominal": is_nominal(state.model),
        "log_path": _relative(log_path), "previous_run_id": state.previous_run_id, "parent_run_id": state.parent_run_id,
        "superseded_by": state.superseded_by, "started_at": state.started_at, "ended_at": state.ended_at,
        # how far into the log this view goes: of two views of one run, the higher revision is the newer (the lab
        # extension uses it to bring every record of a run in the notebook up to date)
        # (an undo of it, and an undo of that undo, are news about it too, though written in other runs)
        "revision": len(events) + sum(1 + bool(h.get("undone_by")) for h in history),
        "steps": steps, "plans": plans, "pending": pending,
        "decisions": [d.model_dump(mode="json") for d in state.decisions],
        "answer": state.answer, "error": state.error, "errors": errors,
        "effects": effects if effects is not None else effects_of(events),
        "undone_by": standing[-1]["run_id"] if standing else None, "undo_history": history,
        "reproduces": state.options.get("reproduces"),  # the recorded run this one reproduced (ipython/reproduce.py)
        "decisions_asked": state.options.get("decisions_asked") is True,  # its recording was not yours (recorded_yes)
        "undoes": {k: undoes.get(k) for k in ("run_id", "to", "runs")} if undoes else None,
        "children": list(state.children),
        "totals": {
            "tool_calls": len(state.steps), "steps": len(state.steps),
            "failed": sum(1 for s in tool_steps if s.get("status") == "failed"),
            "denied": sum(1 for s in tool_steps if s.get("status") == "denied"),
            "interrupted": sum(1 for s in tool_steps if s.get("status") == "interrupted"),
            "model_calls": state.all_model_calls, "tokens": state.tokens,
            "prompt_tokens": state.usage.prompt_tokens, "completion_tokens": state.usage.completion_tokens,
            "cost": state.cost if state.cost_known else None,
            "wall_ms": _ms_between(state.started_at, state.ended_at or (events[-1].ts if events else None)),
        },
        "tree": tree,
    }, events, known))


def with_words(view: dict[str, Any]) -> dict[str, Any]:
    """`view` with `words` (re)set: the words and numbers the run shows (`record_words.words`), so the live view and
    the lab extension show the record's own words. Call it again after changing a view (returns the same dict)."""
    from nbagent.ui.record_summary import summary_words
    from nbagent.ui.record_words import words

    view["words"] = words(view, summary_words(view))
    return view


def _relative(log_path: str) -> str:
    """The log's path as views save it: an absolute one becomes its folder's name, which sits beside the notebook."""
    return PurePath(log_path).name if PurePath(log_path).is_absolute() else log_path


def _with_order(step: dict[str, Any], asked: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if step.get("call_id") in asked:
        step["arg_keys"] = list(asked[step["call_id"]])
    return step


def _error_text(error: str, facts: set[str]) -> str:
    """An errors-list line; an older log's fact "denial" loses the word "denied" (it was no policy's doing)."""
    return error.replace(": denied: ", ": ", 1) if error in facts else error
