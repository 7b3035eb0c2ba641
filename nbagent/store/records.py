"""The rows of the store's tables (sessions, runs): a cache for queries, made from the events (which are the
truth), and written one file write each."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, ValidationError

from nbagent.events.ids import now_iso
from nbagent.events.levels import Autonomy
from nbagent.events.state import RunState, RunStatus
from nbagent.store.tables import IdTable


class SessionRecord(BaseModel):
    """A row of the sessions table: cached, for queries. `last_seq` and `last_hash` are the checkpoint of the
    session's own chain (grants, revokes), as a run's row has for its chain: `verify` catches events cut off its end."""

    id: str
    name: str
    notebook: str | None = None
    created_at: str
    defaults: dict[str, Any] = Field(default_factory=dict)
    last_seq: int = 0
    last_hash: str | None = None


class RunRecord(BaseModel):
    """A row of the runs table: cached, for queries; `Store.run_state` is the truth."""

    id: str
    session_id: str
    cell_id: str | None = None
    previous_run_id: str | None = None
    parent_run_id: str | None = None
    model: str | None = None
    autonomy: Autonomy = Autonomy.L1
    prompt: str = ""
    status: RunStatus = RunStatus.RUNNING
    superseded_by: str | None = None
    created_at: str
    updated_at: str | None = None
    last_seq: int = 0
    last_hash: str | None = None
    steps: int = 0
    tokens: int = 0
    cost: float | None = None


def run_row(state: RunState) -> RunRecord:
    """A run's row of the runs table, from its state (what a checkpoint writes)."""
    assert state.run_id and state.session_id
    return RunRecord(
        id=state.run_id, session_id=state.session_id, cell_id=state.cell_id,
        previous_run_id=state.previous_run_id, parent_run_id=state.parent_run_id, model=state.model,
        autonomy=state.autonomy, prompt=state.prompt, status=state.status, superseded_by=state.superseded_by,
        created_at=state.started_at or now_iso(), updated_at=now_iso(), last_seq=state.last_seq,
        last_hash=state.last_hash, steps=len(state.steps), tokens=state.tokens,
        cost=state.cost if state.cost_known else None,
    )


def current_record(state: RunState, row: dict[str, Any] | None) -> RunRecord:
    """The run's cached row if it is as new as its events and names their session, else the row the events give."""
    if row is not None:
        try:
            cached = RunRecord.model_validate(row)
        except ValidationError:  # a damaged cached row: the events say what it should be
            return run_row(state)
        if cached.last_seq == state.last_seq and cached.session_id == state.session_id:
            return cached
    return run_row(state)


def put_row(table: IdTable, doc_id: str, row: dict[str, Any]) -> None:
    """Insert or update one row (`IdTable.put`: one read and one write of the file)."""
    table.put(doc_id, row)


def session_record(first: dict[str, Any] | None) -> SessionRecord | None:
    """A session's row from the first event of its chain (`session_created`); None for anything else."""
    if first is None or first.get("type") != "session_created" or not isinstance(first.get("payload"), dict):
        return None
    p = first["payload"]
    try:
        return SessionRecord(id=first["session_id"], name=p.get("name") or "default", notebook=p.get("notebook"),
                             created_at=first["ts"], defaults=p.get("defaults") or {})
    except (ValidationError, KeyError):
        return None


__all__ = ["RunRecord", "SessionRecord", "put_row", "run_row", "session_record"]
