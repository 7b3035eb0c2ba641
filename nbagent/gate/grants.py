"""Grants: a person's yes (or no) that answers later questions of the same kind, recorded where an auditor sees it.

A grant is given with a decision on a plan ("approve write_file to report.md for the rest of this run") and is a
`grant_given` event in the log; `grant_revoked` ends it early. Both live in the session's own chain (events with
no run id), so every run of the session, every kernel and the CLI read the same grants, and `nbagent verify`
checks them with the rest of the log. A grant holds:

- `effect`: `allow` answers yes, `reject` answers no;
- `scope`: `run` (the run tree it was given in: the cell's run and its sub-agents, until it ends) or `session`
  (every run of the notebook's agent session until it expires: 8 hours unless said otherwise); "this call only" is
  a plain approval, not a grant;
- what it covers: one `tool`; `paths`, glob patterns every path the call names must match, whole, from the
  notebook's folder (`*` stays inside a folder, `**` crosses folders, `data/` is everything under `data`; by
  default the exact paths the person saw); `arguments`, glob patterns for other arguments; and, for `allow`,
  `max_risk`, the risk of what the person saw. A call that names no path is granted only with argument patterns
  (a grant for "any code" is never given by a click). A replay's grants are `pinned`: they answer only the very
  calls (tool and arguments, as many times) the recorded grant answered.

Grants only answer questions: a call the autonomy table runs without asking, or refuses, is not touched. An allow
grant never covers a higher risk than the one approved, another tool, or a write Python would run (`risk.py`):
those always ask. A decision on a plan covers only the calls it asked about: a call a grant answered when the plan
was made stays answered by the grant (a standing no holds). Headless policies
(`--approve all|none|low`) see no session grants: what they do stays what their flag says.

What a grant covers and how its patterns match a call is grant_terms.py, and whether the log backs a grant
(`vouched`, `unbacked`, its seal) is grant_backing.py (both re-exported here); this module holds the grants as the
log gives them: which are in force for a run (`InForce`), listing and revoking them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from nbagent.events.levels import Risk
from nbagent.gate.grant_backing import (  # whether the log backs a grant (grant_backing.py), re-exported here
    MAX_GRANT_DAYS,
    MAX_GRANT_SECONDS,
    UNSOUND_RUN,
    UNSOUND_SESSION,
    duplicated,
    grant_seal,
    sealed_here,
    unbacked,
    vouched,
)
from nbagent.gate.grant_terms import (  # what a grant covers (grant_terms.py), re-exported here
    GrantError,
    GrantSpec,
    GrantTerms,
    covers,
    covers_text,
    exact,
    for_plan,
    normal_path,
    path_matches,
    step_effect,
    terms_for,
    whole_folder,
)

if TYPE_CHECKING:
    from nbagent.events.envelope import EventBase
    from nbagent.gate.effects import Effect
    from nbagent.store import Store

SESSION_HOURS = 8.0  # a session grant's default lifetime: a working day, not forever


class Grant(GrantTerms):
    """A grant as the log holds it, with its state at the time it is read."""

    grant_id: str
    by: str = "user"
    given_at: str
    expires_at: str | None = None
    run_id: str | None = None  # the run whose decision gave it
    root_run_id: str | None = None  # the run tree a run-scoped grant covers
    plan_id: str | None = None
    session_id: str = ""
    revoked_at: str | None = None
    revoked_by: str | None = None
    revoked_reason: str = ""  # the reason given with the revoke (shown wherever the revocation is)
    seal: str | None = None  # grant_seal under the giver's key (sealed_here)

    def active(self, now: datetime) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or now < datetime.fromisoformat(self.expires_at)

    def status(self, now: datetime, run_ended: bool = False) -> str:
        if self.revoked_at is not None:
            return f"revoked {_hm(self.revoked_at)} by {self.revoked_by}" + _why(self.revoked_reason)
        if self.expires_at is not None and now >= datetime.fromisoformat(self.expires_at):
            return f"expired {_hm(self.expires_at)}"
        if self.scope == "run" and run_ended:
            return "ended with its run"
        return "active" + (f" until {_hm(self.expires_at)}" if self.expires_at else "")

    def covers_text(self) -> str:
        return covers_text(self)

    def describe(self) -> str:
        """The line a step shows: "allowed by grant G, given 14:02 by user (for this run: ...)"."""
        verb = "allowed" if self.effect == "allow" else "rejected"
        reach = "for this run" if self.scope == "run" else "for the session"
        return (f"{verb} by grant {self.grant_id}, given {_hm(self.given_at)} by {self.by} "
                f"({reach}: {self.covers_text()})")


def now() -> datetime:
    """The clock grants expire by (tests move it)."""
    return datetime.now(UTC)


def _hm(ts: str) -> str:
    """`14:02` today; `2125-03-01 14:02` any other day (a grant's end far away must not read as "today")."""
    try:
        when = datetime.fromisoformat(ts)
    except ValueError:
        return ts
    today = now().astimezone(when.tzinfo).date() if when.tzinfo else datetime.now().date()
    return when.strftime("%H:%M") if when.date() == today else when.strftime("%Y-%m-%d %H:%M")


def _active(grant: Grant, at: datetime) -> bool:
    """`Grant.active`, with an expiry that is not a date (or has no time zone) ending the grant, never raising."""
    try:
        return grant.active(at)
    except (TypeError, ValueError):
        return False


# ------------------------------------------------------------------------------------------------ matching


def allows(grant: Grant, name: str, arguments: Mapping[str, Any], effect: Effect, risk: Risk,
           risk_reason: str | None) -> bool:
    """An allow grant lets this call run: the terms cover it, at or below the approved risk, and it plants no
    code (a write something runs later always asks)."""
    return (grant.effect == "allow" and risk_reason is None and effect.runs_later is None
            and risk.rank <= grant.max_risk.rank and covers(grant, name, arguments, effect))


def rejects(grant: Grant, name: str, arguments: Mapping[str, Any], effect: Effect) -> bool:
    return grant.effect == "reject" and covers(grant, name, arguments, effect)


# ------------------------------------------------------------------------------------------------ giving


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|hr|d|day)s?\s*$", re.IGNORECASE)
_UNIT = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400, "day": 86400}


def parse_duration(text: str) -> float:
    """`30m`, `2h`, `1d` -> seconds, at most a year (MAX_GRANT_DAYS); a clear error otherwise."""
    m = _DURATION.match(text or "")
    if not m or float(m.group(1)) <= 0:
        raise GrantError(f"--expires {text!r}: give a duration such as 30m, 2h or 1d")
    seconds = float(m.group(1)) * _UNIT[m.group(2).lower()]
    if not seconds <= MAX_GRANT_SECONDS:  # (also inf, from a number too long for a float)
        raise GrantError(f"--expires {text!r}: a grant lasts at most {MAX_GRANT_DAYS}d (a year); give a shorter "
                         "duration, and revoke the grant when it is no longer needed")
    return seconds


def expiry(spec: GrantSpec, given: datetime) -> str | None:
    """When a grant given at `given` ends (None: with its run). A lifetime that is not above 0 and at most a year is
    a GrantError (never an OverflowError from a date past the calendar), so the grant is not given."""
    seconds = spec.expires_in if spec.expires_in is not None else (
        SESSION_HOURS * 3600 if spec.scope == "session" else None)
    if seconds is None:
        return None
    if not 0 < seconds <= MAX_GRANT_SECONDS:  # (nan fails this too)
        raise GrantError(f"a grant lasts more than 0 s and at most {MAX_GRANT_DAYS} days, not {seconds!r} s; the "
                         "grant was not given: give a shorter duration")
    try:
        return (given + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")
    except (OverflowError, ValueError) as exc:
        raise GrantError(f"a grant given at {given} for {seconds:.0f} s would end after the last date a clock can "
                         "hold; the grant was not given") from exc


# ------------------------------------------------------------------------------------------------ reading


def _why(reason: str) -> str:
    """': "not needed any more"' after a revocation, or nothing when none was given (one line, clipped)."""
    text = " ".join(str(reason or "").split())
    return f': "{text[:197] + "…" if len(text) > 200 else text}"' if text else ""


def from_events(events: Iterable[EventBase]) -> dict[str, Grant]:
    """Grants by id, folded from `grant_given` / `grant_revoked` events (any order of chains).

    Grant events are immutable: the first `grant_given` of an id is the grant, and a later one with the same id (a
    copy appended to extend or widen it) is ignored (`duplicated` names them for `nbagent verify`). A revoke or the
    expiry ends a grant; nothing extends it."""
    grants: dict[str, Grant] = {}
    revoked: dict[str, tuple[str, str, str]] = {}
    for e in events:
        p: Any = e.payload
        if e.type == "grant_given":
            if p.grant_id in grants:
                continue
            grants[p.grant_id] = Grant(
                grant_id=p.grant_id, effect=p.effect, scope=p.scope, tool=p.tool, paths=p.paths,
                arguments=p.arguments, max_risk=p.max_risk, by=p.by, given_at=e.ts, expires_at=p.expires_at,
                run_id=p.run_id, root_run_id=p.root_run_id, plan_id=p.plan_id, session_id=e.session_id,
                pinned=bool(getattr(p, "pinned", False)), digests=list(getattr(p, "digests", None) or []),
                seal=getattr(p, "seal", None))
        elif e.type == "grant_revoked":
            revoked.setdefault(p.grant_id, (e.ts, p.by, str(getattr(p, "reason", "") or "")))
    for gid, (ts, by, reason) in revoked.items():
        if gid in grants:
            grants[gid] = grants[gid].model_copy(update={"revoked_at": ts, "revoked_by": by,
                                                         "revoked_reason": reason})
    return grants


def session_grants(store: Store, session_id: str) -> dict[str, Grant]:
    """The grants of one session: its own chain holds them, so this reads only that (a few events)."""
    return from_events(store.session_events(session_id))


def applicable(grants: Iterable[Grant], *, root_run_id: str, session_id: str, session_wide: bool,
               at: datetime) -> list[Grant]:
    """The grants that answer for a run now: its run tree's, and the session's when `session_wide` (a person
    may be asked in this run; a headless policy or a replay brings its own answers)."""
    out = []
    for g in grants:
        if not _active(g, at) or g.session_id != session_id:
            continue
        if g.root_run_id == root_run_id or (g.scope == "session" and session_wide):
            out.append(g)
    return out


class InForce:
    """The grants in force for one run (tree): the session's grants that the log backs (`vouched`: a hand-made
    one is inert), re-read only when the session's chain grew (a grant or a revoke), then those that apply to the
    run now (`applicable`), a replay's pinned ones less the recorded calls they already answered (`unspent`)."""

    def __init__(self) -> None:
        self.seen = -1  # events of the session's chain when `grants` was read (grants change rarely)
        self.grants: dict[str, Grant] = {}

    def now(self, store: Store, *, session_id: str, root_run_id: str, session_wide: bool) -> list[Grant]:
        """The grants in force for the run tree `root_run_id` of `session_id` at this moment (`session_wide`: the
        decider lets session grants answer, which a replay's does not)."""
        if store.session_event_count(session_id) != self.seen:  # (the chain's events are read only when it grew)
            events = store.session_events(session_id)
            self.grants = {g.grant_id: g for g in from_events(events).values() if vouched(store, g)}
            self.seen = len(events)
        found = applicable(self.grants.values(), root_run_id=root_run_id, session_id=session_id,
                           session_wide=session_wide, at=now())
        return unspent(store, found) if any(g.pinned for g in found) else found


def unspent(store: Store, found: list[Grant]) -> list[Grant]:
    """A replay's pinned grants, less the recorded calls they already answered in this replay."""
    pinned = {g.grant_id for g in found if g.pinned}
    used: dict[str, list[str]] = {}
    for e in store.query_events(types=["tool_call_started", "authorization_denied"]):
        gid = getattr(e.payload, "grant_id", None)
        if gid in pinned:
            used.setdefault(gid, []).append(getattr(e.payload, "digest", None) or "")
    out = []
    for g in found:
        if g.pinned:
            left = list(g.digests)
            for d in used.get(g.grant_id, []):
                if d in left:
                    left.remove(d)
            if not left:
                continue
            g = g.model_copy(update={"digests": left})
        out.append(g)
    return out


def answering(grants: Iterable[Grant], name: str, arguments: Mapping[str, Any], effect: Effect, risk: Risk,
              risk_reason: str | None) -> Grant | None:
    """The grant that answers this call, as resolved (`effect`): a matching rejection first (a no is never
    overruled by a yes), then an allow grant that covers it; None when the person must be asked."""
    grants = list(grants)
    for g in grants:
        if rejects(g, name, arguments, effect):
            return g
    for g in grants:
        if allows(g, name, arguments, effect, risk, risk_reason):
            return g
    return None


def all_grants(store: Store) -> list[Grant]:
    """Every grant of every session in the store, oldest first."""
    grants = from_events(store.query_events(types=["grant_given", "grant_revoked"]))
    return sorted(grants.values(), key=lambda g: g.given_at)


def find(store: Store, grant_id: str) -> Grant:
    """A grant by id or unique prefix (as run ids are found)."""
    grants = all_grants(store)
    exact_hit = [g for g in grants if g.grant_id == grant_id]
    hits = exact_hit or [g for g in grants if grant_id and g.grant_id.startswith(grant_id.upper())]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise GrantError(f"no grant {grant_id!r} in {store.path}; `%agent grants` lists them")
    raise GrantError(f"{grant_id!r} is the start of {len(hits)} grants; give more of the id")


def _uses(store: Store) -> dict[str, int]:
    uses: dict[str, int] = {}
    for e in store.query_events(types=["tool_call_started", "authorization_denied"]):
        gid = getattr(e.payload, "grant_id", None)
        if gid:
            uses[gid] = uses.get(gid, 0) + 1
    return uses


def _run_ended(store: Store, run_id: str | None) -> bool:
    """A run that can no longer go on (an interrupted or waiting one can be resumed: its grants still answer)."""
    if not run_id:
        return False
    try:
        return store.run_state(run_id).status.value in ("completed", "completed_with_errors", "failed", "superseded")
    except Exception:  # a run the log no longer has whole: treat its grants as ended
        return True


def grants_table(store: Store, *, everything: bool = False) -> str:
    """The grants as a table: id, what it answers, reach, what it covers, given when and by whom, state, uses."""
    at = now()
    rows = []
    uses = _uses(store)
    for g in all_grants(store):
        try:
            state = g.status(at, run_ended=_run_ended(store, g.root_run_id))
        except (TypeError, ValueError):
            state = f"unreadable expiry {g.expires_at!r}"
        if state.startswith("active") and not vouched(store, g):
            state = "ignored: no decision backs it (see nbagent verify)"
        if not everything and not state.startswith("active"):
            continue
        rows.append((g.grant_id, g.effect, "run " + (g.root_run_id or "")[:12] if g.scope == "run" else "session",
                     covers_text(g), f"{_hm(g.given_at)} by {g.by}", state, str(uses.get(g.grant_id, 0))))
    if not rows:
        hidden = "" if everything else " in force (--all shows ended ones too)"
        return f"no grants{hidden} in {store.path.name}"
    head = ("GRANT", "EFFECT", "FOR", "COVERS", "GIVEN", "STATE", "USED")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows])


def revoke(store: Store, grant_id: str, *, by: str = "user", reason: str = "") -> str:
    """End a grant now (a `grant_revoked` event); a grant already ended is an error and nothing is recorded."""
    from nbagent.events.model import GrantRevoked

    g = find(store, grant_id)
    at = now()
    if g.revoked_at is not None:
        raise GrantError(f"grant {g.grant_id} was already revoked at {_hm(g.revoked_at)} by {g.revoked_by}"
                         f"{_why(g.revoked_reason)}; nothing changed")
    if not _active(g, at):
        raise GrantError(f"grant {g.grant_id} expired at {_hm(g.expires_at or '')}; nothing to revoke")
    if g.scope == "run" and _run_ended(store, g.root_run_id):
        raise GrantError(f"grant {g.grant_id} ended with its run {g.root_run_id}; nothing to revoke")
    store.append(GrantRevoked(grant_id=g.grant_id, by=by, reason=reason), session_id=g.session_id)
    return (f"revoked grant {g.grant_id} ({covers_text(g)}, {'for its run' if g.scope == 'run' else 'for the session'})"
            ": later calls it covered will ask again")



__all__ = ["MAX_GRANT_DAYS", "MAX_GRANT_SECONDS", "SESSION_HOURS", "UNSOUND_RUN", "UNSOUND_SESSION", "Grant",
           "GrantError", "GrantSpec", "GrantTerms", "InForce", "all_grants", "allows", "answering", "applicable",
           "covers", "covers_text", "duplicated", "exact", "expiry", "find", "for_plan", "from_events", "grant_seal",
           "grants_table", "normal_path", "now", "parse_duration", "path_matches", "rejects", "revoke", "sealed_here",
           "session_grants", "step_effect", "terms_for", "unbacked", "unspent", "vouched", "whole_folder"]
