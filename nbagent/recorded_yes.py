"""Whose recorded decisions a reproduction may replay: only this user's, made here.

A reproduction (`%%agent --reproduce`, a record's Reproduce, the toolbar's Reproduce all) and `--approve recorded`
answer cards with the decisions a log recorded. A log is data that travels with the notebook: a cloned repository's
`.nbagent` log verifies (its chains are sound) and still holds its author's yes, never this person's. This user's
anchors (store/anchor.py, in this user's data folder, keyed by the log's real path) saw every event this user's
store wrote here, so a recorded decision counts as this person's only when its chain is anchored by this very store
at or past the decision's seq; `chain_sound` (checked by `replay.recorded_events`) makes sure the anchored head is
still the one written. Any other decision is the author's: the run asks this person on a card, and says so.
Plain Python on the store (no IPython, no runtime).
"""

from __future__ import annotations

from typing import Any

from .replay import recorded_events

# the events a recorded decision is made of (deciders.RecordedDecider.from_events reads these)
DECIDING = ("plan_approved", "plan_rejected", "plan_refined", "human_input_received", "grant_given")


def not_yours(store: Any, run_id: str) -> str | None:
    """One line saying why the decisions `run_id`'s recording holds are not this user's (each card is asked
    again); None when this user's anchors saw every one of them made here. Raises `replay.RecordingRefused` for
    a recording whose chains do not verify."""
    heads = store.anchors.heads()
    for e in recorded_events(store, run_id):
        if e.type not in DECIDING:
            continue
        head = heads.get(e.chain)
        if head is None or head[0] < e.seq or head[2] != store.identity:
            why = store.anchors.problem or "a log that came with the notebook (a clone), or made on another machine"
            return (f"run {run_id[:12]}'s recorded decisions are not yours (no anchor of yours saw them: {why}): "
                    "each card is asked again, and nothing runs until you decide")
    return None


__all__ = ["DECIDING", "not_yours"]
