"""Running a call the gate let through: a tool (timeout, retries, its result made JSON), or a control tool
(ask_human, respond_to_user, done, spawn_agent: a sub-agent is a child run of the same tree).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

from nbagent.events.ids import new_id
from nbagent.events.model import (
    AnswerReady,
    ChildRunStarted,
    HumanInputRequested,
    RunResumed,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallStarted,
)
from nbagent.events.state import RunState, RunStatus
from nbagent.models.reply import is_transient
from nbagent.models.tool_calls import ToolCallRequest
from nbagent.retrying import with_retries
from nbagent.runtime.context import CONTROL_RISK, MAX_RESULT_CHARS, AgentBase, RunContext, ms_since
from nbagent.tools.base import TIME_LIMIT, Tool, ToolError
from nbagent.tools.control import CONTROL_TOOLS


class Invocation(AgentBase):
    """Calling tools and control tools (a part of `Agent`)."""

    async def _call_tool(self, tool: Tool, args: dict[str, Any]) -> tuple[Any, int]:
        """The tool's result and its retries: a transient failure (not a ToolError) is retried as a model call is
        (retrying.py), with the model's backoff; a failure that ends it carries `retry_count`."""
        def transient(e: BaseException) -> bool:
            return not isinstance(e, ToolError) and is_transient(e)

        return await with_retries(lambda n: self._attempt(tool, args), retries=self.tool_retries,
                                  base=self.settings.retry_base, cap=self.settings.retry_cap, transient=transient)

    async def _attempt(self, tool: Tool, args: dict[str, Any]) -> Any:
        token = TIME_LIMIT.set(self.tool_timeout)  # copied into the task wait_for makes, and a sync tool's thread
        try:
            coro = tool.call(args)
            return await (asyncio.wait_for(coro, self.tool_timeout) if self.tool_timeout else coro)
        finally:
            TIME_LIMIT.reset(token)

    async def _control(self, ctx: RunContext, call: ToolCallRequest, args: dict[str, Any], parent: str | None) -> None:
        run_id = ctx.run_id
        if call.name == "ask_human":
            started = self._record(run_id, ToolCallStarted(call_id=call.id, tool=call.name, arguments=args,
                                                           risk=CONTROL_RISK), parent=parent)
            self._record(run_id, HumanInputRequested(request_id=new_id(), question=args["question"],
                                                     call_id=call.id), parent=started.id)
            return
        if call.name == "spawn_agent":
            await self._spawn(ctx, call, parent, resume=False)
            return
        started = self._record(run_id, ToolCallStarted(call_id=call.id, tool=call.name, arguments=args,
                                                       risk=CONTROL_RISK), parent=parent)
        if call.name == "respond_to_user":
            self._record(run_id, ToolCallCompleted(call_id=call.id, tool=call.name, result="delivered to the user",
                                                   preview="answer delivered"), parent=started.id)
            self._record(run_id, AnswerReady(content=args["message"]), parent=started.id)
        else:  # done
            state = self.store.run_state(run_id)
            self._record(run_id, ToolCallCompleted(call_id=call.id, tool=call.name, result="finished",
                                                   preview="finished"), parent=started.id)
            if state.answer is None:
                last_text = next((m.get("content") for m in reversed(state.turns)
                                  if m["role"] == "assistant" and m.get("content")), None)
                self._record(run_id, AnswerReady(content=args.get("summary") or last_text or "Done."),
                             parent=started.id)

    async def _spawn(self, ctx: RunContext, call: ToolCallRequest, parent: str | None, *, resume: bool) -> None:
        run_id = ctx.run_id
        args = call.arguments or {}
        t0 = time.perf_counter()
        if resume:
            child_id = next(self._child_of_call(self.store.run_state(run_id), call.id))
            child_state = self.store.run_state(child_id)
            child_ctx = RunContext(child_id, ctx.root_id, ctx.depth + 1, ctx.turn)
            if child_state.status in (RunStatus.INTERRUPTED, RunStatus.WAITING):
                self._record(child_id, RunResumed(by=f"parent {run_id}"))
            result = await self._drive(child_ctx)
            started_id = parent
        else:
            if ctx.depth >= 3:
                self._record(run_id, ToolCallFailed(call_id=call.id, tool=call.name, error="spawn_agent: sub-agents "
                                                    "may not nest deeper than 3 levels", error_type="DepthLimit"),
                             parent=parent)
                return
            started = self._record(run_id, ToolCallStarted(call_id=call.id, tool=call.name, arguments=args,
                                                           risk=CONTROL_RISK), parent=parent)
            started_id = started.id
            names = args.get("tools")
            parent_tools = [n for n in self._allowed_tools(run_id) if n not in CONTROL_TOOLS]
            child_tools = [n for n in (names or parent_tools) if n in parent_tools]
            holder: list[str] = []

            def announce(kind: str, data: Any) -> None:
                if kind == "event" and data.type == "run_started" and data.payload.parent_run_id == run_id \
                        and not holder:
                    holder.append(data.run_id)
                    self._record(run_id, ChildRunStarted(child_run_id=data.run_id, prompt=args["prompt"],
                                                         call_id=call.id), parent=started_id)

            unsubscribe = self.bus.subscribe(announce)
            try:
                result = await self._start(args["prompt"], previous_run_id=None, parent_run_id=run_id,
                                           tools=child_tools, depth=ctx.depth + 1, turn=ctx.turn)
            finally:
                unsubscribe()
        if result.status == RunStatus.WAITING:
            ctx.blocked = True  # the parent waits with its child; resuming the parent resumes the child
            return
        if result.status == RunStatus.INTERRUPTED:
            raise asyncio.CancelledError()
        outcome: dict[str, Any] = {"run_id": result.run_id, "status": result.status.value, "answer": result.answer}
        if result.error or result.errors:
            outcome["errors"] = [result.error] if result.error else result.errors
        if result.status == RunStatus.FAILED:
            self._record(run_id, ToolCallFailed(call_id=call.id, tool=call.name,
                                                error=f"the sub-agent failed: {result.error}",
                                                error_type="ChildRunFailed", duration_ms=ms_since(t0)),
                         parent=started_id)
            return
        self._record(run_id, ToolCallCompleted(call_id=call.id, tool=call.name, duration_ms=ms_since(t0),
                                               result=outcome, preview=result_preview(result.answer or "")),
                     parent=started_id)


    def _child_of_call(self, state: RunState, call_id: str) -> Iterator[str]:
        for e in self.store.query_events(run_id=state.run_id, types="child_run_started"):
            if e.payload.call_id == call_id:  # type: ignore[attr-defined]
                yield e.payload.child_run_id  # type: ignore[attr-defined]


def jsonable(value: Any) -> Any:
    """A tool's result as the log keeps it and the model reads it: plain JSON, capped at MAX_RESULT_CHARS."""
    if type(value) is str and 6 * len(value) + 2 <= MAX_RESULT_CHARS:
        return value  # the round trip gives a plain string back, and its JSON (6 characters at most each) is not capped
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = json.dumps(repr(value))
    if len(text) > MAX_RESULT_CHARS:
        return (text[:MAX_RESULT_CHARS] + f"… [truncated: the result had {len(text):,} characters; ask for less]")
    value = json.loads(text)
    return value


def result_preview(result: Any, width: int = 200) -> str:
    """A result as one short line (a completed call's `preview`), whoever ran the call."""
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def error_text(exc: BaseException) -> str:
    """What a failed call says in its `tool_call_failed` event, capped as a result is."""
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return "the tool timed out"
    text = str(exc) or type(exc).__name__
    text = text if isinstance(exc, ToolError) else f"{type(exc).__name__}: {text}"
    if len(text) > MAX_RESULT_CHARS:  # an error is capped as a result is: a tool (or server) may say megabytes
        text = text[:MAX_RESULT_CHARS] + f"… [truncated: the error had {len(text):,} characters]"
    return text
