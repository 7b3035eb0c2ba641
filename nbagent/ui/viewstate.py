"""The view of a run: one JSON-able dict built from its events, shared by every way a run is shown.

The live widget, the static record left in the saved notebook (`text/html`, `text/plain`, and
`application/vnd.nbagent.run+json` for the lab extension), `%agent export`, and the CLI all render this
dict, so they cannot disagree. It is derived from events only (plain Python: no IPython, no widgets).

Shape (version 1):

    {"version": 1, "run_id", "session_id", "status", "model", "autonomy", "prompt", "cell_id", "log_path",
     "previous_run_id", "parent_run_id", "superseded_by", "started_at", "ended_at", "revision",
     "steps": [{"id", "kind": "model"|"tool"|"denied"|"thinking"|"question"|"child"|"error"|"info",
                "title", "detail", "status": "running"|"ok"|"failed"|"denied"|"waiting"|"info",
                "call_id", "tool", "arguments", "risk", "risk_reason", "target", "preview", "result_preview",
                "tokens", "cost", "latency_ms", "duration_ms", "retries", "ts", "depth"}],
     "plans": [{"plan_id", "purpose", "steps": [PlanStep], "max_risk", "auto_executing", "status"}],
     "pending": null | {"kind": "approval"|"human_input", "request_id", "plan_id", "question"},
     "decisions": [{"kind", "by", "text", "ts", "plan_id", "request_id"}],
     "answer": str | null, "error": str | null, "errors": [str],
     "totals": {"steps", "model_calls", "tokens", "prompt_tokens", "completion_tokens", "cost", "wall_ms"}}
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..events import EventBase
from ..state import RunState
from ..timeline import clip

VERSION = 1
MIME = "application/vnd.nbagent.run+json"


def _ms_between(a: str | None, b: str | None) -> float | None:
    if not a or not b:
        return None
    return round((datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds() * 1000, 1)


def _step(e: EventBase, depth: int) -> dict[str, Any] | None:
    p: Any = e.payload
    base: dict[str, Any] = {"id": e.id, "ts": e.ts, "depth": depth}
    if e.type == "llm_called":
        message = ((p.response.get("choices") or [{}])[0].get("message") or {})
        calls = message.get("tool_calls") or []
        what = f"{len(calls)} tool call(s)" if calls else "answer"
        return {**base, "kind": "model", "title": f"{p.model}", "detail": what, "status": "ok",
                "tokens": p.usage.total_tokens or p.usage.prompt_tokens + p.usage.completion_tokens,
                "prompt_tokens": p.usage.prompt_tokens, "completion_tokens": p.usage.completion_tokens,
                "cost": p.cost, "latency_ms": p.latency_ms, "retries": p.retry_count}
    if e.type == "thinking":
        return {**base, "kind": "thinking", "title": "thinking", "detail": p.text, "status": "info"}
    if e.type == "tool_call_started":
        if p.tool == "ask_human":
            return None  # its question is a step of its own
        return {**base, "kind": "tool", "title": p.tool, "tool": p.tool, "call_id": p.call_id,
                "arguments": p.arguments, "risk": str(p.risk), "target": p.target, "status": "running",
                "detail": p.reason, "risk_reason": getattr(p, "risk_reason", None)}
    if e.type == "authorization_denied":
        return {**base, "kind": "denied", "title": p.tool, "tool": p.tool, "call_id": p.call_id,
                "target": p.target, "status": "denied", "detail": p.reason, "rule": p.rule}
    if e.type == "human_input_requested":
        return {**base, "kind": "question", "title": "question", "detail": p.question, "status": "waiting",
                "call_id": p.call_id, "request_id": p.request_id}
    if e.type == "child_run_started":
        return {**base, "kind": "child", "title": "sub-agent", "detail": p.prompt, "status": "info",
                "child_run_id": p.child_run_id}
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
        return {**base, "kind": "info", "title": e.type.replace("_", " "), "detail": detail, "status": "info"}
    return None


def run_view(store: Any, run_id: str) -> dict[str, Any]:
    """`view_state` of a run in a store, with the totals of its sub-agents when it has any."""
    state = store.run_state(run_id)
    tree = None
    if state.children:
        from ..policy import TreeUsage
        from ..replay import run_tree

        tree = TreeUsage.of(store.run_state(r) for r in run_tree(store, run_id)).model_dump(mode="json")
    return view_state(state, store.run_events(run_id), log_path=str(store.path), tree=tree)


def view_state(state: RunState, events: list[EventBase], *, log_path: str = "",
               tree: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything a view shows about a run, from its events; `tree`: what it and its sub-agents spent
    (`policy.TreeUsage`), which is what budgets are checked against."""
    steps: list[dict[str, Any]] = []
    by_call: dict[str, dict[str, Any]] = {}
    depth: dict[str, int] = {}
    for e in events:
        d = depth.get(e.parent_event_id or "", -1) + 1 if e.parent_event_id else 0
        depth[e.id] = d
        p: Any = e.payload
        if e.type in ("tool_call_completed", "tool_call_failed"):
            step = by_call.get(p.call_id)
            if step is None:  # failed before it started (a malformed call): a step of its own
                step = {"id": e.id, "ts": e.ts, "depth": d, "kind": "tool", "title": p.tool, "tool": p.tool,
                        "call_id": p.call_id, "arguments": {}, "detail": ""}
                steps.append(step)
                by_call[p.call_id] = step
            step["duration_ms"] = p.duration_ms
            step["retries"] = p.retry_count
            if e.type == "tool_call_completed":
                step["status"] = "ok"
                step["result_preview"] = p.preview or clip(p.result, 300)
            else:
                step["status"] = "failed"
                step["detail"] = p.error
            continue
        if e.type == "human_input_received":
            for s in reversed(steps):
                if s.get("request_id") == p.request_id:
                    s["status"], s["answer"] = "ok", p.answer
            step = by_call.get(p.call_id or "")
            if step is not None:
                step["status"], step["result_preview"] = "ok", clip(p.answer, 300)
            continue
        step = _step(e, d)
        if step is None:
            continue
        if step.get("call_id") and step["kind"] == "tool":
            by_call[step["call_id"]] = step
        steps.append(step)
    plans = [
        {"plan_id": plan.plan_id, "purpose": plan.purpose, "max_risk": str(plan.max_risk),
         "auto_executing": plan.auto_executing, "status": plan.status,
         "steps": [s.model_dump(mode="json") for s in plan.steps]}
        for plan in state.plans.values()
    ]
    pending = None
    if state.pending is not None:
        pending = {"kind": state.pending.kind, "request_id": state.pending.request_id,
                   "plan_id": state.pending.plan_id, "question": state.pending.question}
    return {
        "version": VERSION,
        "run_id": state.run_id, "session_id": state.session_id, "status": state.status.value,
        "model": state.model, "autonomy": state.autonomy.value, "prompt": state.prompt, "cell_id": state.cell_id,
        "log_path": log_path, "previous_run_id": state.previous_run_id, "parent_run_id": state.parent_run_id,
        "superseded_by": state.superseded_by, "started_at": state.started_at, "ended_at": state.ended_at,
        # how far into the log this view goes: of two views of one run, the higher revision is the newer (the lab
        # extension uses it to bring every record of a run in the notebook up to date)
        "revision": len(events),
        "steps": steps, "plans": plans, "pending": pending,
        "decisions": [d.model_dump(mode="json") for d in state.decisions],
        "answer": state.answer, "error": state.error, "errors": list(state.errors),
        "children": list(state.children),
        "totals": {
            "steps": len(state.steps), "model_calls": state.model_calls, "tokens": state.tokens,
            "prompt_tokens": state.usage.prompt_tokens, "completion_tokens": state.usage.completion_tokens,
            "cost": state.cost if state.cost_known else None,
            "wall_ms": _ms_between(state.started_at, state.ended_at or (events[-1].ts if events else None)),
        },
        "tree": tree,
    }
