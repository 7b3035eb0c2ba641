"""Reading the log's events: one run's, a session's, or those matching filters (the store's query face).

The events come through the log's index (`EventTable`), so a run's or a session's chain is read without scanning
the log, and a filter by type or time reads only the lines the index says can match.
"""

from __future__ import annotations

from typing import Any

from nbagent.events.model import EventBase, parse_event
from nbagent.store.eventtable import EventTable


class EventQueries:
    """A part of `Store`: what it answers about the events, read through `events`."""

    events: EventTable

    def raw_events(self, run_id: str) -> list[dict[str, Any]]:
        """One run's events as written, in log order (the input of `verify`)."""
        return self.events.docs_for_chain(run_id)

    def run_events(self, run_id: str) -> list[EventBase]:
        return [parse_event(d) for d in self.events.docs_for_chain(run_id)]

    def query_events(
        self,
        *,
        session_id: str | None = None,
        run_id: str | None = None,
        types: str | list[str] | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> list[EventBase]:
        """Events matching every given filter, in log order. `since`/`until` are ISO timestamps.

        With `run_id`, only that run's events are read (the log's index); otherwise those the log's index says
        can match (by type and time), or every event.
        """
        if run_id is not None:
            wanted = None if types is None else ({types} if isinstance(types, str) else set(types))

            def keep(d: dict[str, Any]) -> bool:  # what the TinyDB query below tests, on one run's events
                if d.get("run_id") != run_id:
                    return False
                if session_id is not None and d.get("session_id") != session_id:
                    return False
                if wanted is not None and d.get("type") not in wanted:
                    return False
                if since is not None and not ("ts" in d and d["ts"] >= since):
                    return False
                return until is None or ("ts" in d and d["ts"] <= until)

            return [parse_event(d) for d in self.events.docs_for_chain(run_id) if keep(d)]
        def in_session(d: dict[str, Any]) -> bool:
            return d.get("session_id") == session_id

        types_ = None if types is None else ([types] if isinstance(types, str) else list(types))
        docs = self.events.matching(types_, since, until, in_session if session_id is not None else None)
        return [parse_event(d) for d in docs]

    def count_events(self, types: str | list[str], *, since: str | None = None) -> int:
        """How many events of these types the log holds (from `since` on, an ISO timestamp): a budget's calls
        in the last hour. Only the events the index says can match are read."""
        return len(self.events.matching([types] if isinstance(types, str) else types, since))

    def session_event_count(self, session_id: str) -> int:
        """How many events the session's own chain has (its grants and revokes), without reading them: a cheap
        test of whether the session's grants changed since they were last read."""
        return self.events.chain_len(f"session:{session_id}")

    def session_events(self, session_id: str) -> list[EventBase]:
        """The session's own chain (session_started, grants given and revoked), in log order."""
        return [parse_event(d) for d in self.events.docs_for_chain(f"session:{session_id}")]
