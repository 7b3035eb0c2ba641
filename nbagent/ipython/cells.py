"""`insert_code_cell`: the agent proposes code as a new cell below its own, not executed.

In JupyterLab the cell is inserted by the lab extension, which listens on the comm target `nbagent.cells`;
`nbagent run` inserts the same cell into the executed notebook from the run's log (the tool's recorded
result), so headless and interactive runs leave the same notebook. Each inserted cell carries
`metadata.nbagent = {"run_id", "index"}` and a first line naming the run, so it can be traced to the run that
wrote it. The tool is WRITE_LOW_RISK: it changes the notebook, not the data, and runs nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..levels import Risk
from ..tools.base import Tool

log = logging.getLogger("nbagent.ipython")
COMM_TARGET = "nbagent.cells"


def cell_source(code: str, run_id: str | None, explanation: str = "") -> str:
    header = f"# nbagent: proposed by run {run_id}" + (f": {explanation.strip()}" if explanation.strip() else "")
    return header + "\n" + code.rstrip() + "\n"


def insert_cell_tool(where: Callable[[], tuple[str | None, str | None]]) -> Tool:
    """The tool, bound to the host's current cell and run (`where() -> (cell_id, run_id)`)."""
    counter: dict[str, int] = {}

    def insert_code_cell(code: str, explanation: str = "") -> dict[str, Any]:
        """Put Python code in a new notebook cell below the request, for the user to read and run (not executed).

        Args:
            code: the cell's code
            explanation: one line on what the code does (shown in the cell's first line)
        """
        cell_id, run_id = where()
        index = counter[run_id or ""] = counter.get(run_id or "", 0) + 1
        source = cell_source(code, run_id, explanation)
        metadata = {"nbagent": {"run_id": run_id, "index": index}}
        payload = {"after_cell_id": cell_id, "source": source, "metadata": metadata}
        delivered = False
        try:
            from comm import create_comm

            channel = create_comm(target_name=COMM_TARGET, data=payload)
            channel.close()
            delivered = True
        except Exception as exc:  # no front end to tell: the log still holds the cell for `nbagent run`
            log.debug("no front end received the cell: %s", exc)
        return {"inserted": True, "after_cell_id": cell_id, "source": source, "metadata": metadata,
                "sent_to_frontend": delivered}

    return Tool(insert_code_cell, risk=Risk.WRITE_LOW_RISK, preview=lambda a: a.get("code"))


def inserted_cells(events: list[Any]) -> list[dict[str, Any]]:
    """The cells a run's log says were inserted, in order (for `nbagent run`)."""
    out = []
    for e in events:
        if e.type == "tool_call_completed" and e.payload.tool == "insert_code_cell" and isinstance(
                e.payload.result, dict) and e.payload.result.get("inserted"):
            out.append(e.payload.result)
    return out
