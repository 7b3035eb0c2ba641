"""A turn's tool calls: checked, planned (or run at once), and each one passed through the approval gate.

A model turn with tool calls becomes a plan when it has `plan_threshold` (3) or more calls, or when any call
is above the run's autonomy (the approval table in `policy.py`). A plan is proposed with its purpose, steps,
risks and previews; it either runs at once (`auto_executing`) or waits for approval. Approve runs it, Deny
answers every call with the reason, Refine answers them as skipped and adds the feedback for the model.
Malformed calls (invalid JSON, unknown tool, wrong argument types, more calls than allowed) are answered with
an error the model sees, before any planning. Every call, planned or not, runs only once `approval.clearance`
lets it through (`_execute`).
"""

from __future__ import annotations

import time
from typing import Any

from nbagent.events.ids import new_id
from nbagent.events.levels import Risk
from nbagent.events.model import (
    ExecutionStarted,
    PlanningStarted,
    PlanProposed,
    PlanStep,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallStarted,
    WaitingForApproval,
)
from nbagent.events.state import RunState
from nbagent.gate import grants as grants_
from nbagent.gate.approval import call_risk, clearance, needs_decision
from nbagent.gate.effects import CallInfo, Effect, bound, call_digest, resolve
from nbagent.gate.policy import Denial
from nbagent.models.tool_calls import ToolCallRequest, parse_tool_calls
from nbagent.runtime.context import AgentBase, RunContext, ms_since
from nbagent.runtime.invoke import error_text, jsonable, result_preview
from nbagent.tools.base import Tool, ToolError
from nbagent.tools.control import CONTROL_TOOLS

# Scope refusals that state a fact about the folder, not a policy: the call fails as an error (a denial is reserved
# for what the person or the configuration forbids: outside, excluded, a switched-off operation, a size limit...)
FILE_FACTS = frozenset({"scope.missing", "scope.exists", "scope.not_a_file", "scope.not_a_folder", "scope.changed",
                        "scope.unreadable", "scope.symlink_loop"})


class CallHandling(AgentBase):
    """A turn's calls, from the model's reply to the gate (a part of `Agent`)."""

    async def _handle_calls(self, ctx: RunContext, state: RunState, open_calls: list[dict[str, Any]]) -> None:
        run_id = ctx.run_id
        calls = parse_tool_calls({"tool_calls": open_calls})
        parent = state.last_llm_event_id
        plan = state.plans.get(state.plan_of.get(calls[0].id, ""))
        if plan is not None:
            if plan.status == "proposed":  # proposed, but the wait was never recorded (a crash in between)
                self._record(run_id, WaitingForApproval(plan_id=plan.plan_id, request_id=new_id()))
                return
            # a plan already decided (auto, approved): carry it out (again, after a crash or an interrupt); each
            # call still passes the approval gate in `_execute`
            await self._execute_all(ctx, calls, parent)
            return
        allowed = self._allowed_tools(run_id, state)
        valid: list[ToolCallRequest] = []
        for i, call in enumerate(calls):
            problem = self._malformed(call, i, allowed)
            if problem is not None:
                self._record(run_id, ToolCallFailed(call_id=call.id, tool=call.name or "(none)", error=problem,
                                                    error_type="InvalidToolCall"), parent=parent)
            else:
                valid.append(call)
        if not valid:
            return
        in_force = self._grants(ctx, state)
        tools = allowed
        # what each call will touch, resolved now: risk, grants, the card and the approval are all about that
        done = [self._effect(allowed[c.name], c.arguments or {}) for c in valid]
        risks = [call_risk(allowed[c.name], c.arguments or {}, e) for c, e in zip(valid, done, strict=True)]
        # a call a grant answers (yes or no) is not asked about again; the gate in `_execute` applies the grant
        needing = [i for i, (c, e, (risk, why)) in enumerate(zip(valid, done, risks, strict=True))
                   if needs_decision(state.autonomy, c.name, risk) and grants_.answering(
                       in_force, c.name, c.arguments or {}, e, risk, why) is None]
        if len(valid) < self.plan_threshold and not needing:
            # no plan: its steps (previews, digests) are not needed, and the calls run now, on the effects just
            # resolved (the file tools still act only on those targets: effects.bound)
            # (only the first: a call before another may change the folder, a link made by a tool of the same reply)
            await self._execute_all(ctx, valid, parent, {valid[0].id: done[0]})
            return
        steps = [self._step(c, allowed, r, e, i in needing)
                 for i, (c, r, e) in enumerate(zip(valid, risks, done, strict=True))]
        needs_approval = [steps[i] for i in needing]
        plan_id = new_id()
        auto = not needs_approval
        max_risk = max((s.risk for s in steps), key=lambda r: r.rank)
        self._record(run_id, PlanningStarted(plan_id=plan_id), parent=parent)
        purpose = _purpose(state)
        offer: list[str] = []
        if not auto:
            try:
                offer = [grants_.covers_text(t) for t in grants_.for_plan(
                    needs_approval, state.autonomy, grants_.GrantSpec(scope="run"), "allow", tools)[0]]
            except grants_.GrantError:
                offer = []  # nothing of it can be granted: every call plants code
        proposed = self._record(run_id, PlanProposed(plan_id=plan_id, purpose=purpose, steps=steps,
                                                     max_risk=max_risk, auto_executing=auto, grant_offer=offer),
                                parent=parent)
        if auto:
            self._record(run_id, ExecutionStarted(plan_id=plan_id), parent=proposed.id)
            await self._execute_all(ctx, valid, parent)
        else:
            self._record(run_id, WaitingForApproval(plan_id=plan_id, request_id=new_id()), parent=proposed.id)

    async def _execute_all(self, ctx: RunContext, calls: list[ToolCallRequest], parent: str | None,
                           resolved: dict[str, Effect] | None = None) -> None:
        for call in calls:
            await self._execute(ctx, call, parent, (resolved or {}).get(call.id))
            if ctx.blocked or self.store.run_state(ctx.run_id).pending is not None:
                return  # ask_human, or a sub-agent waiting: the rest of the turn waits for the answer

    def _malformed(self, call: ToolCallRequest, index: int, allowed: dict[str, Tool]) -> str | None:
        limit = self.budget.max_tool_calls_per_turn
        if index >= limit:
            return f"not executed: more than {limit} tool calls in one reply; do the rest in a later turn"
        if not call.name:
            return "the tool call has no tool name"
        if call.name not in allowed:
            names = ", ".join(sorted(allowed))
            return f"unknown tool {call.name!r}; the available tools are: {names}"
        if call.parse_error is not None:
            return call.parse_error
        try:
            allowed[call.name].validate(call.arguments or {})
        except ToolError as exc:
            return str(exc)
        return None

    def _step(self, call: ToolCallRequest, allowed: dict[str, Tool], risk_why: tuple[Risk, str | None],
              effect: Effect, asks: bool) -> PlanStep:
        tool = allowed[call.name]
        args = call.arguments or {}
        risk, why = risk_why  # call_risk(tool, args, effect)
        return PlanStep(call_id=call.id, tool=call.name, arguments=args, risk=risk,
                        target=effect.shown(tool.target(args)), preview=tool.preview(args), risk_reason=why,
                        digest=call_digest(call.name, args, effect), effect=effect, asks=asks)

    def _effect(self, tool: Tool, args: dict[str, Any]) -> Effect:
        """What the call will touch, resolved in the notebook's folder now (effects.py)."""
        if tool.name in CONTROL_TOOLS:
            return Effect()
        return resolve(tool, args, self.path_guard, sources=self.code_paths)


    async def _execute(self, ctx: RunContext, call: ToolCallRequest, parent: str | None,
                       resolved: Effect | None = None) -> None:
        run_id = ctx.run_id
        state = self.store.run_state(run_id)
        step = state.steps.get(call.id)
        if step is not None and step.status == "running":
            # started before (it passed the gate then): nothing is let through here; a sub-agent's run is driven
            # on, its own calls each passing the gate in the child run, and anything else is not run again
            if call.name == "spawn_agent" and any(True for _ in self._child_of_call(state, call.id)):
                await self._spawn(ctx, call, parent, resume=True)
                return
            self._record(run_id, ToolCallFailed(
                call_id=call.id, tool=call.name, error="interrupted while running; not re-run automatically "
                "(it may have partly happened): check its effect, then ask again", error_type="Interrupted"),
                parent=parent)
            return
        tool = self._allowed_tools(run_id, state)[call.name]
        args = call.arguments or {}
        # resolved again now (a decision must still be about this), unless it was resolved a moment ago for a call
        # that runs at once, with nothing decided in between, and that either only reads or acts through the file
        # tools (which act only on those targets: effects.bound); a foreign tool that writes is resolved again,
        # since the call before it may have changed the folder
        reuse = resolved is not None and (tool.resolver is not None or tool.risk == Risk.READ_ONLY)
        effect = resolved if reuse and resolved is not None else self._effect(tool, args)
        risk, risk_reason = call_risk(tool, args, effect)
        denial = self.authorizer.check_tool(call.name, args, shell_like=tool.shell_like)
        fact: Denial | None = None  # the folder says no (a missing file...): an error, unless policy refuses first
        if denial is None:
            denial = self._check_paths(tool, args, effect)
            if denial is not None and denial.rule in FILE_FACTS:
                fact, denial = denial, None
        if denial is None and call.name not in CONTROL_TOOLS:
            denial = self.authorizer.check_step(self._tree_sums(ctx.root_id, state)[3])
            if denial is not None:
                ctx.stop.append(denial.reason)
        gate = clearance(state, call.id, call.name, args, effect, risk, grants=self._grants(ctx, state),
                         risk_reason=risk_reason)
        if denial is None and not gate.ok:
            denial = Denial(rule=gate.rule or "approval.missing", reason=gate.reason)
        if denial is not None:
            by_grant = denial.rule == "grant.reject"
            self._deny(run_id, call.id, call.name, denial, effect.shown(tool.target(args)), parent,
                       grant_id=gate.grant_id if by_grant else None,
                       digest=call_digest(call.name, args, effect) if by_grant else None,
                       effect=effect if effect.targets else None)
            return
        if fact is not None:  # nothing ran: a failed call the model sees, listed with errors, not with denials
            self._record(run_id, ToolCallFailed(call_id=call.id, tool=call.name, error=fact.reason,
                                                error_type=fact.rule), parent=parent)
            return
        if call.name in CONTROL_TOOLS:
            await self._control(ctx, call, args, parent)
            return
        started = self._record(run_id, ToolCallStarted(
            call_id=call.id, tool=call.name, arguments=args, risk=risk, target=effect.shown(tool.target(args)),
            reason=gate.reason, approval_event_id=gate.approval_event_id, plan_id=gate.plan_id,
            digest=call_digest(call.name, args, effect), risk_reason=risk_reason, grant_id=gate.grant_id,
            effect=effect if effect.targets else None), parent=parent)
        assert isinstance(started.payload, ToolCallStarted)  # `_record` returns the event of the payload it wrote
        t0 = time.perf_counter()
        retries = 0
        try:
            call_info = CallInfo(run_id=run_id, call_id=call.id, tool=call.name, digest=started.payload.digest or "",
                                 approval_event_id=gate.approval_event_id, plan_id=gate.plan_id,
                                 grant_id=gate.grant_id, reason=gate.reason)
            with bound(effect, call_info):  # the file tools act on exactly these targets, or fail as changed
                result, retries = await self._call_tool(tool, args)
        except Exception as exc:
            self._record(run_id, ToolCallFailed(
                call_id=call.id, tool=call.name, error=error_text(exc), error_type=type(exc).__name__,
                duration_ms=ms_since(t0), retry_count=getattr(exc, "retry_count", 0)), parent=started.id)
            return
        result = jsonable(result)
        self._record(run_id, ToolCallCompleted(call_id=call.id, tool=call.name, duration_ms=ms_since(t0), result=result,
                                               preview=result_preview(result), retry_count=retries), parent=started.id)


    def _check_paths(self, tool: Tool, args: dict[str, Any], effect: Effect) -> Denial | None:
        """The file scope for every path argument of a tool that has no scope check of its own (user tools)."""
        if tool.has_own_authorization:
            try:
                tool.authorize(args)
            except ToolError as exc:
                return Denial(rule=f"scope.{getattr(exc, 'rule', 'denied')}", reason=str(exc))
            return None
        if tool.name in CONTROL_TOOLS:
            return None
        # the call's own effect, resolved as the decision saw it (relative paths from the tool's folder: an MCP
        # server's cwd), so the scope refuses exactly what the card would have shown
        for t in effect.targets:
            if t.problem is not None:
                return Denial(rule=f"scope.{t.rule or 'denied'}", reason=f"argument {t.arg!r}: {t.problem}")
        return None


    def _allowed_tools(self, run_id: str, state: RunState | None = None) -> dict[str, Tool]:
        """The tools this run may call (`state`: the run's state, when the caller has just read it)."""
        names = (state if state is not None else self.store.run_state(run_id)).options.get("tools")
        tools = {**self.tools, **CONTROL_TOOLS}
        if names is not None:
            tools = {n: t for n, t in tools.items() if n in names or (n in CONTROL_TOOLS and n != "spawn_agent")}
        return tools

    def _schemas(self, run_id: str, state: RunState | None = None) -> list[dict[str, Any]]:
        return [t.schema() for t in self._allowed_tools(run_id, state).values() if t.offered]


def _purpose(state: RunState) -> str:
    """The model's own words about its plan, or "" (the views phrase the question from the steps, not this)."""
    for m in reversed(state.turns):
        if m["role"] == "assistant":
            return (m.get("content") or "").strip()[:500]
    return ""
