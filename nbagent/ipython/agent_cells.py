"""The cells the agent wrote in this kernel, and the tools that read and change them: `list_cells`, `replace_cell`.

`run_cell` (run_cell.py) records each cell it writes here (`Registry.wrote`): its id, source, metadata, execution
count, a short summary of its outputs, and the run and call that wrote it. The registry lives in the kernel (one per
`NotebookHost`), so it knows only cells written since nbagent was loaded in it; a cell is known by its id and by the
call id that wrote it.

- `list_cells()` (READ_ONLY): the notebook's cells as the kernel knows them: the agent's from the registry, and a
  person's as IPython's history holds them (`In[n]`, with their ids when the front end sent them), newest last,
  bounded.
- `replace_cell(cell, code, explanation="")` (WRITE_HIGH_RISK): replaces the code of a cell the agent wrote and runs
  it in place (same cell, a new execution count), through `run_in_shell`. A person's cell, a cell a person edited
  and ran since, or an id the registry does not hold is refused with a clear error. The comm `nbagent.cells` gets
  `{"action": "replace", cell_id, source, metadata, ran: true, msg_id, execution_count}` before the code runs; the
  result is run_cell's plus `replaced: true`, `old_source` and `diff` (unified). A decision on the call binds to the
  cell the spelling resolves to (`Effect.cell`), and to the code (an argument).

Undo (undo_cells.py) reads the registry back from the log: the cells a run added are removed and the code its
replacements overwrote restored.
"""

from __future__ import annotations

import difflib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nbagent.ipython.cells import send
from nbagent.tools.cell_text import source_digest

if TYPE_CHECKING:  # (imported by the tools' builders: the host makes a Registry at `%load_ext`, tools at a run)
    from nbagent.tools.base import Tool

MAX_LISTED = 40  # cells list_cells shows (the newest)
MAX_SOURCE_SHOWN = 400  # characters of each cell's source in list_cells
MAX_DIFF = 12_000


@dataclass
class AgentCell:
    cell_id: str
    source: str
    metadata: dict[str, Any]
    execution_count: int | None
    summary: str
    run_id: str | None
    call_id: str | None
    after_cell_id: str | None
    tool: str = "run_cell"
    version: int = 1
    calls: list[str] = field(default_factory=list)  # every call that wrote it (run_cell, then replace_cell's)
    edited: bool = False  # a person ran other code under this id since: it is theirs now
    first_run: str | None = None  # the run and call that wrote it first (run_cell)
    first_call: str | None = None


def summary(result: dict[str, Any]) -> str:
    """One short line of what a cell showed: its error, else the start of what it printed or evaluated to."""
    if result.get("error"):
        return _clip(str(result["error"]), 160)
    parts = []
    out: Any = result.get("stdout")
    text = getattr(out, "head", out)
    if text:
        parts.append(f"printed {_clip(str(text).strip(), 100)!r}")
    for o in result.get("outputs") or []:
        t = getattr(o.get("text"), "head", o.get("text"))
        if o.get("images"):
            parts.append(f"{len(o['images'])} image(s)")
        elif t:
            parts.append(f"{o.get('output_type', 'output')} {_clip(str(t).strip(), 80)!r}")
    return _clip("; ".join(parts) or "no output", 240)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


class Registry:
    """The cells the agent wrote in this kernel (by cell id and by the call ids that wrote them), and which cell id
    each execution count ran under (a person's too, when the front end sent one)."""

    def __init__(self) -> None:
        self.cells: dict[str, AgentCell] = {}
        # call id -> (run id, cell id) of each cell it wrote: call ids are per run (nb1_0...), so one may name cells
        # of several runs; the current run's is meant, else the newest
        self.by_call: dict[str, list[tuple[str | None, str]]] = {}
        self.cell_of_count: dict[int, str] = {}
        self.agent_counts: dict[int, str] = {}  # every execution count an agent's cell ran as: "agent (run R, call C)"
        self._ours: set[str] = set()  # cell ids being run by the agent right now (their post_run_cell is ours)

    def wrote(self, result: dict[str, Any], *, tool: str = "run_cell") -> AgentCell:
        """Record the cell a run_cell or replace_cell call wrote (its result, before `fitted`)."""
        meta = result.get("metadata") or {}
        prov = meta.get("nbagent") or {}
        cell_id = str(result["cell_id"])
        held = self.cells.get(cell_id)
        entry = AgentCell(cell_id=cell_id, source=str(result.get("source") or ""), metadata=meta,
                          execution_count=result.get("execution_count"), summary=summary(result),
                          run_id=prov.get("run_id"), call_id=prov.get("call_id"),
                          after_cell_id=result.get("after_cell_id") if held is None else held.after_cell_id,
                          tool=tool, version=int(prov.get("version") or 1),
                          calls=(held.calls if held is not None else []) + [str(prov.get("call_id") or "")],
                          first_run=held.first_run if held is not None else prov.get("run_id"),
                          first_call=held.first_call if held is not None else prov.get("call_id"))
        self.cells[cell_id] = entry
        if entry.call_id:
            self.by_call.setdefault(entry.call_id, []).append((entry.run_id, cell_id))
        if isinstance(entry.execution_count, int):
            self.cell_of_count[entry.execution_count] = cell_id
            self.agent_counts[entry.execution_count] = f"agent (run {entry.run_id}, call {entry.call_id})"
        return entry

    def running(self, cell_id: str, yes: bool) -> None:
        (self._ours.add if yes else self._ours.discard)(cell_id)

    def before_cell(self, info: Any, count: Any) -> None:
        """pre_run_cell (`count`: the execution count this cell takes): note the cell id it runs under; a person
        running other code under an agent's cell id (edited in the front end) makes that cell theirs (replace_cell
        no longer touches it)."""
        cell_id = getattr(info, "cell_id", None)
        if not cell_id:
            return
        if isinstance(count, int) and getattr(info, "store_history", True):
            self.cell_of_count[count] = str(cell_id)
        held = self.cells.get(str(cell_id))
        if held is not None and str(cell_id) not in self._ours and (getattr(info, "raw_cell", "") or "") != held.source:
            held.edited = True

    def find(self, spelling: str, run_id: str | None = None) -> AgentCell | None:
        """The agent's cell named by its id, or by the call id that wrote it (in `run_id`, else the newest)."""
        key = str(spelling).strip()
        if key in self.cells:
            return self.cells[key]
        wrote = self.by_call.get(key) or []
        ours = [c for r, c in wrote if r == run_id] or [c for _, c in wrote]
        return self.cells.get(ours[-1]) if ours else None

    def resolve(self, spelling: Any, run_id: str | None = None) -> str:
        """What a decision on replace_cell(cell=spelling) binds to: the cell it names, or that it names none. A cell
        this run wrote is named by the call that first wrote it ("this run's call nb1_0": one cell, and the same one
        when a replay runs the run again, where the cell gets a new id); any other by its id."""
        found = self.find(spelling, run_id) if isinstance(spelling, str) else None
        if found is None:
            return f"no agent cell ({_clip(str(spelling), 80)})"
        if run_id is not None and found.first_run == run_id and found.first_call:
            return f"the cell this run's call {found.first_call} wrote"
        return f"agent cell {found.cell_id}"


def list_cells_tool(shell: Any, registry: Registry) -> Tool:
    from nbagent.events.levels import Risk
    from nbagent.tools.base import Tool

    def list_cells() -> dict[str, Any]:
        """List the notebook cells this kernel has run: the ones you wrote (run_cell, replace_cell) with their ids,
        and the person's, as the kernel's history holds them (In[n]); newest last.

        Returns each cell's execution count, id (when known), who wrote it, and the start of its source."""
        raw = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None)
        history = list(raw if raw is not None else getattr(shell, "user_ns", {}).get("In") or [])
        by_count = {c.execution_count: c for c in registry.cells.values() if isinstance(c.execution_count, int)}
        rows: list[dict[str, Any]] = []
        for n in range(1, len(history)):
            source = str(history[n] or "")
            mine = by_count.get(n)
            if mine is not None and mine.source.rstrip() == source.rstrip() and not mine.edited:
                rows.append(_agent_row(mine))
                continue
            row: dict[str, Any] = {"execution_count": n, "written_by": "person"}
            if n in registry.cell_of_count:
                row["cell_id"] = registry.cell_of_count[n]
            if n in registry.agent_counts:  # the agent's code as it ran then: replaced since, or undone
                held = registry.cells.get(row.get("cell_id", ""))
                row["written_by"] = registry.agent_counts[n] + (
                    "; its cell was removed by an undo" if held is None else
                    "; the person edited and ran it since" if held.edited and held.execution_count == n else
                    "; replaced since")
            elif source.lstrip().startswith(("%%agent", "%agent")):
                row["written_by"] = "person (a request to the agent)"
            row["source"] = _clip(source, MAX_SOURCE_SHOWN)
            rows.append(row)
        unseen = [_agent_row(c) for c in registry.cells.values()
                  if not isinstance(c.execution_count, int) or c.execution_count >= len(history)]
        rows += unseen
        out: dict[str, Any] = {"cells": rows[-MAX_LISTED:]}
        if len(rows) > MAX_LISTED:
            out["cells_not_shown"] = f"{len(rows) - MAX_LISTED} older cells not shown"
        out["note"] = ("replace_cell(cell=<cell_id or the call id that wrote it>, code=...) changes only cells the "
                       "agent wrote; cells run before nbagent was loaded, or in another kernel, have no id here")
        return out

    return Tool(list_cells, risk=Risk.READ_ONLY)


def _agent_row(c: AgentCell) -> dict[str, Any]:
    by = f"agent (run {c.run_id}, call {c.call_id})"
    row: dict[str, Any] = {"execution_count": c.execution_count, "cell_id": c.cell_id,
                           "written_by": by + (", then edited and run by the person" if c.edited else ""),
                           "source": _clip(c.source, MAX_SOURCE_SHOWN), "outputs": c.summary}
    if c.version > 1:
        row["version"] = c.version
    return row


def unified_diff(old: str, new: str, cell_id: str) -> str:
    text = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"cell {cell_id} (before)", tofile=f"cell {cell_id} (after)"))
    return text if len(text) <= MAX_DIFF else text[:MAX_DIFF] + f"\n… [diff cut: {len(text):,} characters]\n"


def replace_cell_tool(shell: Any, registry: Registry, where: Callable[[], tuple[str | None, str | None]],
                      put_image: Callable[[bytes], str] | None = None, reruns: Any = None) -> Tool:
    from nbagent.events.levels import Risk
    from nbagent.ipython.run_cell import cell_source, fitted, keep_images, run_in_shell
    from nbagent.tools.base import Tool, ToolError

    def _new_source(code: Any, explanation: Any, run_id: str | None) -> str:
        return cell_source(str(code), run_id, str(explanation or ""))

    def preview(arguments: dict[str, Any]) -> str | None:
        code = arguments.get("code")
        if not isinstance(code, str):
            return None
        held = registry.find(str(arguments.get("cell", "")), where()[1])
        if held is None or held.edited:
            return f"(no cell the agent wrote is named {arguments.get('cell')!r}: the call will fail)\n" + code
        return unified_diff(held.source, _new_source(code, arguments.get("explanation"), where()[1]), held.cell_id)

    async def replace_cell(cell: str, code: str, explanation: str = "") -> dict[str, Any]:
        """Replace the code of a cell you wrote (with run_cell) and run it again in place: use it to fix a cell
        that failed or to change what it computes. Only your own cells (list_cells shows them).

        Args:
            cell: the cell's id, or the id of the tool call that wrote it
            code: the cell's new code (all of it)
            explanation: one line on what changed (shown in the cell's first line)
        """
        from nbagent.gate.effects import current_call
        from nbagent.secrets.redactor import Redactor

        now = current_call()
        held = registry.find(str(cell), now.run_id if now is not None else where()[1])
        if held is not None and registry.find(str(cell), where()[1]) is not held:  # not the cell decided on
            raise ToolError(f"{cell!r} names cells of more than one run: name the cell by its id (list_cells)")
        if held is None:
            raise ToolError(f"{cell!r} is not a cell you wrote in this kernel: replace_cell changes only cells the "
                            "agent wrote with run_cell (list_cells shows their ids); to change a person's cell, "
                            "write the new code with run_cell")
        if held.edited:
            raise ToolError(f"cell {held.cell_id} was edited and run by the person since you wrote it: it is theirs "
                            "now; write the new code with run_cell")
        if reruns is not None and held.cell_id in reruns.cells:  # (a cell of an earlier run, never this one's)
            raise ToolError(f"cell {held.cell_id} was written by an earlier run of this %%agent cell, which this run "
                            "replaces (rerun.py): write the new code with run_cell")
        _, run_id = where()
        call = now
        if call is not None:
            run_id = call.run_id
        source = _new_source(code, explanation, run_id)
        old = held.source
        prov: dict[str, Any] = {"run_id": run_id, "index": (held.metadata.get("nbagent") or {}).get("index"),
                                "ran": True}
        if call is not None:
            prov.update(call_id=call.call_id, approval_event_id=call.approval_event_id, plan_id=call.plan_id,
                        grant_id=call.grant_id)
        prov.update(source_sha256=source_digest(source), replaces_sha256=source_digest(old), version=held.version + 1)
        metadata = {"nbagent": prov}
        msg_id = uuid.uuid4().hex
        payload = {"action": "replace", "cell_id": held.cell_id, "source": source, "metadata": metadata, "ran": True,
                   "msg_id": msg_id, "execution_count": shell.execution_count}
        delivered = send(payload)  # no front end: the log holds the new source and outputs
        registry.running(held.cell_id, True)
        try:
            result = await run_in_shell(shell, source, held.cell_id, msg_id)
        finally:
            registry.running(held.cell_id, False)
        result.update(after_cell_id=held.after_cell_id, source=source, metadata=metadata, sent_to_frontend=delivered,
                      replaced=True, old_source=old, old_metadata=held.metadata,
                      diff=unified_diff(old, source, held.cell_id))
        keep_images(result, put_image)
        registry.wrote(result, tool="replace_cell")
        return fitted(result, Redactor().redact)

    t = Tool(replace_cell, risk=Risk.WRITE_HIGH_RISK, preview=preview, target_arg="cell")
    t.cell_of = lambda arguments: registry.resolve(arguments.get("cell"), where()[1])  # type: ignore[attr-defined]  # the decision binds to the cell (effects.resolve)
    return t


__all__ = ["AgentCell", "Registry", "list_cells_tool", "replace_cell_tool", "summary", "undo_cells", "unified_diff"]


def undo_cells(registry: Registry, cells: list[Any]) -> list[str]:
    """Do an undo's cell part (undo_cells.CellUndo list) in the front end, through the comm `nbagent.cells`, and in
    the registry; a cell the person edited and ran since is left as it is. Returns a line for each cell."""
    from nbagent.undo.cells import KERNEL_NOTE, payloads

    lines: list[str] = []
    todo = []
    for c in cells:
        held = registry.cells.get(c.cell_id)
        if held is not None and held.edited:
            lines.append(f"cell {c.cell_id} was edited and run by the person since: left as it is")
            continue
        todo.append(c)
        if c.action == "remove":
            registry.cells.pop(c.cell_id, None)
        elif held is not None and c.source is not None:
            held.source, held.metadata = c.source, dict(c.metadata or {})
            held.version = int((held.metadata.get("nbagent") or {}).get("version") or 1)
        lines.append(c.line())
    sent = True
    for payload in payloads(todo):
        sent = send(payload) and sent
    if todo and not sent:
        lines.append("no front end took the cells' changes: remove or restore them in the notebook by hand")
    if lines:
        lines.append(f"note: {KERNEL_NOTE}")
    return lines
