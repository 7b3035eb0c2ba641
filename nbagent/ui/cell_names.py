"""The agent's cells named as the person sees them: `[3] df = pd.read_csv("sales.csv")`, not `nb1_0` or a 32-hex id.

A `replace_cell` call names its cell as the model wrote it (a cell id, or the id of the call that wrote it); a
`run_cell` call writes a new cell below the request, after the cells its run wrote before. Neither spelling is what
the notebook shows: the person sees a cell's execution count and its code. So each `run_cell`/`replace_cell` step
of a view (its plans' steps and its timeline's) gets a `cell` dict, worked out from the log in event order (what
the cell was when the call was proposed):

    {"cell_id", "count": int | None, "first_line": str}        (replace_cell: the cell it replaces)
    {"new": True, "below": int | None, "first_line": str}      (run_cell: below the run's last cell, or the request)

`cell_name(step)` words it ("[3] df = …", "new cell below [4]: import pandas as pd"); the ids go in a tooltip.
A cell written by an earlier run is not in this run's events: the kernel, which holds the cells it ran
(ipython/agent_cells.Registry), names those through `known`. Plain Python, no IPython import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

CELL_TOOLS = ("run_cell", "replace_cell")
HEADER = "# nbagent: run by run "  # the first line run_cell gives every cell it writes (ipython/run_cell.cell_source)
FIRST_LINE = 60  # characters of a cell's first line shown

# what the kernel knows of a cell the model named (spelling, run id) -> (cell id, execution count, source)
Known = Callable[[str, str | None], tuple[str, int | None, str] | None]


def first_line(source: Any) -> str:
    """The first line of a cell's code that says something: not run_cell's header nor a blank line, clipped."""
    lines = [ln.strip() for ln in str(source or "").splitlines()]
    code = [ln for ln in lines if ln and not ln.startswith(HEADER)]
    text = code[0] if code else ""
    return text if len(text) <= FIRST_LINE else text[: FIRST_LINE - 1] + "…"


def _spelling(arguments: Any) -> str:
    return str(arguments.get("cell") or "").strip() if isinstance(arguments, dict) else ""


class _Cells:
    """The cells a run wrote, as of a point in its events: by cell id and by the call ids that wrote them."""

    def __init__(self) -> None:
        self.by_id: dict[str, tuple[int | None, str]] = {}
        self.by_call: dict[str, str] = {}
        self.last: str | None = None  # the cell the run wrote last (a new one goes below it)

    def wrote(self, call_id: str, result: Any) -> None:
        if not isinstance(result, dict) or not isinstance(result.get("cell_id"), str):
            return
        cell_id = result["cell_id"]
        count = result.get("execution_count")
        self.by_id[cell_id] = (count if isinstance(count, int) else None, str(result.get("source") or ""))
        self.by_call.setdefault(call_id, cell_id)
        self.last = cell_id

    def name(self, tool: str, arguments: Any, run_id: str | None, known: Known | None) -> dict[str, Any] | None:
        if tool == "run_cell":
            below = self.by_id.get(self.last or "", (None, ""))[0]
            code = arguments.get("code") if isinstance(arguments, dict) else ""
            return {"new": True, "below": below, "first_line": first_line(code)}
        spelled = _spelling(arguments)
        if not spelled:
            return None
        cell_id = spelled if spelled in self.by_id else self.by_call.get(spelled)
        if cell_id is not None:
            count, source = self.by_id[cell_id]
            return {"cell_id": cell_id, "count": count, "first_line": first_line(source)}
        held = known(spelled, run_id) if known is not None else None
        if held is None:
            return None
        return {"cell_id": held[0], "count": held[1], "first_line": first_line(held[2])}


def name_cells(view: dict[str, Any], events: Iterable[Any], known: Known | None = None) -> dict[str, Any]:
    """Set `cell` on the view's run_cell/replace_cell steps (plans and timeline), from `events` (log order) and
    `known`; a step already named keeps its name. Returns `view`."""
    wanted: dict[str, list[dict[str, Any]]] = {}
    for plan in view.get("plans") or []:
        for s in plan.get("steps") or []:
            if s.get("tool") in CELL_TOOLS and not s.get("cell"):
                wanted.setdefault(str(s.get("call_id")), []).append(s)
    for s in view.get("steps") or []:
        if s.get("kind") == "tool" and s.get("tool") in CELL_TOOLS and not s.get("cell"):
            wanted.setdefault(str(s.get("call_id")), []).append(s)
    if not wanted:
        return view
    cells = _Cells()
    named: dict[str, dict[str, Any] | None] = {}
    run_id = view.get("run_id")
    for e in events:
        p: Any = e.payload
        if e.type == "plan_proposed":
            for step in p.steps:
                if step.call_id in wanted and step.call_id not in named:
                    named[step.call_id] = cells.name(step.tool, step.arguments, run_id, known)
        elif e.type == "tool_call_started" and p.call_id in wanted and p.call_id not in named:
            named[p.call_id] = cells.name(p.tool, p.arguments, run_id, known)
        elif e.type == "tool_call_completed" and p.tool in CELL_TOOLS:
            cells.wrote(p.call_id, p.result)
    for call_id, steps in wanted.items():
        name = named.get(call_id)
        if name is None and known is not None:  # a plan the view carries but the events passed did not propose
            s = steps[0]
            name = cells.name(str(s.get("tool")), s.get("arguments"), run_id, known)
        if name is not None and name.get("new") and call_id in cells.by_call:  # the cell it wrote, once it ran
            name = {**name, "cell_id": cells.by_call[call_id]}
        if name is not None:
            for s in steps:
                s["cell"] = name
    return view


def cell_name(step: dict[str, Any]) -> str:
    """"[3] df = pd.read_csv(…)", "[3]" (no code), "new cell below [4]: import pandas as pd", "new cell below the
    request"; "" when the step names no cell the log or the kernel knows."""
    c = step.get("cell")
    if not isinstance(c, dict):
        return ""
    line = str(c.get("first_line") or "")
    if c.get("new"):
        below = c.get("below")
        where = f"new cell below [{below}]" if isinstance(below, int) else "new cell below the request"
        return f"{where}: {line}" if line else where
    count = c.get("count")
    label = f"[{count}]" if isinstance(count, int) else "cell"
    return f"{label} {line}".strip() if line or label != "cell" else ""


def cell_short(step: dict[str, Any]) -> str:
    """A replace_cell step's cell in a sentence: "[3]"; "" when its count is unknown."""
    c = step.get("cell")
    count = c.get("count") if isinstance(c, dict) and not c.get("new") else None
    return f"[{count}]" if isinstance(count, int) else ""


def cell_title(step: dict[str, Any]) -> str:
    """The ids behind a step's cell name, for a tooltip: "cell 3f2a… (the model wrote nb1_0)"."""
    c = step.get("cell")
    if not isinstance(c, dict) or c.get("new"):
        return ""
    spelled = _spelling(step.get("arguments")) or str(step.get("target") or "")
    cell_id = str(c.get("cell_id") or "")
    return f"cell {cell_id}" + (f" (the model wrote {spelled})" if spelled and spelled != cell_id else "")


__all__ = ["CELL_TOOLS", "Known", "cell_name", "cell_short", "cell_title", "first_line", "name_cells"]
