"""What every event is, whatever its type: the envelope, its chain, and how a log line is written and hashed.

Each event is one JSON object on one line of the store's `events.jsonl`:

    {"id": ULID, "session_id": ..., "run_id": ... | null, "seq": 1.., "type": "llm_called",
     "ts": "2026-11-22T10:00:00.123456Z", "parent_event_id": ... | null,
     "payload": {...}, "prev_hash": ... | null, "hash": sha256 hex}

- `seq` counts from 1 within a *chain*: a run's events, or (run_id null) a session's own events. The store
  assigns it under the file lock, so it is gap-free even when two kernels write the same run.
- `hash` is sha256 over `prev_hash` followed by the canonical JSON (sorted keys, no spaces, UTF-8) of every
  other field. Editing, dropping or reordering any event of a chain breaks the link after it
  (`nbagent verify`). Hashes are computed from the dict as written, never from a model round trip, so a
  field added by a newer version cannot change an old event's hash.
- `parent_event_id` records causality: a tool result points at its request, the request at the model call.

Apart from model.py (the payload of each event type, and the union that parses a line by its `type`), which
re-exports these names: the store hashes and verifies lines, and everything reads an event's fields, knowing
nothing of the types.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

# --------------------------------------------------------------------------------------------- hashing


def canonical_json(obj: Any) -> str:
    """The one serialisation used for hashing and for the log lines (stable across processes and versions)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def compute_hash(record: dict[str, Any]) -> str:
    """Hash of a raw event dict: sha256(prev_hash + canonical JSON of all fields but `hash`)."""
    body = {k: v for k, v in record.items() if k != "hash"}
    prev = record.get("prev_hash") or ""
    return hashlib.sha256((prev + canonical_json(body)).encode("utf-8")).hexdigest()


def load_record(line: bytes | str) -> dict[str, Any]:
    """One log line -> its raw dict; ValueError if the line is not a JSON object."""
    record = json.loads(line)
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    return record


# --------------------------------------------------------------------------------------------- the envelope


class Payload(BaseModel):
    """Base of every event payload; `event_type` is the value of the event's `type` field."""

    model_config = ConfigDict(extra="allow")
    event_type: ClassVar[str]


class EventBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")

    id: str
    session_id: str
    run_id: str | None = None
    seq: int = Field(ge=1)
    type: str
    ts: str
    parent_event_id: str | None = None
    payload: Payload
    prev_hash: str | None = None
    hash: str

    @property
    def time(self) -> datetime:
        return datetime.fromisoformat(self.ts)

    @property
    def chain(self) -> str:
        return chain_key(self.run_id, self.session_id)


def chain_key(run_id: str | None, session_id: str) -> str:
    return run_id if run_id is not None else f"session:{session_id}"
