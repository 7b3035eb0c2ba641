"""Re-running an `%%agent` cell in a kernel: the cells its earlier runs wrote and ran are superseded by the new run's.

A cell the agent wrote and ran (`run_cell`, `replace_cell`: `metadata.nbagent.ran`) is the output of its `%%agent`
cell, as `nbagent run` treats it (runner_cells.py). When that `%%agent` cell starts a new run, `supersede` reads
from the log the ran cells of its earlier runs (each cell id with the source its last call wrote) and holds them
here. Then:

- the kernel refuses to run such a cell while its source is unchanged (`refusal`, called by the input transformer
  for every execute request): under Run All its request is already queued behind the `%%agent` cell, and the front
  end cannot take it back. It becomes a no-op that shows one line. A cell the person changed runs as theirs.
- the front end is told once, just before the new run writes its first cell (`payload`, sent by `run_cell`):
  `{"action": "supersede", "agent_cell_id", "run_id", "cells": [{cell_id, source}]}`. The lab extension
  (labextension/src/cells.ts) removes each listed cell whose source is unchanged, marks a changed one as the
  person's (`metadata.nbagent.edited`), and puts the new run's cells where the first removed one was. A run that
  writes no cell removes nothing (its earlier cells stay, as `nbagent run` puts them back, and are still refused).

"Unchanged" is the one rule of tools/cell_text.py (`same_source`): the source is the one the log recorded, trailing
blank space aside. Without cell ids the log knows (a front end that sends none, a notebook saved by one that dropped
them) the `%%agent` cell's earlier runs are the ones of the same request, and a cell is matched by its source alone,
here and in the lab extension. A cell whose first line names a run the log does not hold, reached after an `%%agent`
cell ran in this kernel, cannot be checked and is refused too. Nothing here imports the runtime; the log is read
through the store it is given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from nbagent.tools.cell_text import RAN_TOOLS, same_source

# the first line run_cell writes (run_cell.cell_source); replace_cell writes the same
HEADER = re.compile(r"^# nbagent: run by run ([0-9A-Za-z]+)")
WHAT_TO_DO = "re-run that %%agent cell to run the agent's code again, or edit this cell to make it your own"


@dataclass
class Superseded:
    """One cell an earlier run wrote and ran, and the run of its `%%agent` cell that supersedes it."""

    cell_id: str
    source: str  # as the log recorded it (the last call that wrote it)
    run_id: str  # the run that wrote it
    call_id: str
    agent_cell_id: str
    by_run: str | None = None  # the new run (known once it started)


@dataclass
class Reruns:
    """The cells superseded in this kernel, by cell id, and whether an `%%agent` cell has started a run here."""

    cells: dict[str, Superseded] = field(default_factory=dict)
    told: set[str] = field(default_factory=set)  # runs whose front end has been sent `payload`
    agent_ran: bool = False
    pending: dict[str, list[Superseded]] = field(default_factory=dict)  # %%agent cell id -> what its new run replaces
    started: set[str] = field(default_factory=set)  # the %%agent cells that started runs in this kernel
    by_request: set[str] = field(default_factory=set)  # %%agent cells whose earlier runs were found by their request

    def supersede(self, store: Any, agent_cell_id: str | None, prompt: str = "") -> list[Superseded]:
        """The `%%agent` cell `agent_cell_id` starts a run with this request: the ran cells of its earlier runs
        (from the log) are superseded. Returns them, oldest first. Its earlier runs are the ones recorded with its
        cell id; with none (a front end that sends no ids, or a notebook saved by one that drops them, which
        JupyterLab gives new ids), the ones of the same request."""
        self.agent_ran = True
        found = written_by(store, agent_cell_id, prompt, self.started)
        if agent_cell_id:
            self.started.add(agent_cell_id)
            if found and found[0].agent_cell_id != agent_cell_id:
                self.by_request.add(agent_cell_id)
        for s in found:
            self.cells[s.cell_id] = s
        if agent_cell_id:
            self.pending[agent_cell_id] = found
        return found

    def payload(self, agent_cell_id: str | None, run_id: str | None) -> dict[str, Any] | None:
        """What the front end is sent before run `run_id` writes its first cell (None: nothing to replace, or said
        already)."""
        if not agent_cell_id or not run_id or run_id in self.told:
            return None
        self.told.add(run_id)
        found = [s for s in self.pending.pop(agent_cell_id, []) if s.run_id != run_id]
        for s in found:
            s.by_run = run_id
        if not found:
            return None
        return {"action": "supersede", "agent_cell_id": agent_cell_id, "run_id": run_id,
                "by_request": agent_cell_id in self.by_request,
                "cells": [{"cell_id": s.cell_id, "source": s.source} for s in found]}

    def refusal(self, cell_id: str | None, source: str, store: Any = None) -> str | None:
        """The one line a queued request is answered with instead of running, or None when it runs."""
        held = self.cells.get(cell_id) if cell_id else None
        if held is None:  # no cell id, or one the log never saw (the ids changed): the source alone says which
            held = next((s for s in self.cells.values() if same_source(source, s.source)), None)
        if held is not None:
            if not same_source(source, held.source):
                return None  # the person changed it: theirs, run as any cell of theirs
            by = f" (run {held.by_run})" if held.by_run else ""
            return (f"nbagent: not run: the agent wrote this cell (run {held.run_id}, call {held.call_id}) and its "
                    f"%%agent cell ran again{by}, which writes its cells anew; {WHAT_TO_DO}")
        named = HEADER.match(source)
        if named is None or not self.agent_ran or store is None:
            return None
        run_id = named.group(1)
        if run_id in store.run_ids():
            return None
        return (f"nbagent: not run: this cell says the agent wrote it in run {run_id}, which this notebook's log does "
                f"not hold, so its code cannot be checked against an approval; {WHAT_TO_DO}")


def written_by(store: Any, agent_cell_id: str | None, prompt: str = "", started: set[str] | None = None
               ) -> list[Superseded]:
    """The cells the runs of this `%%agent` cell wrote and ran, each with the source its last call wrote (its runs:
    the ones recorded with its cell id, else the ones of the same request `prompt` made by no `%%agent` cell in
    `started`, which are that cell's; see `Reruns.supersede`)."""
    out: dict[str, Superseded] = {}
    states = [s for s in store.session_states(None) if s.run_id is not None]
    runs = [s for s in states if agent_cell_id and s.cell_id == agent_cell_id] or \
        [s for s in states if prompt and s.prompt == prompt and s.parent_run_id is None
         and (s.cell_id is None or s.cell_id not in (started or set()))]
    for state in runs:
        for e in store.run_events(state.run_id):
            if e.type != "tool_call_completed" or e.payload.tool not in RAN_TOOLS:
                continue
            r = e.payload.result
            if not isinstance(r, dict) or not r.get("ran") or not isinstance(r.get("cell_id"), str) or \
                    not isinstance(r.get("source"), str):
                continue
            out.pop(r["cell_id"], None)  # (a replace: the cell's place in the order is its latest write)
            out[r["cell_id"]] = Superseded(cell_id=r["cell_id"], source=r["source"], run_id=state.run_id,
                                           call_id=str(e.payload.call_id), agent_cell_id=state.cell_id or "")
    return list(out.values())


def refused(text: str) -> None:
    """What a refused cell runs instead of its code: the line, as nbagent's notes are shown (a display)."""
    from nbagent.ipython.notes import show_notes

    show_notes([text])


def transform_refused(lines: list[str]) -> list[str] | None:
    """For the input transformer: the replacement of a cell the kernel must not run, or None."""
    from nbagent.ipython import entry

    h = entry.installed()
    if h is None or not lines or not (h.reruns.cells or h.reruns.agent_ran):
        return None
    try:
        parent = h.shell.kernel.get_parent()
    except Exception:
        return None
    header = (parent or {}).get("header") or {}
    meta = (parent or {}).get("metadata") or {}
    if header.get("msg_type") != "execute_request":  # (JupyterLab's metadata carries the cell's own, nbagent's too)
        return None
    source = "".join(lines)
    code = (parent.get("content") or {}).get("code")
    if source not in (code, f"{code}\n"):
        return None  # a part of a cell (IPython transforms some in pieces), or not the request's own code
    cell_id = meta.get("cellId")
    line = h.reruns.refusal(str(cell_id) if cell_id else None, source,
                            h.store if HEADER.match(source) and not h.reruns.cells.get(str(cell_id)) else None)
    if line is None:
        return None
    return [f"__import__('nbagent.ipython.rerun', fromlist=['_']).refused({line!r})\n"]


__all__ = ["HEADER", "Reruns", "Superseded", "refused", "transform_refused", "written_by"]
