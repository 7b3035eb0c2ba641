"""What a grant covers: its terms (tool, path and argument patterns, the highest risk), how they match a call, and
the terms a decision on a plan gives. Below grants.py (the grants given, in force, backed by the log), which
re-exports these names; nothing here reads the log or the clock.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field
from wcmatch import glob as wcglob

from nbagent.events.envelope import canonical_json
from nbagent.events.levels import Risk
from nbagent.gate.policy import needs_decision

if TYPE_CHECKING:
    from nbagent.events.model import PlanStep
    from nbagent.gate.effects import Effect
    from nbagent.tools.base import Tool


class GrantError(ValueError):
    """A grant that cannot be given or revoked as asked; the message says why, and nothing was recorded."""


class GrantSpec(BaseModel):
    """What a person asks for with a decision: how far it reaches, and (optionally) what it covers."""

    scope: Literal["run", "session"]
    paths: list[str] | None = None  # None: exactly the paths the plan's calls name
    arguments: dict[str, str] = Field(default_factory=dict)
    expires_in: float | None = None  # seconds; None: the scope's default (a run's end; SESSION_HOURS)


class GrantTerms(BaseModel):
    """What one grant covers (the payload of `grant_given`, less who and when)."""

    effect: Literal["allow", "reject"]
    scope: Literal["run", "session"]
    tool: str
    paths: list[str] = Field(default_factory=list)
    arguments: dict[str, str] = Field(default_factory=dict)
    max_risk: Risk = Risk.READ_ONLY
    # a replay's grant: it answers only these calls (`approval.call_digest`), each as often as it is listed
    pinned: bool = False
    digests: list[str] = Field(default_factory=list)


def covers_text(terms: GrantTerms) -> str:
    """`write_file path=report.md up to WRITE_LOW_RISK`: what a grant covers, in one line."""
    parts = [terms.tool]
    parts += [f"path={p}" for p in terms.paths] or (["(no paths)"] if terms.effect == "allow" else [])
    parts += [f"{k}={v}" for k, v in sorted(terms.arguments.items())]
    if terms.effect == "allow":
        parts.append(f"up to {terms.max_risk.value}")
    if terms.pinned:
        parts.append(f"(as recorded: {len(terms.digests)} call(s))")
    return " ".join(parts)


def normal_path(value: str) -> str:
    """A path as the model wrote it, in the one form patterns are matched against."""
    text = str(value).replace("\\", "/")
    norm = posixpath.normpath(text) if text else text
    return norm[2:] if norm.startswith("./") else norm


_GLOB = wcglob.GLOBSTAR | wcglob.DOTGLOB | wcglob.FORCEUNIX


def exact(path: str) -> str:
    """A pattern matching exactly this path (what a person saw on the card)."""
    return wcglob.escape(normal_path(path), unix=True)


def whole_folder(path: str) -> bool:
    """The folder itself (`""`, `.`, `/`): no grant is ever given or matched for it."""
    return normal_path(path) in ("", ".", "/")


@lru_cache(maxsize=512)
def _pattern(pattern: str) -> str:
    return pattern + "**" if pattern.endswith("/") else pattern  # `data/`: everything under data


def path_matches(pattern: str, value: str) -> bool:
    """True when `pattern` covers the whole path `value`, from the notebook's folder.

    Never by a folder's name alone: `out` covers the file `out`, not `out/x` (write `out/` or `out/**` for that).
    The folder itself, a path that climbs out (`..`) or an absolute one is covered only by its own exact pattern,
    and an absolute pattern covers nothing else: a wildcard given for the folder never reaches past it.
    """
    norm = normal_path(value)
    if whole_folder(norm) or not pattern:
        return False
    if norm.startswith("/") or norm == ".." or norm.startswith("../") or pattern.startswith(("/", "../")):
        return pattern == exact(norm)
    return wcglob.globmatch(norm, _pattern(pattern), flags=_GLOB)


def _argument_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return canonical_json(value)
    except (TypeError, ValueError, RecursionError):
        return "\0unmatchable"


def covers(terms: GrantTerms, name: str, arguments: Mapping[str, Any], effect: Effect) -> bool:
    """True when the grant's terms cover this call: its tool, its arguments and what it resolves to (risk is the
    caller's business).

    Every path the call touches, resolved (effects.py: a link inside the folder is followed to its target), must
    match one of the grant's path patterns, so a grant for `out/**` never covers a write through `out/latest.md`
    that lands on `data.csv`, nor a grant for `report.md` a call that also names `secret.md`; a call that touches
    no path is covered only through argument patterns; a replay's pinned grant covers only the recorded calls it
    lists, each with the effect it had then.
    """
    if name != terms.tool:
        return False
    if terms.pinned:
        from nbagent.gate.effects import digest_matches

        return any(digest_matches(d, name, dict(arguments), effect) for d in terms.digests)
    values = effect.paths()
    if not values and not terms.arguments:
        return False  # nothing pins what it covers: "any arguments" is never granted
    if not all(any(path_matches(p, v) for p in terms.paths) for v in values):
        return False
    for key, pattern in terms.arguments.items():
        if key not in arguments or not fnmatch.fnmatchcase(_argument_text(arguments[key]), pattern):
            return False
    return True


def terms_for(steps: Iterable[PlanStep], spec: GrantSpec, effect: Literal["allow", "reject"],
              tools: Mapping[str, Tool]) -> tuple[list[GrantTerms], list[str]]:
    """The grants a decision on these steps gives, and the steps it cannot cover (said to the person).

    One grant per tool and set of patterns, at the highest risk among the steps it was given for. With patterns
    from the person, a step is granted only if the patterns cover it; patterns that cover no step are an error
    (`GrantError`), so a typo never records a grant that was meant for something.
    """
    groups: dict[str, GrantTerms] = {}
    left_out: list[str] = []
    for step in steps:
        label = f"{step.tool} {step.target or ''}".strip()
        if effect == "allow" and step.risk_reason:
            left_out.append(f"{label}: {step.risk_reason}; it is approved this once only")
            continue
        done = step_effect(step, tools)
        named = done.paths()
        if any(whole_folder(v) for v in named):
            left_out.append(f"{label}: it names the whole folder; it is decided this once only")
            continue
        if not named and not spec.arguments:
            left_out.append(f"{label}: it names no path, so a grant would cover any arguments; it is decided this "
                            "once only (a grant for it needs --arg patterns)")
            continue
        if spec.paths is None:
            paths = sorted({exact(v) for v in named})
        else:
            paths = list(dict.fromkeys(p.strip() for p in spec.paths if p.strip()))
        candidate = GrantTerms(effect=effect, scope=spec.scope, tool=step.tool, paths=paths,
                               arguments=dict(spec.arguments),
                               max_risk=step.risk if effect == "allow" else Risk.READ_ONLY)
        if not covers(candidate, step.tool, step.arguments, done):
            left_out.append(f"{label}: not matched by the patterns given")
            continue
        key = canonical_json(candidate.model_dump(mode="json", exclude={"max_risk"}))
        held = groups.get(key)
        if held is None or held.max_risk.rank < candidate.max_risk.rank:
            groups[key] = candidate
    if not groups:
        wanted = " ".join([*(f"path={p}" for p in spec.paths or []),
                           *(f"{k}={v}" for k, v in spec.arguments.items())]) or "the plan's own calls"
        seen = ", ".join(f"{s.tool} {s.target or ''}".strip() for s in steps) or "no calls"
        why = f" ({'; '.join(left_out)})" if left_out else ""
        raise GrantError(f"the grant ({wanted}) covers none of the calls it would be given for ({seen}){why}; "
                         "nothing was decided: fix the pattern, or decide without a grant")
    return list(groups.values()), left_out


def for_plan(steps: Iterable[PlanStep], autonomy: Any, spec: GrantSpec, effect: Literal["allow", "reject"],
             tools: Mapping[str, Tool]) -> tuple[list[GrantTerms], list[str]]:
    """`terms_for` over the plan's steps that needed the decision (a grant never reaches what ran anyway)."""
    return terms_for([s for s in steps if needs_decision(autonomy, s.tool, s.risk)], spec, effect, tools)


def step_effect(step: PlanStep, tools: Mapping[str, Tool]) -> Effect:
    """A plan step's effect as it was resolved when planned; for a step from an older log, its path arguments
    as written (the tool's own reading of them)."""
    if step.effect is not None:
        return step.effect
    from nbagent.gate.effects import Effect, Target

    tool = tools.get(step.tool)
    found = tool.paths(step.arguments) if tool is not None else []
    return Effect(targets=[Target(op="write", written=v, path=normal_path(v), arg=w) for w, v in found])


__all__ = ["GrantError", "GrantSpec", "GrantTerms", "covers", "covers_text", "exact", "for_plan", "normal_path",
           "path_matches", "step_effect", "terms_for", "whole_folder"]
