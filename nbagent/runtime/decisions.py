"""Decisions and grants: asking the decider, recording a verdict with the grants it gives, and the grants in
force for a run (read from the session's chain, only those the log backs: grants.vouched).
"""

from __future__ import annotations

from nbagent.events.ids import new_id
from nbagent.events.levels import Risk
from nbagent.events.model import (
    EventBase,
    ExecutionStarted,
    GrantGiven,
    HumanInputReceived,
    Payload,
    PlanApproved,
    PlanRefined,
    PlanRejected,
)
from nbagent.events.state import RunState
from nbagent.gate import grants as grants_
from nbagent.gate.deciders import (
    ApprovalRequest,
    QuestionRequest,
    Verdict,
)
from nbagent.runtime.context import AgentBase, RunContext
from nbagent.store.seal import KeyFileError


class Decisions(AgentBase):
    """Decisions and grants (a part of `Agent`)."""

    async def _settle(self, ctx: RunContext, state: RunState) -> bool:
        """Ask the decider about the pending request; True once a decision was recorded."""
        pending = state.pending
        assert pending is not None
        if pending.kind == "approval":
            plan = state.plans.get(pending.plan_id or "")
            request = ApprovalRequest(run_id=ctx.run_id, request_id=pending.request_id,
                                      plan_id=pending.plan_id or "", purpose=pending.purpose, steps=pending.steps,
                                      max_risk=plan.max_risk if plan else Risk.WRITE_HIGH_RISK)
            verdict = await self.decider.decide(request)
            if verdict is None:
                return False
            try:
                self._record_verdict(ctx.run_id, request.plan_id, request.request_id, pending.event_id, verdict)
            except grants_.GrantError as exc:  # patterns that cover nothing: the decision stands, without the grant
                self._record_verdict(ctx.run_id, request.plan_id, request.request_id, pending.event_id,
                                     verdict.model_copy(update={"grant": None}),
                                     grant_error=f"the grant was not given: {exc}")
            return True
        question = QuestionRequest(run_id=ctx.run_id, request_id=pending.request_id, question=pending.question or "")
        answer = await self.decider.answer(question)
        if answer is None:
            return False
        self._record(ctx.run_id, HumanInputReceived(request_id=pending.request_id, answer=answer.text,
                                                    call_id=pending.call_id, by=answer.by), parent=pending.event_id)
        return True

    def _record_verdict(self, run_id: str, plan_id: str, request_id: str, parent: str, verdict: Verdict,
                        grant_error: str | None = None) -> EventBase:
        """Record a decision, and the grants it gives (checked first: a grant that cannot be given is a
        `GrantError` and nothing is recorded). A grant that cannot be sealed (this user's key cannot be read or
        made) is not given, and the decision is recorded without it, saying why (`grant_error`): the calls it
        approves run, and the next calls of their kind are asked about again."""
        terms = self.grant_terms(run_id, plan_id, verdict)
        # everything the decision records is worked out before anything is written: a decision that fails records
        # nothing (an expiry past what a clock can hold, patterns that cover nothing)
        expires = None
        if terms and verdict.grant is not None:
            try:
                expires = grants_.expiry(verdict.grant, grants_.now())
            except (OverflowError, ValueError) as exc:
                raise grants_.GrantError(f"the grant's expiry cannot be used ({exc}); nothing was decided") from None
        ids = [new_id() for _ in terms]
        given = [{"grant_id": g, "scope": t.scope, "effect": t.effect, "covers": grants_.covers_text(t),
                  "expires_at": expires} for g, t in zip(ids, terms, strict=True)]
        root = self._root_of(run_id) if terms else run_id
        # each grant made and sealed before the decision is written (a key that cannot be used fails it here)
        try:
            sealed = [self._grant_event(run_id, root, plan_id, request_id, t, by=verdict.by, expires_at=expires,
                                        grant_id=g) for g, t in zip(ids, terms, strict=True)]
        except (KeyFileError, OSError) as exc:  # the decision is kept: only what it would answer ahead is lost
            sealed, given = [], []
            grant_error = f"the grant was not given (it could not be sealed): {exc}"
        payload: Payload
        if verdict.action == "approve":
            payload = PlanApproved(plan_id=plan_id, request_id=request_id, by=verdict.by, grants=given,
                                   grant_error=grant_error)
        elif verdict.action == "deny":
            payload = PlanRejected(plan_id=plan_id, request_id=request_id, reason=verdict.text, by=verdict.by,
                                   grants=given, grant_error=grant_error)
        else:
            payload = PlanRefined(plan_id=plan_id, request_id=request_id, feedback=verdict.text, by=verdict.by)
        event = self._record(run_id, payload, parent=parent)
        session_id = self.store.run_state(run_id).session_id or ""
        for grant in sealed:
            self.store.append(grant, session_id=session_id)
        if verdict.action == "approve":
            self._record(run_id, ExecutionStarted(plan_id=plan_id), parent=event.id)
        return event

    def grant_terms(self, run_id: str, plan_id: str, verdict: Verdict) -> list[grants_.GrantTerms]:
        """The grants a verdict on this plan gives: those asked for (over the plan's steps that needed the
        decision), or in a replay the recorded ones, for the run only."""
        if verdict.action == "refine":
            return []
        if verdict.replay_grants:
            return [t.model_copy(update={"scope": "run"}) for t in verdict.replay_grants]
        if verdict.grant is None:
            return []
        state = self.store.run_state(run_id)
        plan = state.plans.get(plan_id)
        terms, _ = grants_.for_plan(plan.steps if plan else [], state.autonomy, verdict.grant,
                                    "allow" if verdict.action == "approve" else "reject", self._allowed_tools(run_id))
        return terms

    def _give_grant(self, run_id: str, root: str, plan_id: str | None, request_id: str | None,
                    terms: grants_.GrantTerms, *, by: str, expires_at: str | None, grant_id: str | None = None
                    ) -> EventBase:
        given = self._grant_event(run_id, root, plan_id, request_id, terms, by=by, expires_at=expires_at,
                                  grant_id=grant_id)
        return self.store.append(given, session_id=self.store.run_state(run_id).session_id or "")

    def _grant_event(self, run_id: str, root: str, plan_id: str | None, request_id: str | None,
                     terms: grants_.GrantTerms, *, by: str, expires_at: str | None, grant_id: str | None = None
                     ) -> GrantGiven:
        """A grant as the log will hold it, sealed with the giver's key for this store (grants.grant_seal)."""
        given = GrantGiven(
            grant_id=grant_id or new_id(), effect=terms.effect, scope=terms.scope, tool=terms.tool, paths=terms.paths,
            arguments=terms.arguments, max_risk=terms.max_risk, by=by, expires_at=expires_at, run_id=run_id,
            root_run_id=root, plan_id=plan_id, request_id=request_id, pinned=terms.pinned, digests=terms.digests)
        given.seal = grants_.grant_seal(given.model_dump(mode="json"), self.store.run_state(run_id).session_id or "",
                                        self.store.path)
        return given

    def _grants(self, ctx: RunContext, state: RunState) -> list[grants_.Grant]:
        """The grants in force for this run now (grants.InForce: re-read when the session's chain grew)."""
        return ctx.grants.now(self.store, session_id=state.session_id or "", root_run_id=ctx.root_id,
                              session_wide=self.decider.session_grants)
