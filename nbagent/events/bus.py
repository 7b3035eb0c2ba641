"""The event bus: how a live view learns what a run is doing, without the runtime knowing who listens.

The runtime records an event in the store, then publishes it here; streamed tokens (too many and too
ephemeral for the log) are published here only. Listeners are plain callables; one that raises is logged and
dropped from that delivery, never allowed to break the run.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from nbagent.events.envelope import EventBase

log = logging.getLogger("nbagent.events.bus")

# (kind, data): ("event", EventBase), ("token", (run_id, text)), or ("token_reset", run_id) when a streamed reply
# was abandoned (the connection dropped and the call is retried): a view drops the tokens it showed.
Listener = Callable[[str, Any], None]


class EventBus:
    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def _emit(self, kind: str, data: Any) -> None:
        if not self._listeners:  # (every recorded event passes here; most runs have no listener)
            return
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(kind, data)
            except Exception:
                log.exception("an event listener failed; the run continues")

    def event(self, event: EventBase) -> None:
        self._emit("event", event)

    def token(self, run_id: str, text: str) -> None:
        self._emit("token", (run_id, text))

    def next_call(self, run_id: str, estimate: dict[str, Any]) -> None:
        """What the next model call will send (input tokens, counted or estimated) and cost, before it is made."""
        self._emit("next_call", (run_id, estimate))

    def token_reset(self, run_id: str) -> None:
        self._emit("token_reset", run_id)
