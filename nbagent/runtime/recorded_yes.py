"""Whose recorded decisions a reproduction may replay: only this user's, made here.

A reproduction (`%%agent --reproduce`, a record's Reproduce, the toolbar's Reproduce all) and `--approve recorded`
answer cards with the decisions a log recorded. A log is data that travels with the notebook: a cloned repository's
`.nbagent` log verifies (its chains are sound) and still holds its author's yes, never this person's. This user's
anchors (store/anchor.py, in this user's data folder, keyed by the log's real path) saw every event this user's
store wrote here (at each event a checkpoint anchors: the run's start with its autonomy, each decision and grant,
its end), so a recording counts as this person's only when each of its chains is anchored by this very store at
or past each such event; `chain_sound` (checked by `replay.recorded_events`) makes sure the anchored head is still
the one written. The whole recording, not only its decisions: one recorded at L3 holds no decision, and reproduced
at its autonomy its calls would run with no card. Any other recording is its author's: the run asks this person on
a card, at this person's autonomy, and says so. Plain Python on the store (no IPython, no runtime).
"""

from __future__ import annotations

from typing import Any

from nbagent.events.model import CHECKPOINT_TYPES
from nbagent.runtime.recording import recorded_events


def not_yours(store: Any, run_id: str) -> str | None:
    """One line saying why `run_id`'s recording (its decisions, its autonomy) is not this user's (each card is
    asked again); None when this user's anchors saw all of it made here. Raises `replay.RecordingRefused` for
    a recording whose chains do not verify."""
    heads = store.anchors.heads()
    for e in recorded_events(store, run_id):
        if e.type not in CHECKPOINT_TYPES:  # (the events this user's store anchors as it writes them)
            continue
        head = heads.get(e.chain)
        if head is None or head[0] < e.seq or head[2] != store.identity:
            why = store.anchors.problem or "a log that came with the notebook (a clone), or made on another machine"
            return (f"run {run_id[:12]} was not recorded by you here (no anchor of yours saw it: {why}): its "
                    "decisions are not yours, so each card is asked again, at your autonomy; nothing runs until you "
                    "decide")
    return None


__all__ = ["not_yours"]
