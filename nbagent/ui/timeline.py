"""One line of plain text per event: shared by `nbagent show` and the plain-text record of a run."""

from __future__ import annotations

import json
from typing import Any

from nbagent._version import __version__
from nbagent.events.model import EventBase, UnknownEvent
from nbagent.events.outcomes import code_fault


def clip(text: Any, width: int = 80) -> str:
    s = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    s = " ".join(s.split())
    return s if len(s) <= width else s[: width - 1] + "…"


def call_signature(tool: str, arguments: dict[str, Any], width: int = 70) -> str:
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in arguments.items())
    return f"{tool}({clip(args, width)})"


def money(cost: float | None) -> str:
    return "-" if cost is None else f"${cost:.4f}"


def describe(event: EventBase) -> str:
    p: Any = event.payload
    t = event.type
    if isinstance(event, UnknownEvent):  # a newer nbagent's type: shown generically, never an error
        return f"(type unknown to nbagent {__version__}) {clip(p, 70)}"
    if t == "session_created":
        return f"session {p.name!r}" + (f" for {p.notebook}" if p.notebook else "")
    if t == "run_started":
        extra = f" · continues {p.previous_run_id}" if p.previous_run_id else ""
        extra += f" · child of {p.parent_run_id}" if p.parent_run_id else ""
        return f"{clip(p.prompt, 60)!r} · model {p.model or '-'} · autonomy {p.autonomy}{extra}"
    if t == "llm_called":
        calls = len(((p.response.get("choices") or [{}])[0].get("message") or {}).get("tool_calls") or [])
        retry = f" · {p.retry_count} retries" if p.retry_count else ""
        return (f"{p.model} · {p.usage.prompt_tokens}+{p.usage.completion_tokens} tokens · {money(p.cost)} · "
                f"{p.latency_ms:.0f} ms · {calls} tool call(s){retry}")
    if t == "plan_proposed":
        mode = "runs now" if p.auto_executing else "needs approval"
        return f"{len(p.steps)} step(s), max risk {p.max_risk} ({mode}): {clip(p.purpose, 60)}"
    if t == "tool_call_started":
        grant = f" · {p.reason}" if getattr(p, "grant_id", None) else ""
        return f"{call_signature(p.tool, p.arguments)} [{p.risk}]{grant}"
    if t == "tool_call_completed":
        retry = f" · {p.retry_count} retries" if p.retry_count else ""
        fault = code_fault(p.tool, p.result)  # a cell that raised or was stopped says so, not its result's JSON
        if fault is not None:
            icon = "■" if fault.kind == "interrupted" else "✗"
            return f"{p.tool} · {p.duration_ms:.0f} ms{retry} · {icon} {clip(fault.sentence(p.duration_ms), 70)}"
        return f"{p.tool} · {p.duration_ms:.0f} ms{retry} · {clip(p.preview or p.result, 60)}"
    if t == "tool_call_failed":
        return f"{p.tool} · {clip(p.error, 70)} · retries {p.retry_count}"
    if t == "authorization_denied":
        return f"{p.tool}: {p.reason}" if getattr(p, "grant_id", None) else f"{p.tool}: {clip(p.reason, 70)}"
    if t in ("plan_approved", "plan_rejected", "plan_refined"):
        text = getattr(p, "reason", "") or getattr(p, "feedback", "")
        given = "".join(f" · and for {'the run' if g.get('scope') == 'run' else 'the session'}: {g.get('covers')} "
                        f"(grant {g.get('grant_id')})" for g in getattr(p, "grants", None) or [])
        return f"plan {p.plan_id} by {p.by}" + (f": {clip(text, 60)}" if text else "") + given
    if t == "grant_given":
        from nbagent.gate.grants import covers_text

        reach = "this run" if p.scope == "run" else "the session"
        until = f" until {p.expires_at[11:16]}" if p.expires_at else ""
        return f"grant {p.grant_id} by {p.by}: {p.effect} {covers_text(p)} for {reach}{until}"
    if t == "grant_revoked":
        return f"grant {p.grant_id} by {p.by}" + (f": {clip(p.reason, 60)}" if p.reason else "")
    if t == "human_input_requested":
        return clip(p.question, 80)
    if t == "human_input_received":
        return f"by {p.by}: {clip(p.answer, 70)}"
    if t == "answer_ready":
        return clip(p.content, 80)
    if t == "error":
        return f"{p.error_type or 'error'}: {clip(p.message, 70)}"
    if t == "completed_with_errors":
        return f"{len(p.errors)} error(s)"
    if t == "completed":
        return clip(p.summary, 80) if p.summary else "done"
    if t == "interrupted":
        return str(p.reason)
    if t == "child_run_started":
        return f"child run {p.child_run_id}: {clip(p.prompt, 60)}"
    if t == "run_superseded":
        return f"by run {p.by_run_id}"
    if t == "thinking":
        return clip(p.text, 80)
    if t == "context_compacted":
        # its summary request is a model call: said first, as a line may be clipped; the summary is in the record
        asked = (f"summary call {p.summary_model or 'to the model'} · "
                 f"{p.usage.prompt_tokens}+{p.usage.completion_tokens} tokens · {money(p.cost)}"
                 + (f" · failed: {clip(p.summary_error, 60)}" if p.summary_error else "") + " · "
                 if p.summary_requested else "")
        return (f"{asked}{p.tokens_before:,} → {p.tokens_after:,} tokens · {len(p.results)} result(s) as references"
                + (f" · summary {p.summary_by}: {clip(p.summary, 60)}" if p.summary is not None else ""))
    if t == "context_assembled":
        return f"{len(p.messages)} context message(s), {len(p.tools)} tool(s)"
    if t == "waiting_for_approval":
        return f"plan {p.plan_id} · request {p.request_id}"
    return clip(event.payload.model_dump(mode="json"), 80)
