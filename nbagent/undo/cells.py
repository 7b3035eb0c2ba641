"""Undo of the notebook cells agent runs wrote with `run_cell` and `replace_cell` (undo.py's part for cells).

The log holds each such cell (the tool's result: `cell_id`, `source`, `metadata`, and for `replace_cell` the
`old_source`/`old_metadata` it replaced). Undoing runs removes every cell they added and restores, in a cell an
earlier run added, the code their first replacement overwrote. The cells live in the notebook a front end shows,
so the kernel does the acting (ipython/commands.py sends `{"action": "remove", "cell_ids": [...]}` and
`{"action": "restore", cell_id, source, metadata}` on the comm `nbagent.cells`); this module only reads the log.
What the cells did in the kernel (variables, imports, files written by their code) is not undone: KERNEL_NOTE.
Nothing here imports IPython.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

CELL_TOOLS = ("run_cell", "replace_cell")
CELL_UNDO_TOOL = "restore_cell"  # how an undo run records what it did to a cell
KERNEL_NOTE = "the cells' effects on the kernel's memory (variables, imports) are not undone"


HEADER = "# nbagent:"  # the first line run_cell writes ("# nbagent: run by run R: ..."): not what a person reads
KEPT = "kept: you edited it since; it is yours"
GONE = "not in the notebook any more (deleted since): nothing to undo"
# a restore_cell's recorded action, as said ("gone": the page said the cell is not in the notebook)
ACTED = {"remove": "removed", "restore": "restored", "keep": "kept", "gone": "gone"}


def first_line(source: Any, width: int = 60) -> str:
    """The cell's first line of code, as a person finds it in the notebook (the nbagent header skipped)."""
    lines = [ln.strip() for ln in str(source or "").splitlines() if ln.strip()]
    code = [ln for ln in lines if not ln.startswith(HEADER)] or lines
    text = code[0] if code else ""
    return text if len(text) <= width else text[: width - 1] + "…"


def cell_name(cell_id: str, count: Any, line: str) -> str:
    """"[4] df = load()": the execution count JupyterLab shows beside the cell, then its first line."""
    head = f"[{count}]" if isinstance(count, int) and not isinstance(count, bool) else f"cell {str(cell_id)[:8]}"
    return f"{head} {line}".rstrip()


class CellUndo(BaseModel):
    """What undo does to one cell: remove it (a run undone added it), or restore its code from before; `kept` when
    the person edited and ran it since (it is theirs: left as it is, and said so)."""

    cell_id: str
    action: Literal["remove", "restore"]
    source: str | None = None  # restore: the code to put back
    metadata: dict[str, Any] | None = None
    calls: int = 1  # the run_cell/replace_cell calls of the runs undone that wrote it
    count: int | None = None  # the execution count of the runs' last write of it (what the person saw)
    first: str = ""  # its first line as the runs left it
    kept: bool = False
    gone: bool = False  # the page said the notebook no longer holds it (the person deleted it): nothing is done

    @property
    def name(self) -> str:
        return cell_name(self.cell_id, self.count, self.first)

    @property
    def acted(self) -> str:
        """What undo does to it, as recorded in restore_cell's `action`: remove, restore, keep or gone."""
        return "gone" if self.gone else "keep" if self.kept else self.action

    def line(self) -> str:
        if self.gone:
            return f"{self.name}: {GONE}"
        if self.kept:
            return f"{self.name}: {KEPT}"
        return (f"{self.name}: removed (the agent added it)" if self.action == "remove" else
                f"{self.name}: restored to its code from before the agent replaced it")


def cell_changes(events: list[Any]) -> tuple[list[CellUndo], list[tuple[str, str, str, str]]]:
    """From the events of the runs undone (log order): what to do to each cell, and the calls whose cell cannot be
    put back (run id, call id, tool, why)."""
    plan: dict[str, CellUndo] = {}
    order: list[str] = []
    problems: list[tuple[str, str, str, str]] = []
    for e in events:
        p: Any = e.payload
        if e.type != "tool_call_completed" or p.tool not in CELL_TOOLS:
            continue
        result: dict[str, Any] = p.result if isinstance(p.result, dict) else {}
        cell_id = result.get("cell_id")
        if not isinstance(cell_id, str) or not result.get("ran"):
            problems.append((e.run_id, p.call_id, p.tool, "its result in the log does not name the cell"))
            continue
        held = plan.get(cell_id)
        count = result.get("execution_count")
        count = count if isinstance(count, int) and not isinstance(count, bool) else None
        if held is not None:
            held.calls += 1
            held.count, held.first = count, first_line(result.get("source"))  # the runs' last write of it
            continue
        if p.tool == "run_cell":
            plan[cell_id] = CellUndo(cell_id=cell_id, action="remove")
        elif isinstance(result.get("old_source"), str):
            plan[cell_id] = CellUndo(cell_id=cell_id, action="restore", source=result["old_source"],
                                     metadata=result.get("old_metadata") if isinstance(
                                         result.get("old_metadata"), dict) else None)
        else:
            problems.append((e.run_id, p.call_id, p.tool, "the code it replaced is not in the log"))
            continue
        plan[cell_id].count, plan[cell_id].first = count, first_line(result.get("source"))
        order.append(cell_id)
    return [plan[c] for c in reversed(order)], problems


def cell_conflicts(events: list[Any], run_ids: set[str], cells: list[CellUndo]) -> dict[str, str]:
    """Each cell a run outside `run_ids` replaced after the runs undone wrote it (log order): undoing it would throw
    that run's code away, so it is a conflict, as a file changed since is (cell id -> why)."""
    wanted = {c.cell_id for c in cells}
    touched: set[str] = set()
    out: dict[str, str] = {}
    for e in events:
        p: Any = e.payload
        if e.type != "tool_call_completed" or p.tool not in CELL_TOOLS or not isinstance(p.result, dict):
            continue
        cell_id = p.result.get("cell_id")
        if cell_id not in wanted:
            continue
        if e.run_id in run_ids:
            touched.add(cell_id)
        elif cell_id in touched:
            out[cell_id] = f"replaced by run {e.run_id} since (call {p.call_id})"
    return out


def payloads(cells: list[CellUndo]) -> list[dict[str, Any]]:
    """The comm messages that do the undo in a front end: one remove of every removed cell, then each restore (a
    kept cell is the person's: nothing is sent for it)."""
    cells = [c for c in cells if not c.kept and not c.gone]
    removed = [c.cell_id for c in cells if c.action == "remove"]
    out: list[dict[str, Any]] = [{"action": "remove", "cell_ids": removed}] if removed else []
    out += [{"action": "restore", "cell_id": c.cell_id, "source": c.source, "metadata": c.metadata or {}}
            for c in cells if c.action == "restore"]
    return out


__all__ = ["ACTED", "CELL_TOOLS", "CELL_UNDO_TOOL", "GONE", "KEPT", "KERNEL_NOTE", "CellUndo", "cell_changes",
           "cell_conflicts", "cell_name", "first_line", "payloads"]
