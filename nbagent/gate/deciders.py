"""Who answers a run's questions: approvals of plans, and `ask_human`.

The runtime asks a `Decider`; the decider answers, or returns None, which means "nobody can answer now": the
run is left `waiting` in the store and can be answered and resumed later, in this process or another
(`Agent.resume`). Deciders:

- `PolicyDecider`: headless rules (approve all, none, or up to a risk level; a fixed answer for questions);
- `RecordedDecider`: the decisions recorded in an earlier run, in order (replay);
- `InteractiveDecider`: waits for a decision delivered from elsewhere (a widget click on another thread, a
  later cell, any code) and matches it to the request by id, so a stale or repeated click does nothing;
- `PauseDecider`: never answers; every question leaves the run waiting for `Agent.resume`.
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from nbagent.events.levels import Risk
from nbagent.events.model import PlanStep
from nbagent.gate.grants import GrantSpec, GrantTerms

if TYPE_CHECKING:
    from nbagent.events.envelope import EventBase


class ApprovalRequest(BaseModel):
    run_id: str
    request_id: str
    plan_id: str
    purpose: str = ""
    steps: list[PlanStep] = Field(default_factory=list)
    max_risk: Risk = Risk.READ_ONLY


class QuestionRequest(BaseModel):
    run_id: str
    request_id: str
    question: str


class Verdict(BaseModel):
    action: Literal["approve", "deny", "refine"]
    text: str = ""  # the reason of a deny, the feedback of a refine
    by: str = "user"
    # a yes or no that also answers later calls of the same kind (grants.py); None: this plan only
    grant: GrantSpec | None = None
    # replay: the very grants the recorded decision gave, given again for the replayed run only
    replay_grants: list[GrantTerms] = Field(default_factory=list)

    @classmethod
    def approve(cls, by: str = "user", grant: GrantSpec | None = None) -> Verdict:
        return cls(action="approve", by=by, grant=grant)

    @classmethod
    def deny(cls, reason: str = "", by: str = "user", grant: GrantSpec | None = None) -> Verdict:
        return cls(action="deny", text=reason, by=by, grant=grant)

    @classmethod
    def refine(cls, feedback: str, by: str = "user") -> Verdict:
        if not feedback.strip():
            raise ValueError("refine needs feedback: say what the model should do differently")
        return cls(action="refine", text=feedback, by=by)


class Answer(BaseModel):
    text: str
    by: str = "user"


class Decider(ABC):
    # whether the session's grants answer for this decider's runs: yes where a person decides; a headless
    # policy and a replay bring their own answers (grants.py)
    session_grants: bool = True
    # grants a replayed run starts with: those the recording ran under that were given outside it
    standing_grants: list[GrantTerms] = []

    @abstractmethod
    async def decide(self, request: ApprovalRequest) -> Verdict | None: ...

    @abstractmethod
    async def answer(self, request: QuestionRequest) -> Answer | None: ...


class PauseDecider(Decider):
    async def decide(self, request: ApprovalRequest) -> Verdict | None:
        return None

    async def answer(self, request: QuestionRequest) -> Answer | None:
        return None


ApprovePolicy = Literal["all", "none", "low"]


class PolicyDecider(Decider):
    """Headless approvals: 'all', 'none', 'low' (up to WRITE_LOW_RISK), or any Risk as the highest approved."""

    session_grants = False

    def __init__(self, approve: ApprovePolicy | Risk | str = "none", *, answer: str | None = None) -> None:
        if approve not in ("all", "none", "low"):
            approve = Risk(approve)
        self.policy = approve
        self.fixed_answer = answer

    @property
    def _by(self) -> str:
        return f"policy:{self.policy}"

    async def decide(self, request: ApprovalRequest) -> Verdict:
        if self.policy == "all":
            return Verdict.approve(by=self._by)
        if self.policy == "none":
            return Verdict.deny("denied by the headless policy (approve=none)", by=self._by)
        limit = Risk.WRITE_LOW_RISK if self.policy == "low" else Risk(self.policy)
        if request.max_risk.rank <= limit.rank:
            return Verdict.approve(by=self._by)
        return Verdict.deny(f"denied by the headless policy: {request.max_risk} is above {limit}", by=self._by)

    async def answer(self, request: QuestionRequest) -> Answer | None:
        return Answer(text=self.fixed_answer, by=self._by) if self.fixed_answer is not None else None


class RecordedDecisionMissing(Exception):
    """The recording has no decision for what the replayed run asks: the replay stops, running none of it."""


class _Recorded(BaseModel):
    """One recorded decision and the calls it was about (its plan's steps; empty for an answer)."""

    verdict: Verdict | None = None
    answer: Answer | None = None
    question: str = ""
    steps: list[PlanStep] = Field(default_factory=list)
    used: bool = False


def _same_call(recorded: PlanStep, now: PlanStep) -> bool:
    """Whether a recorded step is this very call: the same tool, arguments and resolved effect (a step recorded
    before effects were bound: the same arguments, with no link redirecting the call now)."""
    from nbagent.gate.effects import Effect, digest_matches

    if recorded.tool != now.tool or Risk(recorded.risk).rank < Risk(now.risk).rank:
        return False  # (a yes to a data write is no yes to the same call once it writes code: attack b3)
    if recorded.effect is not None:
        return bool(recorded.digest) and recorded.digest == now.digest
    legacy = recorded.digest or _args_digest(recorded)
    return digest_matches(legacy, now.tool, now.arguments, now.effect or Effect())


def _args_digest(step: PlanStep) -> str:
    from nbagent.gate.effects import call_digest

    return call_digest(step.tool, step.arguments)


def _covers(recorded: list[PlanStep], asking: list[PlanStep]) -> bool:
    """Every call the request asks about is one the recorded decision was about: a call its plan asked about (a
    call its card listed as "not asked", answered by a grant or the autonomy, was never decided: attack b11); each
    recorded call answers one."""
    left = [r for r in recorded if r.asks is not False]
    for step in asking:
        match = next((r for r in left if _same_call(r, step)), None)
        if match is None:
            return False
        left.remove(match)
    return True


class RecordedDecider(Decider):
    """Answers a replayed (or `--approve recorded`) run with the decisions recorded in earlier runs (a run and
    its children), each only for the calls it was given for.

    A recorded decision is about calls, not about a position: a request is answered by the first unused recorded
    decision whose plan listed every call the request asks about (same tool, arguments and resolved effect:
    `effects.call_digest`), and a question by the first unused answer to the same question. A request no recorded
    decision covers (an edited script proposes another call, a replay at another autonomy asks about what the
    recording did not, a link now leads elsewhere) stops the replay as diverged before any of it runs."""

    session_grants = False

    def __init__(self, decisions: list[_Recorded], source: str = "recording",
                 standing: list[GrantTerms] | None = None) -> None:
        self._decisions = list(decisions)
        self.source = source
        self.standing_grants = list(standing or [])

    @classmethod
    def from_events(cls, events: Sequence[EventBase], source: str) -> RecordedDecider:
        """The recorded decisions, each with the calls of its plan and the grants it gave; and the grants given
        elsewhere (the session's) that let recorded calls run, which the replay starts with, for its own run only."""
        by = f"recorded:{source}"
        # a recorded grant is given again pinned: for the replayed run only, answering just the calls it answered
        # in the recording (their digests), so a grant revoked or expired there never answers more here
        answered: dict[str, list[str]] = {}
        for e in events:
            gid = getattr(e.payload, "grant_id", None) if e.type in ("tool_call_started",
                                                                     "authorization_denied") else None
            digest = getattr(e.payload, "digest", None)
            if gid and digest:
                answered.setdefault(gid, []).append(digest)
        given: dict[tuple[str | None, str], list[GrantTerms]] = {}
        standing: list[GrantTerms] = []
        runs = {e.run_id for e in events if e.run_id}
        for e in events:
            g: Any = e.payload  # (each payload is read by its event's `type`)
            if e.type != "grant_given" or g.grant_id not in answered:
                continue
            terms = GrantTerms.model_validate(g.model_dump(mode="json")).model_copy(
                update={"scope": "run", "pinned": True, "digests": answered[g.grant_id]})
            if g.run_id in runs and g.plan_id:
                given.setdefault((g.run_id, g.plan_id), []).append(terms)
            else:
                standing.append(terms)
        plans: dict[tuple[str | None, str], list[PlanStep]] = {}
        questions: dict[tuple[str | None, str], str] = {}
        decisions: list[_Recorded] = []
        for e in events:
            p: Any = e.payload
            if e.type == "plan_proposed":
                plans[(e.run_id, p.plan_id)] = list(p.steps)
            elif e.type == "human_input_requested":
                questions[(e.run_id, p.request_id)] = p.question
            elif e.type in ("plan_approved", "plan_rejected", "plan_refined"):
                steps = plans.get((e.run_id, p.plan_id), [])
                grants = given.get((e.run_id, p.plan_id), [])
                verdict = (Verdict(action="approve", by=by, replay_grants=grants) if e.type == "plan_approved" else
                           Verdict(action="deny", text=p.reason, by=by, replay_grants=grants)
                           if e.type == "plan_rejected" else Verdict.refine(p.feedback, by=by))
                decisions.append(_Recorded(verdict=verdict, steps=steps))
            elif e.type == "human_input_received":
                decisions.append(_Recorded(answer=Answer(text=p.answer, by=by),
                                           question=questions.get((e.run_id, p.request_id), "")))
        return cls(decisions, source, standing)

    async def decide(self, request: ApprovalRequest) -> Verdict:
        asking = [s for s in request.steps if s.asks] if any(s.asks is not None for s in request.steps) \
            else list(request.steps)
        for d in self._decisions:
            if not d.used and d.verdict is not None and d.steps and _covers(d.steps, asking):
                d.used = True
                return d.verdict
        calls = ", ".join(f"{s.tool} {s.target or ''}".strip() for s in asking) or "no calls"
        raise RecordedDecisionMissing(
            f"replay diverged: the recording {self.source} holds no decision on these calls ({calls}); nothing of "
            f"plan {request.plan_id} was run")

    async def answer(self, request: QuestionRequest) -> Answer:
        for d in self._decisions:
            if not d.used and d.answer is not None and d.question == request.question:
                d.used = True
                return d.answer
        raise RecordedDecisionMissing(
            f"replay diverged: the recording {self.source} holds no answer to {request.question!r}")


class InteractiveDecider(Decider):
    """Waits for `resolve(request_id, ...)` from any thread.

    The wait is sliced (`poll` seconds) so a kernel interrupt or a task cancel ends it promptly, and resolution
    goes through `loop.call_soon_threadsafe`, because widget clicks arrive on the kernel's comm handling, not
    necessarily in the loop's thread. A `timeout` turns into None: the run is left waiting.
    """

    def __init__(self, *, timeout: float | None = None, poll: float = 0.25) -> None:
        self.timeout = timeout
        self.poll = poll
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[object]]] = {}
        self.requests: dict[str, ApprovalRequest | QuestionRequest] = {}
        self._early: dict[str, Verdict | Answer] = {}  # decisions that arrived before the wait began
        self._answered: set[str] = set()

    async def decide(self, request: ApprovalRequest) -> Verdict | None:
        result = await self._wait(request.request_id, request)
        assert result is None or isinstance(result, Verdict)
        return result

    async def answer(self, request: QuestionRequest) -> Answer | None:
        result = await self._wait(request.request_id, request)
        assert result is None or isinstance(result, Answer)
        return result

    def waiting(self) -> list[ApprovalRequest | QuestionRequest]:
        with self._lock:
            return [self.requests[r] for r in self._pending]

    def resolve(self, request_id: str, value: Verdict | Answer, *, early: bool = False) -> bool:
        """Deliver a decision; False if nothing waits for this request id (stale, duplicate, or wrong kind).

        `early=True` is for a caller that knows the request is pending in the run's log (the run view): if the
        decider is not waiting on it yet, the decision is kept and answers the wait as soon as it starts.
        """
        with self._lock:
            entry = self._pending.get(request_id)
            request = self.requests.get(request_id)
            if entry is None or request is None:
                if early and request_id not in self._early and request_id not in self._answered:
                    self._early[request_id] = value
                    return True
                return False
            if isinstance(request, ApprovalRequest) != isinstance(value, Verdict):
                return False
            loop, future = entry
            del self._pending[request_id]
            self._answered.add(request_id)

        def settle() -> None:
            if not future.done():
                future.set_result(value)

        loop.call_soon_threadsafe(settle)
        return True

    async def _wait(self, request_id: str, request: ApprovalRequest | QuestionRequest) -> object | None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[object] = loop.create_future()
        with self._lock:
            early = self._early.pop(request_id, None)
            if early is not None and isinstance(request, ApprovalRequest) == isinstance(early, Verdict):
                self._answered.add(request_id)
                return early
            self._pending[request_id] = (loop, future)
            self.requests[request_id] = request
        deadline = None if self.timeout is None else loop.time() + self.timeout
        try:
            while not future.done():
                if deadline is not None and loop.time() >= deadline:
                    return None
                await asyncio.wait({future}, timeout=self.poll)
            return future.result()
        finally:
            with self._lock:
                self._pending.pop(request_id, None)
