"""Keeping each request within the model's context, and saying what the next call will cost before it is made.

Before every model call (`_fit`): the request is built as the recorded compactions say (compaction.view), bounded
by its size and, when that bound passes the window's share, counted with the model's tokenizer (window.Counter).
Over the share, older material is compacted down to the window's target, in this order: tool results of earlier
turns become references (oldest first), then the session's earlier runs become one summary, then the results the
model has just asked for. What was compacted is recorded as one `context_compacted` event before the call, so
the record, the live view and a replay all see it. A request still over the limit fails the run before the
call, saying what is too big. A provider that refuses a request for its length anyway (`_refused`) gets one
compaction down to the target of the limit it names, and one retry.
"""

from __future__ import annotations

import re
from typing import Any

from nbagent.events.model import CompactedResult, ContextCompacted, Error, Usage
from nbagent.events.state import RunState
from nbagent.models.llm import complete
from nbagent.models.reply import ModelError, ModelReply
from nbagent.models.usage import floored, priced
from nbagent.runtime.compaction import Compactions, candidates, capped, extract, transcript, view
from nbagent.runtime.context import AgentBase, RunContext
from nbagent.runtime.window import Counter, Window, price_in, prices, window_for

SUMMARY_PROMPT = (
    "You summarise a conversation between a researcher and an assistant working in a Jupyter notebook, so that the "
    "assistant can continue without it. Keep what was asked, what was found (numbers, names of files, columns and "
    "variables), what was changed or decided, and what is still open. Plain text, at most 250 words.")
# a reference costs about this many tokens (compaction.reference): a result smaller than this is left as it is
REFERENCE_TOKENS = 90
_LIMIT_SAID = (re.compile(r"maximum context length is\s+([\d,]+)\s+tokens", re.I),
               re.compile(r"tokens?\s*>\s*([\d,]+)\s+maximum", re.I),
               re.compile(r"context (?:window|length) (?:of|is)\s+([\d,]+)", re.I))
_REFUSAL_WORDS = ("context_length_exceeded", "maximum context length", "prompt is too long", "context window",
                  "too many tokens", "input is too long")


def is_context_refusal(exc: ModelError) -> bool:
    """A provider's "the request is too long" (OpenAI, Anthropic, litellm's ContextWindowExceededError)."""
    text = str(exc).lower()
    # only a request refused as it is (400): a rate limit's "too many tokens per minute" is another matter
    return exc.error_type == "ContextWindowExceededError" or (
        exc.error_type in ("BadRequestError", "InvalidRequestError") and any(w in text for w in _REFUSAL_WORDS))


def limit_said(message: str) -> int | None:
    """The input limit a refusal names ("maximum context length is 16000 tokens"), or None."""
    for pattern in _LIMIT_SAID:
        found = pattern.search(message)
        if found:
            return int(found.group(1).replace(",", ""))
    return None


class ContextFitting(AgentBase):
    """The context budget of a run (a part of `Agent`)."""

    context_window: int | None
    _counter: Counter | None

    def _window_options(self) -> dict[str, Any] | None:
        """The window recorded with a new run: for a real model always, for an offline one when it is set."""
        offline = self._local is not None
        if self.replay_source is not None:  # a replay keeps the recording's window, so it sends what was sent
            recorded = self.store.run_state(self.replay_source).options.get("context")
            return dict(recorded) if isinstance(recorded, dict) else None
        if offline and not self.context_window:
            return None
        return window_for(self.model, self.context_window, offline=offline).model_dump()

    def _window(self, state: RunState, compactions: Compactions) -> Window | None:
        recorded = state.options.get("context")
        if not isinstance(recorded, dict):
            return None
        window = Window.model_validate(recorded)
        learned = [c.window for c in compactions.recorded if c.window_source == "refused" and c.window]
        if learned:  # a provider named its limit: used from then on (the result size stays as recorded)
            window = window.model_copy(update={"limit": min(learned), "source": "refused"})
        return window

    def counter(self) -> Counter:
        if getattr(self, "_counter", None) is None:
            self._counter = Counter(self.model, offline=self._local is not None)
        assert self._counter is not None
        return self._counter

    def _compactions(self, ctx: RunContext, state: RunState) -> Compactions:
        recorded = [c for rid, _ in ctx.history for c in self.store.run_state(rid).compactions]
        return Compactions([*recorded, *state.compactions])

    def _view(self, ctx: RunContext, state: RunState, own: list[dict[str, Any]], compactions: Compactions,
              window: Window) -> list[dict[str, Any]]:
        system = ctx.prefix[:1] if self.system_prompt else []
        return view(system, ctx.history, ctx.run_id, own, compactions, window, self.counter(), ctx.run_names)

    async def _fit(self, ctx: RunContext, state: RunState, tools: list[dict[str, Any]],
                   own: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """The messages of the next request, compacted if they would pass the window's share; None when they cannot
        fit (an error is recorded). Sets `ctx.next_tokens` (count, exact) for the estimate of the call."""
        if not isinstance(state.options.get("context"), dict):  # no window: what was always sent, results capped
            ctx.next_tokens = None
            return self._capped(ctx, own)
        compactions = self._compactions(ctx, state)
        window = self._window(state, compactions)
        assert window is not None
        messages = self._view(ctx, state, own, compactions, window)
        ctx.window_limit = window.limit
        threshold = window.threshold()
        bound = Counter.bound(messages, tools)
        if threshold is None or bound <= threshold:  # it fits whatever the count: no tokenizer needed
            ctx.next_tokens = (Counter.estimate(messages, tools), False)
            return messages
        n = self.counter().request(messages, tools)
        if n <= threshold:
            ctx.next_tokens = (n, True)
            return messages
        return await self._compact(ctx, state, tools, own, compactions, window, n, "budget")

    @staticmethod
    def _capped(ctx: RunContext, own: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`capped(ctx.prefix + own)`, looking only at the messages new since the last call: a run's messages only
        grow, and a step of a 1,000-step run must not walk all of them again."""
        done, last, sent = ctx.capped
        if not done or done > len(own) or own[done - 1] is not last:  # the first call, or not the messages seen
            done, sent = 0, capped(ctx.prefix)
        sent = sent + capped(own[done:]) if done < len(own) else sent
        ctx.capped = (len(own), own[-1] if own else None, sent)
        return sent

    async def _compact(self, ctx: RunContext, state: RunState, tools: list[dict[str, Any]], own: list[dict[str, Any]],
                       compactions: Compactions, window: Window, before: int, reason: str,
                       provider_message: str | None = None) -> list[dict[str, Any]] | None:
        assert window.limit is not None
        counter, aim = self.counter(), int(window.limit * window.target)
        earlier, latest = candidates(ctx.history, ctx.run_id, own, compactions)
        chosen: list[CompactedResult] = []
        total = before

        def take(group: list[tuple[str, str, str]], goal: int) -> None:
            nonlocal total
            for rid, call_id, content in group:
                if total <= goal:
                    return
                tokens = counter.text(content)
                sent = min(tokens, window.result_tokens + 60)
                if sent > REFERENCE_TOKENS * 2:
                    chosen.append(CompactedResult(run_id=rid, call_id=call_id, tokens=tokens))
                    total -= sent - REFERENCE_TOKENS

        take(earlier, aim)
        summary: dict[str, Any] = {}
        current = Compactions([*compactions.recorded, ContextCompacted(reason=reason, results=chosen)])
        unsummarized = [rid for rid, _ in ctx.history if rid not in compactions.summarized]
        if total > aim and unsummarized:
            summary = await self._summary(ctx, current, window)
            current = Compactions([*compactions.recorded, ContextCompacted(reason=reason, results=chosen,
                                                                           **summary)])
            total = counter.request(self._view(ctx, state, own, current, window), tools)
        # what the model asked for just now is taken only if the request cannot be sent otherwise (over the share)
        take(latest, window.threshold() or aim)
        event = ContextCompacted(
            reason=reason, window=window.limit, window_source=window.source, tokens_before=before,
            results=chosen, provider_message=provider_message, **summary)
        messages = self._view(ctx, state, own, Compactions([*compactions.recorded, event]), window)
        after = counter.request(messages, tools)
        event.tokens_after = after
        self._record(ctx.run_id, event)
        if after > window.limit:
            self._record(ctx.run_id, Error(error_type="ContextTooLarge", message=self._too_large(
                messages, tools, after, window)))
            return None
        ctx.next_tokens, ctx.window_limit = (after, True), window.limit
        return messages

    async def _summary(self, ctx: RunContext, compactions: Compactions, window: Window) -> dict[str, Any]:
        """The fields of a summary of the history: by the model (a real one), else an extract; a failed summary
        request is recorded and the extract stands in."""
        assert window.limit is not None
        counter = self.counter()
        cap = max(200, min(1_500, window.limit // 10))
        runs = [rid for rid, _ in ctx.history]
        fields: dict[str, Any] = {"summarized_runs": runs}
        error = None
        if self.replay_source is not None:  # a replay sends what the recording sent: its summary, not a new one
            made = sum(1 for c in self.store.run_state(ctx.run_id).compactions if c.summary is not None)
            recorded = [c for c in self.store.run_state(self.replay_source).compactions if c.summary is not None]
            if made < len(recorded) and recorded[made].summarized_runs == runs:
                return {**fields, "summary": recorded[made].summary, "summary_by": recorded[made].summary_by}
        if self._local is None:
            fields["summary_model"] = self.model  # a model call of the run, whatever it answers
            text = transcript(ctx.history, compactions, ctx.run_names)
            budget = int(window.limit * window.target)
            if counter.text(text) > budget:  # the most recent part: what the next request most likely needs
                text = text[-budget * 3:]
            try:
                request = [{"role": "system", "content": SUMMARY_PROMPT}, {"role": "user", "content": text}]
                reply = await complete(self.settings, request, [])
            except ModelError as exc:
                error = str(exc)
            else:
                said = (reply.content or "").strip()
                spent, cost = self._spent(ctx, request, [], reply, counted=counter.request(request, []))
                usage = {"usage": spent, "cost": cost}
                if said:
                    return {**fields, **usage, "summary": counter.head(said, cap), "summary_by": "model"}
                error = "the model returned an empty summary"
                fields.update(usage)
        return {**fields, "summary": extract(ctx.history, compactions, counter, cap) or "(no earlier requests)",
                "summary_by": "extract", "summary_error": error}

    async def _refused(self, ctx: RunContext, state: RunState, tools: list[dict[str, Any]],
                       own: list[dict[str, Any]], exc: ModelError) -> bool:
        """After a provider refused the request for its length: compact to the target of the limit it named (or of
        what was sent, less a fifth) and say whether that was done (once per turn: a second refusal ends the run)."""
        if ctx.refused_once:
            return False
        ctx.refused_once = True
        compactions = self._compactions(ctx, state)
        window = self._window(state, compactions) or Window.model_validate(
            window_for(self.model, None, offline=self._local is not None).model_dump())
        sent = ctx.next_tokens[0] if ctx.next_tokens else Counter.bound(ctx.prefix + own, tools)
        said = limit_said(str(exc))
        limit = said if said else int(min(sent, window.limit or sent) * 0.8)
        window = window.model_copy(update={"limit": limit, "source": "refused"})
        messages = self._view(ctx, state, own, compactions, window)
        before = self.counter().request(messages, tools)
        # retried when it fits now; when it cannot, `_compact` has recorded why and the run ends with that
        await self._compact(ctx, state, tools, own, compactions, window, before, "refused",
                            provider_message=str(exc)[:500])
        return True

    def _too_large(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], tokens: int,
                   window: Window) -> str:
        counter = self.counter()
        parts = sorted(((counter.message(m), m.get("role", "?")) for m in messages), reverse=True)[:3]
        largest = ", ".join(f"a {role} message of {n:,} tokens" for n, role in parts)
        return (f"the request is {tokens:,} tokens even after compaction, over the model's input limit of "
                f"{window.limit:,} ({window.source}); the largest parts: {largest}, and the tools' schemas "
                f"({counter.text(str(tools)) if tools else 0:,} tokens). Shorten the request or the context given "
                "with it, offer fewer tools, or use a model with a larger context window")

    def _estimate(self, ctx: RunContext, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                  exact: bool = False) -> dict[str, Any] | None:
        """The next call's input tokens (counted when `exact`, a budget applies, or compaction counted them; else
        estimated) and their cost at the model's price (None when no window applies)."""
        if ctx.next_tokens is None:
            return None
        n, counted = ctx.next_tokens
        if (exact or self.budget.max_cost is not None or self.budget.max_tokens is not None) and not counted:
            # a budget decides on the count, never on an estimate
            n, counted = ctx.next_tokens = (self.counter().request(messages, tools), True)
        exact = counted
        out: dict[str, Any] = {"input_tokens": n, "exact": exact, "window": ctx.window_limit}
        if self._local is None:
            full, _ = price_in(self.model)
            if full is not None:
                out["cost"] = round(n * full, 8)
        return out

    def _spent(self, ctx: RunContext, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
               reply: ModelReply, counted: int | None = None) -> tuple[Usage, float | None]:
        """The usage and cost recorded for a call that sent `messages`: the provider's report, raised to nbagent's own
        count of what was sent and received where a budget counts tokens or cost, or where the report says nothing
        was (none, zero, negative: usage.floored). `counted`: the request's tokens, when they were counted already."""
        reported = reply.usage
        said = bool(reply.content) or bool(reply.tool_calls)
        strict = self.budget.max_tokens is not None or self.budget.max_cost is not None
        sent = received = 0
        if strict or reported.prompt_tokens <= 0:  # every request sends something: none said is not none sent
            counter = self.counter()
            if counted is None:
                exact = ctx.next_tokens if ctx.next_tokens is not None and ctx.next_tokens[1] else None
                counted = exact[0] if exact is not None else counter.request(messages, tools)
            sent = counted
            if said and (strict or reported.completion_tokens <= 0):
                received = counter.text(reply.content or "") + sum(
                    counter.text(c.name) + counter.text(c.arguments_raw) for c in reply.tool_calls)
        usage = floored(reported, sent=sent, received=received)
        # offline models have nominal prices of their own (models/provider.py), and no litellm to ask
        return usage, priced(reply.cost, reported, usage,
                             lambda: prices(self.model) if self._local is None else (None, None))
