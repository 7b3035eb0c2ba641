"""The loop: each turn asks the run's events what comes next, and does that one thing.

The loop is driven by the run's *derived* state (`store.run_state`, a fold of its events), never by local
variables that a crash would lose. Each turn of `_drive` asks what the events say comes next:

    terminal?            -> stop
    a pending decision?  -> ask the Decider; no answer -> leave the run `waiting` and return
    open tool calls?     -> (plan them,) authorize and execute them (calls.py)
    an answer recorded?  -> finish (`completed` or `completed_with_errors`)
    otherwise            -> check budgets, call the model, record `llm_called`

So resuming a run in a new process is the same loop started on the same events: nothing else is needed.
"""

from __future__ import annotations

import asyncio
import traceback
from typing import Any

from filelock import Timeout as FileLockTimeout

from nbagent.events.ids import assign_call_ids
from nbagent.events.model import (
    AnswerReady,
    Completed,
    CompletedWithErrors,
    Error,
    Interrupted,
    LlmCalled,
    Thinking,
)
from nbagent.events.state import RunState, assistant_message
from nbagent.gate.policy import hour_ago_iso
from nbagent.models.llm import accepts_images, complete
from nbagent.models.reply import Fingerprint, ModelError
from nbagent.runtime.caching import cache_marked
from nbagent.runtime.context import MAX_RESULT_CHARS, AgentBase, RunContext, RunResult, RunStateError, cut
from nbagent.runtime.fitting import is_context_refusal
from nbagent.secrets.redactor import StreamRedactor


class RunLoop(AgentBase):
    """The loop and the model turn (a part of `Agent`)."""

    async def _drive(self, ctx: RunContext) -> RunResult:
        lease = self.store.lease(ctx.run_id)
        try:
            lease.acquire()
        except FileLockTimeout:
            raise RunStateError(f"run {ctx.run_id} is being run by another process (another kernel or `nbagent "
                                "run` of this notebook); wait for it to end, then look at it with `nbagent show`"
                                ) from None
        try:
            return await self._drive_leased(ctx)
        finally:
            self.store.release_lease(ctx.run_id, lease)

    async def _drive_leased(self, ctx: RunContext) -> RunResult:
        run_id = ctx.run_id
        try:
            while True:
                state = self.store.run_state(run_id)
                if state.is_terminal:
                    break
                if state.pending is not None:
                    if not await self._settle(ctx, state):
                        break  # nobody can decide now: the run stays `waiting`
                    continue
                open_calls = state.open_calls()
                if open_calls:
                    await self._handle_calls(ctx, state, open_calls)
                    if ctx.blocked:
                        break  # without this, a parent would re-enter its waiting child forever
                    continue
                if state.answer is not None or ctx.stop:
                    self._finish(run_id, ctx)
                    continue
                await self._model_turn(ctx, state)
        except (asyncio.CancelledError, KeyboardInterrupt) as exc:
            # Recording is synchronous, so the cancellation cannot cut it short; the run stays resumable.
            self._record(run_id, Interrupted(reason=type(exc).__name__))
            raise
        except Exception as exc:  # a bug or an unexpected failure: the run fails cleanly, with the reason
            self._record(run_id, Error(message=f"{type(exc).__name__}: {exc}", error_type=type(exc).__name__,
                                       traceback=traceback.format_exc(limit=8)))
        return self.result(run_id)

    def _cell_images(self, own: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The run's messages with the images its cells showed, for a model that takes images (cell_images.py)."""
        takes = (bool(getattr(self._local, "accepts_images", False)) if self._local is not None
                 else accepts_images(self.model))
        if not takes:
            return own, []
        from nbagent.runtime.cell_images import with_images
        from nbagent.store.blobs import BlobStore

        return with_images(own, BlobStore.of_store(self.store.path).get)

    async def _model_turn(self, ctx: RunContext, state: RunState) -> None:
        run_id = ctx.run_id
        calls_last_hour = self.store.count_events("llm_called", since=hour_ago_iso()) \
            if self.budget.max_calls_per_hour is not None else 0
        tokens, cost, model_calls, _ = self._tree_sums(ctx.root_id, state)  # a sub-agent spends its root's budget
        denial = self.authorizer.check_model_call(tokens=tokens, cost=cost, model_calls=model_calls,
                                                  calls_last_hour=calls_last_hour)
        if denial is not None:
            self._deny(run_id, None, "(model)", denial, None)
            ctx.stop.append(denial.reason)
            return
        tools = self._schemas(run_id, state)
        if ctx.fingerprint is None:
            ctx.prefix = self._prefix(ctx, state)
            ctx.fingerprint = Fingerprint(tools, ctx.prefix)
        own = state.messages
        sent_own, images_sent = self._cell_images(own)
        messages = await self._fit(ctx, state, tools, sent_own)  # fitting.py: within the window, or None
        if messages is None:
            return
        estimate = self._estimate(ctx, messages, tools)
        if estimate is not None:
            denial = self.authorizer.check_next_call(tokens=tokens, cost=cost, estimate=estimate)
            if denial is not None:
                self._deny(run_id, None, "(model)", denial, None)
                ctx.stop.append(denial.reason)
                return
            self.bus.next_call(run_id, estimate)
        fingerprint = ctx.fingerprint.of(own)
        metadata: dict[str, Any] = {}
        if self._local_key is not None:
            metadata = {"nbagent_model": self._local_key, "nbagent_turn": ctx.turn[0],
                        "nbagent_fingerprint": fingerprint, "nbagent_prefix_len": len(ctx.prefix),
                        "nbagent_prefix_sha": ctx.fingerprint.prefix_sha}
        # streamed text is redacted before the bus: the live view and the notebook's widget state never see a secret
        stream = StreamRedactor(self.redactor, lambda text: self.bus.token(run_id, text),
                                lambda: self.bus.token_reset(run_id)) if self.stream else None
        try:
            sent = cache_marked(self.model, messages, len(messages) - len(sent_own))
            reply = await complete(self.settings, sent, tools, metadata=metadata,
                                   on_token=stream.feed if stream is not None else None,
                                   on_retry=(lambda attempt, exc: stream.reset()) if stream is not None else None)
        except ModelError as exc:
            ctx.turn[0] += 1 + exc.retry_count
            message = str(exc)
            if is_context_refusal(exc):
                if await self._refused(ctx, state, tools, sent_own, exc):
                    return  # compacted and recorded: the loop's next turn sends the request again, once
                sent_n = f"{ctx.next_tokens[0]:,} tokens by nbagent's count" if ctx.next_tokens else "compacted"
                message += (f" (refused again after one compaction: the request was {sent_n}; the provider counts "
                            "more. Set context_window lower, or shorten the request or the context given with it)")
            self._record(run_id, Error(message=message, error_type=exc.error_type, retry_count=exc.retry_count))
            return
        finally:
            if stream is not None:
                stream.close()
        ctx.refused_once = False
        ctx.turn[0] += 1 + reply.retry_count
        request = {
            "model": self.model, "params": self.settings.params, "tools": [t["function"]["name"] for t in tools],
            "tools_sha": ctx.fingerprint.tools_sha,
            "prefix": {"messages": len(ctx.prefix), "sha": ctx.fingerprint.prefix_sha},
            "own_from": state.recorded_own, "messages": own[state.recorded_own:], "n_messages": len(messages),
        }
        if self.settings.api_base:
            request["api_base"] = self.settings.api_base
        if images_sent:
            request["images_sent"] = images_sent
        if estimate is not None:
            request["input_tokens"] = estimate
        usage, spent = self._spent(ctx, messages, tools, reply)  # never less than nbagent's own count (fitting.py)
        content, response = _cut_reply(reply.content, reply.response)
        called = self._record(run_id, LlmCalled(
            model=self.model, request=request, response=response, usage=usage, cost=spent,
            latency_ms=round(reply.latency_ms, 3), retry_count=reply.retry_count, fingerprint=fingerprint,
            call_ids=None if self._legacy_ids else assign_call_ids(state.model_calls + 1, _count_calls(reply.response)),
        ))
        if reply.tool_calls:
            if content and content.strip():
                self._record(run_id, Thinking(text=content), parent=called.id)
            return  # the open calls are handled by the next turn of the loop
        if not (content or "").strip():
            self._record(run_id, Error(
                message="the model returned an empty reply (no text and no tool calls); try again, or another model",
                error_type="EmptyReply"), parent=called.id)
            return
        self._record(run_id, AnswerReady(content=content or ""), parent=called.id)


    def _finish(self, run_id: str, ctx: RunContext) -> None:
        state = self.store.run_state(run_id)
        if state.answer is None:
            last = next((m.get("content") for m in reversed(state.turns)
                         if m["role"] == "assistant" and m.get("content")), None)
            summary = "; ".join(ctx.stop) if ctx.stop else ""
            self._record(run_id, AnswerReady(content=last or f"Stopped before an answer: {summary}"))
            state = self.store.run_state(run_id)
        errors = [*state.errors, *_refusals(state), *ctx.stop]
        if errors:  # a denied plan too: the answer may claim what was refused, so the run did not do all it says
            self._record(run_id, CompletedWithErrors(errors=list(dict.fromkeys(errors))))
        else:
            self._record(run_id, Completed())



def _refusals(state: RunState) -> list[str]:
    """The calls a person or a policy said no to (a denied plan, a reject grant), one line each: they end the run
    `completed_with_errors` as policy denials do, since its answer may claim them done (docs/concepts.md)."""
    said: dict[str, str] = {}
    for d in state.decisions:
        if d.kind == "rejected" and d.plan_id:
            text = d.text.strip()
            said[d.plan_id] = text if text.lower().startswith("denied") else \
                f"denied by {d.by}" + (f": {text}" if text else "")
    out = []
    for call_id, step in state.steps.items():
        if step.status != "rejected":
            continue
        plan = state.plans.get(state.plan_of.get(call_id, ""))
        planned = next((s for s in plan.steps if s.call_id == call_id), None) if plan else None
        target = planned.target if planned is not None and planned.target else step.arguments.get("path")
        what = step.tool + (f" {target}" if isinstance(target, str) and target else "")
        why = said.get(plan.plan_id) if plan is not None and plan.plan_id in said else \
            f"denied: {step.error or 'a person said no to calls like this one'}"
        out.append(f"{what}: {why}")
    return out



def _cut_reply(content: str | None, response: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The reply's text and response as the log keeps them: an answer (or the text beside tool calls, or a model's
    reasoning) is cut as a tool's result is (context.cut), in the response and wherever it is recorded again."""
    if content is not None:
        content = cut(content, "answer")
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return content, response
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return content, response
    texts = {k: cut(v, "answer" if k == "content" else "reasoning") for k in ("content", "reasoning_content")
             if isinstance(v := message.get(k), str) and len(v) > MAX_RESULT_CHARS}
    if not texts:
        return content, response
    return content, {**response, "choices": [{**choices[0], "message": {**message, **texts}}, *choices[1:]]}


def _count_calls(response: dict[str, Any]) -> int:
    message = assistant_message(response) or {}
    return len(message.get("tool_calls") or [])
