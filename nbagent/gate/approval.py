"""Nothing changes without a person's yes: which calls need a decision, who each call is, what a yes covers.

The guarantee, checked by `clearance` right before any tool runs, whatever happened before:

    A tool call runs only if its risk, computed by nbagent from the tool and these very arguments
    (`call_risk`), is one the run's recorded autonomy runs without asking (`policy.APPROVAL_TABLE`), or the
    run's log holds a `plan_approved` for a plan with a step that has this call's nbagent id, the same tool,
    the same arguments (`call_digest`) and a risk at least as high as the call's risk now.

Every `tool_call_started` event carries the reason that made it true (`reason`, and `approval_event_id` when a
person's or a policy's yes let it through), so an auditor can check each executed call against the log;
`tests/test_approval_property.py` does that over thousands of generated hostile runs.

Identity belongs to nbagent (the ids are made in `ids.py`, below the gate: the run state needs them too).
The i-th tool call of a run's k-th model reply is `nb{k}_{i}`, written into that
reply's `llm_called` event (`call_ids`) and used everywhere after: plans, decisions, results, and the
conversation sent back to the model. The ids a model chooses stay in the recorded raw response for the audit
and are used for nothing else, so a reused, duplicated, missing or colliding id is ordinary input. The ids are
positional, not random, so a replayed run asks the model exactly what the recorded run asked.

Logs written before this rule have no `call_ids`: there the model's id is kept where it is unique in the run
(so old decisions and results still match), and a reused or missing id gets a fresh one that no earlier
decision refers to, so the call needs a decision of its own.

A person may also answer ahead, with a grant (`grants.py`): then a call with no approved plan runs when a grant
in force covers it (same tool, paths matching its patterns, a risk no higher than the one approved, no code
planted), and the `tool_call_started` event names the grant (`grant_id`, and the reason "allowed by grant G,
given ... by ..."). A matching reject grant refuses the call (`authorization_denied`, rule `grant.reject`).

Control tools (answer, done, ask_human, spawn_agent) steer the run and touch nothing; a spawned run's own
calls go through this same gate in the child run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from nbagent.events.ids import assign_call_ids, identify
from nbagent.events.levels import Autonomy, Risk
from nbagent.gate.effects import Effect, call_digest, digest_matches, risk_of
from nbagent.gate.grants import Grant, answering
from nbagent.gate.policy import needs_decision  # the autonomy table: which calls need a decision
from nbagent.tools.control import CONTROL_TOOLS

if TYPE_CHECKING:
    from nbagent.events.state import RunState
    from nbagent.tools.base import Tool

# the one list of control tools is tools/control.py's; their names, for the gate
CONTROL_TOOL_NAMES = frozenset(CONTROL_TOOLS)


# ------------------------------------------------------------------------------------------------ risk


def call_risk(tool: Tool, arguments: dict[str, Any], effect: Effect) -> tuple[Risk, str | None]:
    """The risk of this call: the tool's declared risk, raised when the call makes code that runs later."""
    if tool.name in CONTROL_TOOL_NAMES:
        return Risk.READ_ONLY, None
    return risk_of(tool, effect)


# ------------------------------------------------------------------------------------------------ the gate


class Clearance(BaseModel):
    """Whether a call may run now, and the reason the log will give."""

    ok: bool
    reason: str
    plan_id: str | None = None
    approval_event_id: str | None = None
    rule: str | None = None  # when refused: the rule named in the `authorization_denied` event
    grant_id: str | None = None  # when a grant answered (allowed, or refused with rule grant.reject)


def clearance(state: RunState, call_id: str, tool: str, arguments: dict[str, Any], effect: Effect, risk: Risk, *,
              grants: Iterable[Grant] = (), risk_reason: str | None = None) -> Clearance:
    """May this call run now? Looks only at nbagent's ids and what the call does, never at the model's ids.

    `effect` is the call resolved now (effects.resolve): an approval covers it only if the plan's step was
    decided on this very effect. `grants` are those in force for this run (`grants.applicable`): when no approved
    plan lists this exact call, a matching reject grant refuses it and an allow grant that covers it (same tool,
    its resolved paths, at most the risk approved, no code planted) lets it run.
    """
    autonomy = state.autonomy
    if not needs_decision(autonomy, tool, risk):
        return Clearance(ok=True, reason=f"{risk.value} runs without asking at autonomy {Autonomy(autonomy).value}")
    by_plan = _plan_clearance(state, call_id, tool, arguments, effect, risk)
    if by_plan.ok:
        return by_plan
    grant = answering(grants, tool, arguments, effect, risk, risk_reason)
    if grant is None:
        return by_plan
    if grant.effect == "reject":
        return Clearance(ok=False, rule="grant.reject", grant_id=grant.grant_id, reason=grant.describe())
    return Clearance(ok=True, grant_id=grant.grant_id, reason=grant.describe())


def _plan_clearance(state: RunState, call_id: str, tool: str, arguments: dict[str, Any], effect: Effect, risk: Risk
                    ) -> Clearance:
    autonomy = state.autonomy
    plan_id = state.plan_of.get(call_id)
    plan = state.plans.get(plan_id or "")
    if plan is None or plan.status != "approved" or plan.approval_event_id is None:
        return Clearance(ok=False, rule="approval.missing",
                         reason=f"{tool} is {risk.value}, which autonomy {Autonomy(autonomy).value} runs only after "
                                "approval, and no approval covers this call")
    step = next((s for s in plan.steps if s.call_id == call_id), None)
    # steps recorded before digests existed are compared by their recorded tool and arguments, the same thing
    covered = None if step is None else (step.digest or call_digest(step.tool, step.arguments))
    if step is None or step.tool != tool or not digest_matches(covered, tool, arguments, effect):
        if step is not None and step.tool == tool and call_digest(step.tool, step.arguments) == call_digest(
                tool, arguments):
            return Clearance(ok=False, rule="approval.changed", plan_id=plan.plan_id,
                             reason=f"{tool} now touches {_where(effect)}, not what plan {plan.plan_id} was approved "
                                    f"for{_was(step)} (a link changed meanwhile); nothing was done")
        return Clearance(ok=False, rule="approval.mismatch", plan_id=plan.plan_id,
                         reason=f"the approved plan {plan.plan_id} does not contain this exact call ({tool} with "
                                "these arguments)")
    if step.asks is False:
        # the card listed it, but the decision was not about it: a grant (a yes, or a person's standing no) or the
        # autonomy answered it when the plan was made, and it is answered the same way now, not by this approval
        return Clearance(ok=False, rule="approval.missing", plan_id=plan.plan_id,
                         reason=f"{tool} was not among the calls plan {plan.plan_id} asked about (a grant or the "
                                "autonomy answered it), and nothing answers it now")
    if Risk(step.risk).rank < risk.rank:
        return Clearance(ok=False, rule="approval.risk", plan_id=plan.plan_id,
                         reason=f"plan {plan.plan_id} was approved as {Risk(step.risk).value}; this call is now "
                                f"{risk.value}")
    return Clearance(ok=True, plan_id=plan.plan_id, approval_event_id=plan.approval_event_id,
                     reason=f"approved by {plan.approved_by} (plan {plan.plan_id})")


def _where(effect: Effect) -> str:
    return ", ".join(f"{t.op} {t.path or t.written}" for t in effect.targets) or "something else"


def _was(step: Any) -> str:
    effect = getattr(step, "effect", None)
    return f" ({_where(effect)})" if isinstance(effect, Effect) and effect.targets else ""


__all__ = ["CONTROL_TOOL_NAMES", "Clearance", "assign_call_ids", "call_risk", "clearance", "identify",
           "needs_decision"]
