"""Whether the log backs a grant: the seal of the user who gave it, the decision (or a replay's start) that gave it
with these very terms, and the chains those stand in, verifying. Apart from grants.py (the grants as the log gives
them, in force for a run), which re-exports these names: this is what `nbagent verify` and the runtime ask before
a grant answers anything, and it reads a grant's fields only, never the clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from nbagent.events.envelope import canonical_json
from nbagent.events.levels import Risk
from nbagent.gate.grant_terms import covers_text

if TYPE_CHECKING:
    from nbagent.events.envelope import EventBase
    from nbagent.events.state import RunState
    from nbagent.gate.grants import Grant
    from nbagent.store import Store

# the longest a grant may last: a year, not forever; grants.py gives none longer (`parse_duration`, `expiry`), so
# the log backs none longer (`unbacked`)
MAX_GRANT_DAYS = 365
MAX_GRANT_SECONDS = MAX_GRANT_DAYS * 86400.0


def duplicated(events: Iterable[EventBase]) -> list[EventBase]:
    """The `grant_given` events `from_events` ignores: a later one with the id of an earlier grant (a copy)."""
    seen: set[str] = set()
    out = []
    for e in events:
        if e.type == "grant_given":
            gid = getattr(e.payload, "grant_id", None)
            if gid in seen:
                out.append(e)
            elif isinstance(gid, str):
                seen.add(gid)
    return out


def _same_terms(entry: Any, grant: Grant, text: str) -> bool:
    """A decision's `grants` entry that gave this grant: same id, scope, covers text, effect and expiry (an entry
    from an older log, without `effect` or `expires_at`, is compared on what it holds)."""
    if not isinstance(entry, dict):
        return False
    if entry.get("grant_id") != grant.grant_id or entry.get("covers") != text or entry.get("scope") != grant.scope:
        return False
    return all(entry[k] == getattr(grant, k) for k in ("effect", "expires_at") if k in entry)


def _listed_at_start(store: Store, grant: Grant, text: str) -> bool:
    """A replay's standing grant: its run's `context_assembled` lists it (id, covers, by) among those it starts
    with. Logs written before that list existed back none."""
    for e in store.query_events(run_id=grant.run_id or "", types="context_assembled"):
        listed = getattr(e.payload, "grants", None)
        if isinstance(listed, list) and any(
                isinstance(g, dict) and g.get("grant_id") == grant.grant_id and g.get("covers") == text
                and g.get("by") == grant.by for g in listed):
            return True
    return False


def _root_of(store: Store, state: RunState) -> str | None:
    """The root of a run's tree (following `parent_run_id`); None when the tree is not whole in the log."""
    seen = {state.run_id}
    while state.parent_run_id is not None:
        parent = state.parent_run_id
        if parent in seen:
            return None
        try:
            state = store.run_state(parent)
        except Exception:
            return None
        if state.run_id != parent:
            return None
        seen.add(parent)
    return state.run_id


def unbacked(store: Store, grant: Grant) -> str | None:
    """Why the log does not back this grant (`vouched`), in words for `nbagent verify`; None when it does."""
    try:
        state = store.run_state(grant.run_id or "")
    except Exception:
        return f"its run {grant.run_id!r} is not in the log"
    if state.run_id != grant.run_id:  # (a run id prefix resolves to a run: only the exact id counts)
        return f"its run {grant.run_id!r} is not in the log"
    if state.session_id != grant.session_id:
        return f"its run {grant.run_id} is of another session ({state.session_id})"
    root = _root_of(store, state)
    if grant.root_run_id != root:
        return f"its root_run_id {grant.root_run_id} is not the root of its run's tree ({root})"
    if grant.expires_at is not None:  # nbagent gives no grant longer than a year, so no grant lasts longer
        try:
            lasts = (datetime.fromisoformat(grant.expires_at) - datetime.fromisoformat(grant.given_at)).total_seconds()
        except (TypeError, ValueError):
            return f"its expiry {grant.expires_at!r} is not a time"
        if lasts > MAX_GRANT_SECONDS + 60:
            return f"it lasts longer than a grant can ({MAX_GRANT_DAYS} days): nbagent did not give it so"
    from nbagent.store.integrity import chain_sound

    if not chain_sound(store, f"session:{grant.session_id}"):
        return UNSOUND_SESSION
    text = covers_text(grant)
    if grant.plan_id is None:
        if not (grant.pinned and grant.scope == "run" and _listed_at_start(store, grant, text)):
            return ("it names no plan, and its run's context_assembled does not list it among the grants a replay "
                    "starts with")
    elif not any(d.plan_id == grant.plan_id and d.kind == ("approved" if grant.effect == "allow" else "rejected")
                 and d.by == grant.by and any(_same_terms(entry, grant, text) for entry in d.grants)
                 for d in state.decisions):
        kind = "approved" if grant.effect == "allow" else "rejected"
        return (f"no plan_{kind} of plan {grant.plan_id} by {grant.by} in run {grant.run_id} gives it with these "
                "terms (id, scope, effect, covers, expiry)")
    return UNSOUND_RUN if not chain_sound(store, grant.run_id or "") else None


# why a grant is not backed when a chain it depends on does not verify (`nbagent verify` names the chain itself)
UNSOUND_SESSION = "its session's chain does not verify (an event edited, removed or replaced)"
UNSOUND_RUN = "the chain of the run that gave it does not verify (an event edited, removed or replaced)"


_SEALED_TERMS = ("grant_id", "effect", "scope", "tool", "paths", "arguments", "max_risk", "by", "expires_at", "run_id",
                 "root_run_id", "plan_id", "pinned", "digests")


def grant_seal(payload: Mapping[str, Any], session_id: str, store_path: Any) -> str:
    """The seal of a grant: an HMAC, under the giving user's key (nbagent/store/seal.py), of its terms, its session and
    the store it was given in (its real path: a copy of the log elsewhere, whose anchors this user never kept, is
    another store, and a grant given here answers nothing there: attack b5)."""
    import os

    from nbagent.store.seal import seal

    terms = {k: payload.get(k) for k in _SEALED_TERMS}
    terms["max_risk"] = str(Risk(terms["max_risk"] or Risk.READ_ONLY).value)
    return seal("grant", os.path.realpath(store_path), session_id, canonical_json(terms))


def sealed_here(store: Store, grant: Grant) -> bool:
    """A grant this user gave here: its seal verifies under this user's key (a log that came with a cloned
    repository, or a line appended by hand, carries no seal of this user's). A key that cannot be used seals
    nothing: the grant answers nothing (fail closed)."""
    import hmac

    from nbagent.store.seal import KeyFileError

    if not grant.seal:
        return False
    try:
        expected = grant_seal(grant.model_dump(mode="json"), grant.session_id, store.path)
    except KeyFileError:
        return False
    return hmac.compare_digest(grant.seal, expected)


def vouched(store: Store, grant: Grant) -> bool:
    """A grant the log backs, with these very terms; a `grant_given` appended or edited by hand answers nothing.

    Backed means: its run is of its session, `root_run_id` is the root of that run's tree, and either the decision
    that gave it (`plan_approved` / `plan_rejected` of its plan, by the same person) lists it with the same id,
    scope, effect, covers text and expiry, or, for a replay's standing grant (pinned, no plan), the run's
    `context_assembled` lists it (id, covers, by) among the grants it starts with; and the session's chain and that
    run's chain verify up to their checkpoints (`store.integrity.chain_sound`: nothing edited, removed, or cut off
    the end, such as a revoke). Only the runtime writes those events, so a line appended to the session's chain
    cannot vouch for itself. `unbacked` says which rule failed. And it is this user's: sealed with this user's key
    (`sealed_here`), so a grant that came with a log from elsewhere is not this user's yes.
    """
    return unbacked(store, grant) is None and sealed_here(store, grant)
