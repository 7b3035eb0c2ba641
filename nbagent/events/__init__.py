"""What a run is made of, below everything that acts: the event types (`model.py`; what every event is, whatever
its type, and how its line is hashed, `envelope.py`), ids (`ids.py`), the two axes of the approval table
(`levels.py`), the fold of events into a run's state (`state.py`), what a recorded
result says its code did (`outcomes.py`) and the bus that carries events to live views (`bus.py`).

Nothing here imports the store, the gate (but the `Effect` a call resolves to), the runtime or anything above."""

from nbagent._lazy import lazy_names

# the names the docs show as `nbagent.events.NAME`, and the module each comes from
_HOMES = dict.fromkeys(("Event", "EventBase", "UnknownEvent", "PAYLOADS", "canonical_json"), "model")
__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
