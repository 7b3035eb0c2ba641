"""Reading a recording back: the model calls and decisions of a run and the child runs it spawned.

`llm_called` requests are delta-encoded (each records only the messages added since the previous call of the
run, after a shared prefix identified by its hash), so a run's own messages at its k-th call are the
concatenation of the first k deltas.
"""

from __future__ import annotations

from typing import Any

from nbagent.events.model import EventBase, GrantGiven
from nbagent.models.replay import RecordedCall
from nbagent.store import Store


def run_tree(store: Store, run_id: str) -> list[str]:
    """The run and its descendants (spawned runs), parents first."""
    run_id = store.resolve_run(run_id)
    out, todo = [], [run_id]
    while todo:
        rid = todo.pop(0)
        out.append(rid)
        todo.extend(store.run_state(rid).children)
    return out


class RecordingRefused(ValueError):
    """A recording that cannot be replayed as recorded (its log fails verification): nothing was replayed."""


def recorded_events(store: Store, run_id: str) -> list[EventBase]:
    """Every event of the run tree, in the order they were written, with the grants (kept in the session's
    chain) that its decisions gave or that answered its calls.

    A replay and `--approve recorded` act on these decisions, so they must be the ones recorded: every chain they
    come from (each run of the tree, and the session's, where grants live) must verify (`store.integrity.
    chain_sound`: no event edited, removed or cut off), or `RecordingRefused`; and a grant counts only if the log
    backs it with a decision (`grants.unbacked`): a grant appended by hand, or named by a hand-made
    `authorization_denied`, is left out. (A replay replays the recording's decisions, whoever made them: that is
    what the person asked for. A live run honours only grants the person gave here: `grants.vouched`.)"""
    from nbagent.gate.grants import from_events, unbacked
    from nbagent.store.integrity import chain_sound

    tree = run_tree(store, run_id)
    sessions = {store.run_state(r).session_id for r in tree}
    for key in [*tree, *(f"session:{s}" for s in sessions if s)]:
        if not chain_sound(store, key):
            where = f"the session's chain ({key[8:]})" if key.startswith("session:") else f"run {key}'s chain"
            raise RecordingRefused(f"the recording {run_id} cannot be replayed: {where} fails verification (an event "
                                   "edited, removed or cut off); `nbagent verify` names it; nothing was replayed")
    members = set(tree)
    everything = store.query_events()
    used = {getattr(e.payload, "grant_id", None) for e in everything if e.run_id in members} - {None}
    # backed by the recording's own decisions (its log may come from another user: a replay replays their yes)
    backed = {g.grant_id for g in from_events(e for e in everything if e.type in ("grant_given", "grant_revoked")
                                              ).values() if unbacked(store, g) is None}
    return [e for e in everything if e.run_id in members or (
        e.type == "grant_given" and isinstance(e.payload, GrantGiven) and e.payload.grant_id in backed
        and (e.payload.run_id in members or e.payload.grant_id in used))]


def recorded_calls(store: Store, run_id: str) -> list[RecordedCall]:
    calls: list[RecordedCall] = []
    own: dict[str, list[dict[str, Any]]] = {}
    for e in recorded_events(store, run_id):
        if e.type != "llm_called":
            continue
        p: Any = e.payload
        req = p.request
        start = int(req.get("own_from", 0))
        messages = own.setdefault(e.run_id or "", [])
        del messages[start:]
        messages.extend(req.get("messages") or [])
        calls.append(RecordedCall(
            fingerprint=p.fingerprint or "", own_messages=list(messages),
            prefix_sha=(req.get("prefix") or {}).get("sha"), response=p.response,
            usage=p.usage.model_dump(), tools=list(req.get("tools") or []), tools_sha=req.get("tools_sha"),
            call_ids=getattr(p, "call_ids", None),
        ))
    return calls
