"""Whether one chain of a store verifies, cheaply enough to ask before honouring a grant (`grants.vouched`).

`nbagent verify` reads the whole file; the runtime reads events through the store's index and never checked them,
so a grant edited in place, or a decision edited to list a grant appended by hand, was honoured. This checks one
chain (a run, or a session's own events) as `verify` does, incrementally: each event is hashed once per store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbagent.events.envelope import compute_hash

if TYPE_CHECKING:
    from nbagent.store.store import Store


def chain_sound(store: Store, key: str) -> bool:
    """The chain (a run, or `session:ID`) verifies as `nbagent verify` checks it: seq 1, 2, 3..., each hash right and
    linked to the one before, and it reaches the checkpoint its table row keeps and the head this user's anchor saw
    (`anchor.py`, outside the project; the event at that seq has that hash): nothing edited in place, removed or
    replaced, even with tables.json damaged or edited too. The runtime reads events without checking them, so a grant
    is backed only through chains that verify. Each event is hashed once per store (`Store.verified` remembers how
    far each chain verified). The checkpoint is read before the chain, so an event appended meanwhile never looks
    removed."""
    try:
        checkpoint = store.checkpoint(key)
    except Exception:  # the tables are a cache: one that cannot be read checks nothing (`nbagent verify` says so)
        checkpoint = None
    anchored = store.anchored(key)  # outside the project: what a damaged or edited tables.json cannot undo
    n, prev = store.verified.get(key, (0, None))
    if n > store.events.chain_len(key):
        n, prev = 0, None
    for i, d in enumerate(store.events.docs_for_chain(key, n), start=n):  # only what was not verified yet
        try:
            if d.get("seq") != i + 1 or d.get("prev_hash") != prev or compute_hash(d) != d.get("hash"):
                return False
        except (TypeError, ValueError):
            return False
        n, prev = i + 1, d["hash"]
    store.verified[key] = (n, prev)
    for mark in (checkpoint, anchored):
        if mark is not None:
            seq, last_hash = mark
            at = store.events.doc_at(key, seq - 1) if seq <= n else None
            if at is None or (last_hash is not None and at.get("hash") != last_hash):
                return False
    return True
