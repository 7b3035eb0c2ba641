"""What a run is made of, below everything that acts: the event types (`model.py`), ids (`ids.py`), the two
axes of the approval table (`levels.py`), the fold of events into a run's state (`state.py`), what a recorded
result says its code did (`outcomes.py`) and the bus that carries events to live views (`bus.py`).

Nothing here imports the store, the gate (but the `Effect` a call resolves to), the runtime or anything above."""

from __future__ import annotations

from importlib import import_module
from typing import Any

# The names the docs show as `nbagent.events.NAME`, loaded from their module on first use (importing the package
# imports nothing else, so a module low in the layers can import a sibling without loading the rest).
_EXPORTS = {name: "nbagent.events.model" for name in ("Event", "EventBase", "UnknownEvent", "PAYLOADS",
"canonical_json",)}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nbagent.events' has no attribute {name!r}")
    return getattr(import_module(module), name)
