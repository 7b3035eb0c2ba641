"""Re-running an `%%agent` cell: asking again, or reproducing its recorded run from the log.

A cell that already has a run in the notebook's log is re-run one of two ways, and its first line says which:

- **ask again** (the default, `rerun = ask`): the model, and the person, are asked anew;
- **reproduce** (`%agent reproduce on`, `%agent config rerun=reproduce`, `NbAgent.rerun`, `NBAGENT_RERUN`; or one
  cell: `%%agent --reproduce [RUN]`, or `%agent reproduce RUN` before the next run of RUN's cell, which a record's
  Reproduce button sends): the cell's last recorded run is replayed from the log. Its model replies are the recorded
  ones (`models/replay.py`: each answers only the request it answered), its decisions are the recorded ones
  (`deciders.RecordedDecider`: each answers only the calls it answered), at the autonomy it was recorded at; the
  agent's cells run again under those approvals. No model is called and nobody is asked.

The run reproduced is the one the log holds for this cell (by its cell id), the newest; a reproduction of a run
reproduces that run's recording (`options.reproduces`). It is refused, in one line and before anything is recorded,
when the log holds no such run, when it never finished (waiting, interrupted, failed: there is nothing recorded past
its end), when its chains do not verify (`replay.RecordingRefused`), or when the cell's request is not the one it
answered. Plain Python on the store: nothing here imports the runtime or IPython.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nbagent.ipython.options import UsageError

ASK, REPRODUCE = "ask", "reproduce"
OFF_HINT = "%agent reproduce off asks the model again"
ON_HINT = "%agent reproduce on reproduces recorded runs from the log instead"


@dataclass
class Rerun:
    """How this execution of an `%%agent` cell runs: `reproduce` `run_id`, or ask (`run_id`: the run it re-runs,
    None for a cell's first run), and the first line its output shows (None: nothing to say)."""

    kind: str
    run_id: str | None
    line: str | None


def short(run_id: str) -> str:
    """A run id as the records shorten it (ui/record_words.short_id)."""
    return run_id[:12]


def recording_of(store: Any, run_id: str) -> str:
    """The recording a run reproduces: itself, or for a reproduction the run it reproduced (as far back as it goes)."""
    seen = {run_id}
    while True:
        source = store.run_state(run_id).options.get("reproduces")
        if not isinstance(source, str) or source in seen or source not in store.run_ids():
            return run_id
        seen.add(source)
        run_id = source


def cell_runs(store: Any, cell_id: str | None) -> list[Any]:
    """The cell's top-level runs in the log, oldest first."""
    if not cell_id:
        return []
    return [s for s in store.session_states(None) if s.cell_id == cell_id and s.parent_run_id is None]


def ended_as(store: Any, run_id: str) -> str:
    """How a run ended, from its events: a superseded run keeps the status it had (its events without the one that
    superseded it, folded)."""
    from nbagent.events.state import fold

    state = fold(e for e in store.run_events(run_id) if e.type != "run_superseded")
    return str(state.status.value)


def checked(store: Any, run_id: str, cell_id: str | None, prompt: str | None) -> str:
    """The recording `run_id` names, once it is one this cell can reproduce; else UsageError, one line. `cell_id`:
    the run must have been recorded for this cell (a record's button; a run the cell's line names may be another
    cell's, as long as it answered the same request)."""
    from nbagent.runtime.recording import RecordingRefused, recorded_events
    from nbagent.store import StoreError

    try:
        run_id = store.resolve_run(run_id)
    except StoreError as exc:
        raise UsageError(f"%%agent: cannot reproduce run {run_id}: {exc}; {OFF_HINT}") from None
    source = recording_of(store, run_id)
    state = store.run_state(source)
    if state.parent_run_id is not None:
        raise UsageError(f"%%agent: cannot reproduce run {source}: it is a sub-agent's run; reproduce the run of the "
                         "%%agent cell that spawned it")
    if cell_id and state.cell_id and state.cell_id != cell_id:
        raise UsageError(f"%%agent: cannot reproduce run {source} here: it was recorded for another cell "
                         f"({state.cell_id}); run that cell, or ask again: {OFF_HINT}")
    how = ended_as(store, source)
    if how not in ("completed", "completed_with_errors"):
        why = {"waiting": "it is waiting for a decision, so the log holds nothing past it (decide it: %agent approve "
                          f"{source}, or %agent deny {source})",
               "running": "it has not ended (another kernel may be running it)",
               "interrupted": f"it was interrupted, so the log holds nothing past that (%agent resume {source} "
                              "continues it)",
               "failed": "it failed, and a failure is not a recorded reply"}.get(how, f"it ended {how}")
        raise UsageError(f"%%agent: cannot reproduce run {source}: {why}; {OFF_HINT}")
    if prompt is not None and state.prompt != prompt:
        raise UsageError(f"%%agent: cannot reproduce run {source}: this cell's request is not the one it answered "
                         f"(recorded: {_clip(state.prompt)!r}); {OFF_HINT}")
    try:
        recorded_events(store, source)  # every chain the recording's replies and decisions come from verifies
    except RecordingRefused as exc:
        raise UsageError(f"%%agent: cannot reproduce run {source}: {str(exc).split(': ', 1)[-1]}") from None
    return source


def _clip(text: str, width: int = 80) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def decide(store: Any, *, cell_id: str | None, mode: str, named: str | None, armed: str | None,
           prompt: str | None) -> Rerun:
    """How this execution runs: `named` (`--reproduce RUN`, "" for the cell's last run), `armed` (`%agent
    reproduce RUN` for this cell), else the notebook's mode. Raises UsageError (one line) for a reproduction that
    cannot be."""
    runs = cell_runs(store, cell_id)
    wanted = named if named else armed
    if named is not None or armed is not None or mode == REPRODUCE:
        if not wanted:
            if not runs:
                where = f" (cell {cell_id})" if cell_id else " (the front end sent no cell id)"
                raise UsageError(f"%%agent: nothing to reproduce: the log holds no run of this cell{where}; "
                                 f"{OFF_HINT}")
            wanted = runs[-1].run_id
        source = checked(store, str(wanted), None if named else cell_id, prompt)
        return Rerun(REPRODUCE, source, f"reproducing run {short(source)} from the log: no model call, its recorded "
                                        f"decisions ({OFF_HINT})")
    if not runs:
        return Rerun(ASK, None, None)
    last = runs[-1].run_id
    return Rerun(ASK, last, f"asking again: the model answers this cell anew, in place of run {short(last)} "
                            f"({ON_HINT})")


# cell id -> the run its next execution reproduces (`%agent reproduce RUN`, a record's button, Reproduce all): the
# host's `reproduce_next`, kept here so that Reproduce all can say it before nbagent is loaded
NEXT: dict[str, str] = {}


def turn_on(shell: Any, records: dict[str, str] | None = None) -> None:
    """Reproduce on, as the lab extension's "Reproduce all" sends it before Run All: in a kernel where nbagent is
    loaded, as `%agent reproduce on`; in one where it is not yet, in the IPython config that the notebook's own
    `%load_ext nbagent` reads (`NbAgent.rerun`), so nothing is loaded ahead of it (nor said twice). `records`: cell id
    -> the run its record names; that cell's next run reproduces that run (checked against the log then)."""
    from nbagent.ipython import entry
    from nbagent.ipython.options import set_override

    for cell, run in (records or {}).items():
        if isinstance(cell, str) and isinstance(run, str) and cell and run:
            NEXT[cell] = run
    host = entry.installed()
    if host is not None and host.shell is shell:
        set_override(host.overrides, f"rerun={REPRODUCE}")
    else:
        shell.config.NbAgent.rerun = REPRODUCE


__all__ = ["ASK", "REPRODUCE", "Rerun", "cell_runs", "checked", "decide", "recording_of", "turn_on"]
