"""A call's effect: what it will touch, resolved before anything decides, and held to when it runs.

The model writes arguments; a decision must be about what the call will *do*. So before risk, grants, approvals,
recorded decisions, the plan card or the record look at a call, it is resolved to an `Effect`:

- `targets`: every file or folder it reads, lists, writes, creates or deletes, as written by the model and as
  resolved inside the notebook's folder. Links inside the folder are **followed** (one rule everywhere): a
  `write_file out/latest.md` where `out/latest.md -> ../data.csv` is a write of `data.csv`, a `create_file
  report.md` where `report.md` is a dangling link to `helpers.py` is the creation of `helpers.py`. Links that lead
  outside, loops and everything else the scope refuses stay unresolved (`problem`), and the call is refused.
- `runs_later`: why the call makes code that something runs later (runs_later.py), which raises it to
  WRITE_HIGH_RISK, keeps every grant off it, and is shown on the card.

Decisions bind to the resolved effect: a plan step's digest covers the tool, the arguments and the resolved
targets (`digest`), so an approval, a grant's paths, a recorded decision or a pinned replay grant answers a call
only while it still touches what was decided. Right before a file tool acts, the targets are resolved again
(`bound`): a path that now leads elsewhere (a link swapped between the decision and the act) makes the call
fail as "changed", and the file tools then act through directory descriptors on exactly the resolved path.
"""

from __future__ import annotations

import contextlib
import hashlib
import posixpath
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from nbagent.events.effect import WRITING, Effect, Op, Target
from nbagent.events.envelope import canonical_json
from nbagent.events.levels import Risk
from nbagent.gate.runs_later import defines_mcp, mcp_reason, runs_later

if TYPE_CHECKING:
    from nbagent.scope.rules import ScopeGuard
    from nbagent.tools.base import Tool

__all__ = ["CallInfo", "Effect", "Target", "bound", "call_digest", "current_call", "current_effect", "digest_matches",
           "resolve"]

# ------------------------------------------------------------------------------------------------ digests


def call_digest(tool: str, arguments: Any, effect: Effect | None = None) -> str:
    """What a decision covers: the tool, its arguments (canonical JSON) and, given, the resolved effect.

    Arguments that cannot be serialised (NaN, nesting too deep) get a digest that matches nothing, so a decision
    can never cover them by accident: the gate fails closed.
    """

    body: dict[str, Any] = {"tool": tool, "arguments": arguments}
    if effect is not None:
        body["effect"] = effect.key()
    try:
        text = canonical_json(body)
    except (ValueError, TypeError, RecursionError):
        return "unmatchable:" + uuid.uuid4().hex
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def digest_matches(recorded: str | None, tool: str, arguments: Any, effect: Effect) -> bool:
    """Whether a recorded digest covers this call with this effect now.

    A digest recorded before effects were bound covers the arguments only: it still answers the call when no
    link redirects it (then the arguments say everything the effect would), never when one does."""
    if not recorded:
        return False
    if recorded == call_digest(tool, arguments, effect):
        return True
    # (never for a call that writes a cell: no digest of its arguments alone was ever recorded for one)
    return not effect.redirected and effect.cell is None and recorded == call_digest(tool, arguments)


# ------------------------------------------------------------------------------------------------ resolving


def resolve_target(guard: ScopeGuard, op: Op, written: Any, arg: str = "", base: str | None = None) -> Target:
    """One path resolved inside the guard's folder, links followed (the scope's own containment). `base`: the
    folder a relative path is relative to, when it is not the notebook's (an MCP server's cwd)."""
    from nbagent.scope.rules import ScopeDenied

    text = written if isinstance(written, str) else str(written)
    value: Any = written
    if base and isinstance(written, str) and written and not posixpath.isabs(written) and not written.startswith("~"):
        value = posixpath.join(base, written)
    try:
        _, _, rel = guard.contain(value)
    except ScopeDenied as exc:  # refused: the call will be too; the log keeps a bounded mention of what was asked
        shown = text if len(text) <= 300 else f"{text[:300]}… ({len(text):,} characters)"
        return Target(op=op, written=shown, arg=arg, problem=exc.reason, rule=exc.rule)
    return Target(op=op, written=text, path=rel, arg=arg)


Resolver = Callable[[dict[str, Any]], list[Target]]


def resolve(tool: Tool, arguments: dict[str, Any], guard: ScopeGuard | None, *,
            sources: Iterable[str] = ()) -> Effect:
    """The effect of calling `tool` with `arguments`: its targets (the tool's own resolver, else every path
    argument against `guard`), and why it makes code that runs later, if it does."""
    own: Resolver | None = getattr(tool, "resolver", None)
    # an MCP tool reads its paths by its server's rules (mcp/rules.py), against the runtime's guard
    foreign: Callable[[ScopeGuard, dict[str, Any]], list[Target]] | None = getattr(tool, "read_paths", None)
    if own is not None:
        targets = own(arguments)
    elif guard is not None and foreign is not None:
        targets = foreign(guard, arguments)
    elif guard is not None:
        op: Op = "read" if tool.risk == Risk.READ_ONLY else "write"
        base = getattr(tool, "base", None)
        targets = [resolve_target(guard, op, value, where, base) for where, value in tool.paths(arguments)]
    else:
        targets = []
    unknown = False
    if guard is not None and tool.risk != Risk.READ_ONLY:
        for t in targets:
            if t.op in WRITING and t.path:
                t.aliases, complete = guard.other_names(t.path)
                unknown = unknown or not complete
    why = _runs_later(tool, arguments, targets, sources, guard=guard if own is None else None)
    if why is None and unknown and any(t.op in WRITING and t.path for t in targets):
        why = ("the folder has too many entries to find every link that leads to this file, so whether something "
               "runs it later cannot be told (links.py)")
    cell: Callable[[dict[str, Any]], str | None] | None = getattr(tool, "cell_of", None)
    unseen = getattr(tool, "effect_unknown", None) if tool.risk != Risk.READ_ONLY else None
    # a call that runs code its target chose (an MCP git tool on a repository whose config names a command git
    # runs: mcp/rules.py `runs_code`), read-only tool or not; not looked at for a call refused anyway
    chosen: Callable[[dict[str, Any]], str | None] | None = getattr(tool, "runs_code", None)
    if chosen is not None and guard is not None and not any(t.problem is not None for t in targets):
        unseen = chosen(arguments) or unseen
    return Effect(targets=targets, runs_later=why, cell=cell(arguments) if cell is not None else None,
                  unknown=unseen)


def _file_like(value: str) -> bool:
    """A short one-line token that could be a file's name (`sitecustomize.py`, `hooks/pre-commit`, `Makefile`),
    not prose: the registry then says whether it names code."""
    return 0 < len(value) <= 255 and "://" not in value and not any(c.isspace() or ord(c) < 32 for c in value)


MAX_MENTIONED = 2_000  # names a foreign tool's call may mention that are looked at (a reply may hold millions)


def _runs_later(tool: Tool, arguments: dict[str, Any], targets: list[Target], sources: Iterable[str], *,
                guard: ScopeGuard | None = None) -> str | None:
    """Why the call makes code that runs later, or None. `guard` is given for a tool nbagent does not know (an MCP
    server's, your own): it may take a file's name under any key (`items=[{"name": "sitecustomize.py"}]`), so every
    name it mentions counts for the risk (never for refusals), with that name's other names through links; and MCP
    servers defined in its text count whatever it names."""
    if tool.risk == Risk.READ_ONLY:
        return None  # a tool that only reads makes nothing runnable (reading pandas.py changes nothing)
    if getattr(tool, "runs_later", None):
        return str(tool.runs_later)
    sources = list(sources)
    writing = [t for t in targets if t.op in WRITING]
    names = {n: "" for t in writing for n in (t.written, t.path) if n}
    for t in writing:
        for alias in t.aliases:
            names.setdefault(alias, f"{t.path} is also {alias} (a link leads there): ")
    if guard is not None:
        mentioned = [v for v in _strings(arguments) if _file_like(v)]
        if len(mentioned) > MAX_MENTIONED:
            return (f"the call names over {MAX_MENTIONED:,} files; whether any of them is code that runs later is "
                    "not looked at one by one")
        for v in mentioned:
            names.setdefault(v, "")
            resolved = resolve_target(guard, "write", v)
            for alias in guard.other_names(resolved.path)[0] if resolved.path else []:
                names.setdefault(alias, f"{v} is also {alias} (a link leads there): ")
    # each name once, then the call's text once (not each name against each text: a reply naming thousands of
    # paths beside a large content stays linear)
    for name, via in names.items():
        why = runs_later(name, sources=sources)
        if why is not None:
            return via + why
    made = next((t for t in writing if t.op != "delete"), None)
    if (made is not None or guard is not None) and any(defines_mcp(text) for text in _strings(arguments)):
        return mcp_reason(made.path or made.written if made is not None else "what it writes")
    return None


def _strings(value: Any) -> Iterator[str]:
    """Every string in a value, at any depth (arguments nest as deep as the model sends them)."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            todo.extend(reversed(list(item.values())))
        elif isinstance(item, list | tuple):
            todo.extend(reversed(item))


def risk_of(tool: Tool, effect: Effect) -> tuple[Risk, str | None]:
    """The call's risk: the tool's own, raised to WRITE_HIGH_RISK when it makes code that runs later, when what
    it changes is unknown and no one's own configuration set its risk (`risk_set`: an MCP entry's `risk`), or when
    the call runs code its target chose (whatever the tool's risk or anyone's setting)."""
    if effect.runs_later is not None and tool.risk != Risk.READ_ONLY:
        return Risk.WRITE_HIGH_RISK, effect.runs_later
    if effect.unknown is not None and tool.risk != Risk.READ_ONLY and not getattr(tool, "risk_set", False):
        return Risk.WRITE_HIGH_RISK, effect.unknown
    if effect.unknown is not None and effect.unknown != getattr(tool, "effect_unknown", None):
        # the call's own, not the tool's (code its target chose runs: `runs_code`): no annotation or setting lowers it
        return Risk.WRITE_HIGH_RISK, effect.unknown
    return tool.risk, None


# ------------------------------------------------------------------------------------------------ acting


class CallInfo(BaseModel):
    """The call a tool is running for, and what let it run: a tool that leaves something behind (a notebook cell)
    records its provenance from this (`current_call`)."""

    run_id: str
    call_id: str
    tool: str
    digest: str
    approval_event_id: str | None = None
    plan_id: str | None = None
    grant_id: str | None = None
    reason: str = ""


_CALL: ContextVar[CallInfo | None] = ContextVar("nbagent_current_call", default=None)
_EFFECT: ContextVar[Effect | None] = ContextVar("nbagent_current_effect", default=None)


def current_call() -> CallInfo | None:
    """The call being run in this context (None outside a tool call)."""
    return _CALL.get()


def current_effect() -> Effect | None:
    """The effect decided for the call being run (an MCP tool sends the paths it resolved to: mcp/rules.py)."""
    return _EFFECT.get()


@contextlib.contextmanager
def bound(effect: Effect, call: CallInfo | None = None) -> Iterator[None]:
    """While a tool runs: each path the file scope checks must resolve where the decision saw it resolve
    (scope.ScopeGuard.check compares), or the call fails as changed; `current_call()` names the call. Context
    variables follow the call into the worker thread a sync tool runs in."""
    from nbagent.scope.rules import BOUND

    table: dict[tuple[str, str], str] = {(t.op, t.written): t.path for t in effect.targets if t.path}
    token = BOUND.set(table)
    call_token = _CALL.set(call)
    effect_token = _EFFECT.set(effect)
    try:
        yield
    finally:
        _EFFECT.reset(effect_token)
        _CALL.reset(call_token)
        BOUND.reset(token)
