"""`insert_code_cell`: the agent proposes code as a new cell below its own, not executed.

In JupyterLab the cell is inserted by the lab extension, which listens on the comm target `nbagent.cells`;
`nbagent run` inserts the same cell into the executed notebook from the run's log (the tool's recorded
result), so headless and interactive runs leave the same notebook.

The cell is code that runs later (Run All, the next `nbagent run`), so the tool is WRITE_HIGH_RISK and no grant
covers it: a person (or `--approve all`) approves exactly that code. Each inserted cell carries its provenance in
`metadata.nbagent`: the run and call that wrote it, the approval that let the call run (`approval_event_id`,
`plan_id`; `grant_id` would name a grant), and the sha256 of its source. `nbagent run` executes such a cell only when
the notebook's log holds that approval for exactly its source (`nbagent.cli.run.agent_cell_clearance`); a person
running it by hand in JupyterLab is the person's choice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nbagent.tools.cell_text import INSERT_TOOL, cell_source, source_digest

if TYPE_CHECKING:  # (imported by the tool's builder: the host imports this module at `%load_ext`, tools at a run)
    from nbagent.tools.base import Tool

log = logging.getLogger("nbagent.ipython")
COMM_TARGET = "nbagent.cells"
RUNS_LATER = ("insert_code_cell writes a notebook cell: Run All runs it, and `nbagent run` runs it when this "
              "approval covers exactly its code")


def code_preview(arguments: dict[str, Any]) -> str | None:
    """What the approval card shows of a call that writes a cell (insert_code_cell, run_cell): the explanation as
    a comment, then the code."""
    code = arguments.get("code")
    if not isinstance(code, str):
        return None
    about = " ".join(str(arguments.get("explanation") or "").split())
    return (f"# {about}\n" if about else "") + code


def insert_cell_tool(where: Callable[[], tuple[str | None, str | None]]) -> Tool:
    """The tool, bound to the host's current cell and run (`where() -> (cell_id, run_id)`)."""
    from nbagent.events.levels import Risk
    from nbagent.tools.base import Tool

    counter: dict[str, int] = {}

    def insert_code_cell(code: str, explanation: str = "") -> dict[str, Any]:
        """Put Python code in a new notebook cell below the request, for the user to read and run (not executed).

        Args:
            code: the cell's code
            explanation: one line on what the code does (shown in the cell's first line)
        """
        from nbagent.gate.effects import current_call

        cell_id, run_id = where()
        call = current_call()
        if call is not None:
            run_id = call.run_id  # the run whose log holds the call (a sub-agent's own run)
        index = counter[run_id or ""] = counter.get(run_id or "", 0) + 1
        source = cell_source(code, run_id, explanation)
        provenance: dict[str, Any] = {"run_id": run_id, "index": index}
        if call is not None:
            provenance.update(call_id=call.call_id, approval_event_id=call.approval_event_id, plan_id=call.plan_id,
                              grant_id=call.grant_id)
        provenance["source_sha256"] = source_digest(source)
        metadata = {"nbagent": provenance}
        payload = {"after_cell_id": cell_id, "source": source, "metadata": metadata}
        return {"inserted": True, "after_cell_id": cell_id, "source": source, "metadata": metadata,
                "sent_to_frontend": send(payload)}

    return Tool(insert_code_cell, risk=Risk.WRITE_HIGH_RISK, preview=code_preview, runs_later=RUNS_LATER)


def send(payload: dict[str, Any]) -> bool:
    """Tell the front end (the lab extension) of a cell to insert, replace, remove or restore; whether one was there
    to tell. Without one (nbclient, a plain kernel) nobody needs telling: the log holds the cell for `nbagent run`."""
    try:
        from comm import create_comm

        create_comm(target_name=COMM_TARGET, data=payload).close()
        return True
    except Exception as exc:
        log.debug("no front end received the cell: %s", exc)
        return False


def inserted_cells(events: list[Any]) -> list[dict[str, Any]]:
    """The cells a run's log says were inserted, in order (for `nbagent run`)."""
    out = []
    for e in events:
        if e.type == "tool_call_completed" and e.payload.tool == INSERT_TOOL and isinstance(
                e.payload.result, dict) and e.payload.result.get("inserted"):
            out.append(e.payload.result)
    return out
