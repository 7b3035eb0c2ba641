"""What may run without asking, and what may not run at all.

Two independent checks, both outside the model's control:

1. The approval table (docs/architecture.md, "The approval table"): autonomy x risk -> run or propose. A
   proposal waits for a `Decider`. The table is data (`APPROVAL_TABLE`) so tests and docs read the same thing
   the loop uses; `needs_decision` applies it to a call (the gate, approval.clearance, and the grants ask it).
2. Authorization, before every execution, approved or not: tool deny-list and allow-list, dangerous argument
   patterns, and budgets. A denial is an `authorization_denied` event and an error result the model sees.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nbagent.events.ids import iso
from nbagent.events.levels import Autonomy, Risk
from nbagent.tools.control import CONTROL_TOOLS

Action = Literal["run", "propose"]

APPROVAL_TABLE: dict[Autonomy, dict[Risk, Action]] = {
    Autonomy.L0: {Risk.READ_ONLY: "propose", Risk.WRITE_LOW_RISK: "propose", Risk.WRITE_HIGH_RISK: "propose"},
    Autonomy.L1: {Risk.READ_ONLY: "run", Risk.WRITE_LOW_RISK: "propose", Risk.WRITE_HIGH_RISK: "propose"},
    Autonomy.L2: {Risk.READ_ONLY: "run", Risk.WRITE_LOW_RISK: "run", Risk.WRITE_HIGH_RISK: "propose"},
    Autonomy.L3: {Risk.READ_ONLY: "run", Risk.WRITE_LOW_RISK: "run", Risk.WRITE_HIGH_RISK: "run"},
}


def action_for(autonomy: Autonomy | str, risk: Risk | str) -> Action:
    return APPROVAL_TABLE[Autonomy(autonomy)][Risk(risk)]


def needs_decision(autonomy: Autonomy | str, tool: str, risk: Risk) -> bool:
    """True when the autonomy table says to ask before a call of this risk (control tools never ask). The gate
    (approval.clearance) and the grants (grants.for_plan) both ask this, so it lives below them."""
    return tool not in CONTROL_TOOLS and action_for(autonomy, risk) == "propose"


# Argument names that hold a path, in any spelling (`Path`, `file-name`, `FileName`): checked for traversal whatever
# the tool, before anything else. Every other path (found by type, schema, name or value: `Tool.paths`) goes
# through the file scope, which refuses a path that climbs out as `scope.outside`.
PATH_ARGS = frozenset({"path", "paths", "file", "filename", "dir", "directory", "folder", "src", "dst", "source",
                       "destination", "target", "glob", "patternpath", "cwd"})
_SPELLING = re.compile(r"[\s_\-.]+")
_TRAVERSAL = re.compile(r"(^|[\\/])\.\.([\\/]|$)")
_SHELL_META = re.compile(r"[;&|`$<>\n]|\$\(")
SHELL_LIKE_NAMES = frozenset({"shell", "bash", "sh", "run_shell", "exec", "execute", "system", "terminal", "cmd"})


class Budget(BaseModel):
    """Limits per run tree (a run and every sub-agent it spawns, at any depth: steps, tokens, cost, model calls)
    and per store (model calls in the last hour). None: no limit. A sub-agent spends its root's budget, so
    spawning cannot multiply it."""

    model_config = ConfigDict(extra="forbid")
    max_steps: int | None = 50
    max_tokens: int | None = None
    max_cost: float | None = None
    max_calls_per_hour: int | None = None
    max_model_calls: int | None = 100
    max_tool_calls_per_turn: int = 20


class AuthPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    deny_tools: set[str] = Field(default_factory=set)
    allow_tools: set[str] | None = None  # None: every registered tool
    check_traversal: bool = True
    shell_like_tools: set[str] = Field(default_factory=set)
    dangerous_patterns: list[str] = Field(default_factory=list)  # extra regexes, matched against every string arg


class TreeUsage(BaseModel):
    """What a run tree has spent: the totals budgets are checked against, and each run's share."""

    model_calls: int = 0
    tokens: int = 0
    cost: float = 0.0
    cost_known: bool = True
    tool_steps: int = 0
    runs: dict[str, dict[str, Any]] = Field(default_factory=dict)  # run id -> its own model_calls, tokens, ...

    @classmethod
    def of(cls, states: Any) -> TreeUsage:
        """Sum over the states of a run and its descendants (RunState objects)."""
        total = cls()
        for s in states:
            share = {"model_calls": s.all_model_calls, "tokens": s.tokens, "cost": s.cost, "tool_steps":
                     s.tool_calls_started}
            total.runs[s.run_id or ""] = share
            total.model_calls += s.all_model_calls
            total.tokens += s.tokens
            total.cost += s.cost
            total.cost_known = total.cost_known and s.cost_known
            total.tool_steps += s.tool_calls_started
        return total


class Denial(BaseModel):
    rule: str
    reason: str


def _strings(value: Any, key: str = "") -> list[tuple[str, str]]:
    """Every string inside an argument value, with the argument name it came from."""
    if isinstance(value, str):
        return [(key, value)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(v, key or str(k))]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v, key)]
    return []


class Authorizer:
    def __init__(self, policy: AuthPolicy | None = None, budget: Budget | None = None) -> None:
        self.policy = policy or AuthPolicy()
        self.budget = budget or Budget()
        self._patterns = [re.compile(p) for p in self.policy.dangerous_patterns]

    def check_tool(self, name: str, arguments: dict[str, Any], *, shell_like: bool = False) -> Denial | None:
        p = self.policy
        if name in p.deny_tools:
            return Denial(rule="deny_tools", reason=f"the tool {name!r} is on the deny-list")
        if p.allow_tools is not None and name not in p.allow_tools:
            return Denial(rule="allow_tools", reason=f"the tool {name!r} is not on the allow-list")
        strings = _strings(arguments)
        if p.check_traversal:
            for key, value in strings:
                if _SPELLING.sub("", key).lower() in PATH_ARGS and _TRAVERSAL.search(value):
                    return Denial(rule="path_traversal", reason=f"argument {key!r} climbs out with '..': {value!r}")
                if "\x00" in value:
                    return Denial(rule="nul_byte", reason=f"argument {key!r} contains a NUL byte")
        if shell_like or name in p.shell_like_tools or name in SHELL_LIKE_NAMES:
            for key, value in strings:
                m = _SHELL_META.search(value)
                if m:
                    return Denial(rule="shell_metacharacters",
                                  reason=f"argument {key!r} of a shell-like tool contains {m.group(0)!r}")
        for pattern in self._patterns:
            for key, value in strings:
                if pattern.search(value):
                    return Denial(rule="dangerous_pattern",
                                  reason=f"argument {key!r} matches the blocked pattern {pattern.pattern!r}")
        return None

    def check_step(self, steps_done: int) -> Denial | None:
        b = self.budget
        if b.max_steps is not None and steps_done >= b.max_steps:
            return Denial(rule="budget.max_steps", reason=f"step budget exhausted: {steps_done} of {b.max_steps} "
                                                          "tool steps used (this run and its sub-agents)")
        return None

    def check_model_call(self, *, tokens: int, cost: float, model_calls: int, calls_last_hour: int) -> Denial | None:
        b = self.budget
        if b.max_tokens is not None and tokens >= b.max_tokens:
            return Denial(rule="budget.max_tokens", reason=f"token budget exhausted: {tokens} of {b.max_tokens} used "
                                                           "(this run and its sub-agents)")
        if b.max_cost is not None and cost >= b.max_cost:
            return Denial(rule="budget.max_cost", reason=f"cost budget exhausted: ${cost:.4f} of ${b.max_cost:.4f} "
                                                          "(this run and its sub-agents)")
        if b.max_model_calls is not None and model_calls >= b.max_model_calls:
            return Denial(rule="budget.max_model_calls",
                          reason=f"model-call limit reached: {model_calls} calls by this run and "
                                 "its sub-agents")
        if b.max_calls_per_hour is not None and calls_last_hour >= b.max_calls_per_hour:
            return Denial(rule="budget.max_calls_per_hour",
                          reason=f"rate limit: {calls_last_hour} model calls in the last hour "
                                 f"(limit {b.max_calls_per_hour})")
        return None

    def check_next_call(self, *, tokens: int, cost: float, estimate: dict[str, Any]) -> Denial | None:
        """A budget the next call would pass, judged before it is made: its input tokens, its input's cost."""
        b = self.budget
        n = int(estimate.get("input_tokens") or 0)
        if b.max_tokens is not None and tokens + n > b.max_tokens:
            return Denial(rule="budget.max_tokens", reason=f"token budget: the next model call would send {n:,} "
                          f"tokens, and {tokens:,} of {b.max_tokens:,} are used (this run and its sub-agents)")
        next_cost = estimate.get("cost")
        if b.max_cost is not None and isinstance(next_cost, int | float) and cost + next_cost > b.max_cost:
            return Denial(rule="budget.max_cost", reason=f"cost budget: the next model call would cost about "
                          f"${next_cost:.4f} for its {n:,} input tokens, and ${cost:.4f} of ${b.max_cost:.4f} is "
                          "spent (this run and its sub-agents)")
        return None


def hour_ago_iso() -> str:
    return iso(datetime.fromtimestamp(time.time() - 3600, UTC))
