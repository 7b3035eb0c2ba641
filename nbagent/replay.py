"""Reading a recording back: the model calls and decisions of a run and the child runs it spawned.

`llm_called` requests are delta-encoded (each records only the messages added since the previous call of the
run, after a shared prefix identified by its hash), so a run's own messages at its k-th call are the
concatenation of the first k deltas.
"""

from __future__ import annotations

from typing import Any

from .events import EventBase
from .models.replay import RecordedCall
from .store import Store


def run_tree(store: Store, run_id: str) -> list[str]:
    """The run and its descendants (spawned runs), parents first."""
    run_id = store.resolve_run(run_id)
    out, todo = [], [run_id]
    while todo:
        rid = todo.pop(0)
        out.append(rid)
        todo.extend(store.run_state(rid).children)
    return out


def recorded_events(store: Store, run_id: str) -> list[EventBase]:
    """Every event of the run tree, in the order they were written, with the grants (kept in the session's
    chain) that its decisions gave or that answered its calls."""
    tree = set(run_tree(store, run_id))
    everything = store.query_events()
    used = {getattr(e.payload, "grant_id", None) for e in everything if e.run_id in tree} - {None}
    return [e for e in everything if e.run_id in tree or (
        e.type == "grant_given" and (e.payload.run_id in tree or e.payload.grant_id in used))]


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
