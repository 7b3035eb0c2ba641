"""Cells the agent wrote, as `nbagent run` treats them (see nbagent/cli/run.py): the approval check, the cells a
`%%agent` cell that re-executes takes out and writes anew, and the outputs of the cells the agent ran.

- `insert_code_cell` cells (not run when written) run only when the log holds an approval of exactly their code.
- `run_cell` / `replace_cell` cells (`metadata.nbagent.ran`: the agent ran them when it wrote them): re-running the
  `%%agent` cell that wrote them runs that code again and writes them anew, so before the notebook executes they are
  taken out (`take_out_ran_cells`) — unless a person changed one since its approval: that one stays where it is and,
  when reached, fails with one line, unsent to the kernel (`agent_cell_clearance`). A person's edit is never
  dropped. If the `%%agent` cell wrote no cells of its own this time (not reached, its calls denied), the cells taken
  out are put back as they were (`put_back`).
- While the notebook executes, the IOPub messages of the cells the agent runs (their parent is the cell's own
  msg id M, not the `%%agent` cell's request, so nbclient drops them) are kept by `Outputs`; after it, the cells are
  written below their `%%agent` cell from the log (`write_agent_cells`), with those outputs (images kept), redacted
  by the one redactor as the kernel redacts them, else the text the log holds (redacted when it was logged).
"""

from __future__ import annotations

import inspect
import uuid
from pathlib import Path
from typing import Any

from nbagent.tools.cell_text import INSERT_TOOL, RAN_TOOLS, cell_source, same_source

AGENT_CELL_ERROR = "AgentCellNotApproved"
_WHAT_TO_DO = ("run it by hand in JupyterLab if you trust it, or delete its \"nbagent\" metadata to make it your own "
               "cell")
_WHAT_TO_DO_RAN = "run it by hand in JupyterLab if you trust it, or re-run the %%agent cell that wrote it"
_WHAT_TO_DO_EDITED = ("run it by hand in JupyterLab if you trust it, delete its \"nbagent\" metadata to make it your "
                      "own cell, or delete it and re-run the %%agent cell that wrote it to run the agent's code again")
_NOT_APPROVALS = ("policy:", "recorded:")  # a headless policy short of `all`, a replayed decision
_EDITED = "edited"  # the refusal that means a person changed the cell's source


def _source(cell: Any) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _meta(cell: Any) -> Any:
    return (cell.get("metadata") or {}).get("nbagent") if isinstance(cell, dict) else None


def is_ran(cell: Any) -> bool:
    """A cell the agent wrote and ran (run_cell, replace_cell)."""
    meta = _meta(cell)
    return cell.get("cell_type", "code") == "code" and isinstance(meta, dict) and meta.get("ran") is True


def is_agent_request(cell: Any) -> bool:
    return cell.get("cell_type") == "code" and _source(cell).lstrip().startswith("%%agent")


# ------------------------------------------------------------------------------------------ the approval check


def agent_cell_clearance(store: Any, cell: Any) -> str | None:
    """Whether `nbagent run` may execute this cell: None when it may (not written by the agent, or an approval in
    the log covers exactly its code), else the one line saying why not and what a person can do.

    A cell the agent wrote (`metadata.nbagent`, see ipython/cells.py and ipython/run_cell.py) runs only when its
    run's log holds the `tool_call_started` of that call (`insert_code_cell`, or `run_cell` / `replace_cell` for a
    cell marked `ran`) with an `approval_event_id` naming a `plan_approved` of that run, given by a person or
    `--approve all` (not `low`, not a replayed decision), for a plan that listed this call with these arguments at
    WRITE_HIGH_RISK, and the code recorded there gives exactly the cell's source now. The metadata only says where
    to look: everything is checked in the log."""
    meta = _meta(cell)
    if meta is None or cell.get("cell_type", "code") != "code":
        return None
    ran = is_ran(cell)
    why, where = _refusal(store, cell, meta, ran)
    if why is None:
        return None
    if not ran:
        return f"nbagent: not run: the agent wrote this cell{where} and {why}; {_WHAT_TO_DO}"
    if why == _EDITED:
        run_id = meta.get("run_id")
        return (f"nbagent: not run: the agent wrote and ran this cell{where}, and a person changed it since its "
                f"approval (its source is not the code approved in run {run_id}); {_WHAT_TO_DO_EDITED}")
    return f"nbagent: not run: the agent wrote and ran this cell{where} and {why}; {_WHAT_TO_DO_RAN}"


def _completed(events: list[Any], call_id: str) -> Any:
    return next((e.payload for e in events if e.type == "tool_call_completed" and e.payload.call_id == call_id), None)


def _runs_exactly(recorded: Any, code: Any) -> bool:
    """`recorded` (the cell's source as the tool wrote it) is one `# nbagent:` comment line, then exactly `code`:
    the only code in it is the code approved (a `\\r` would end the comment line for Python)."""
    if not isinstance(recorded, str) or not isinstance(code, str):
        return False
    header, sep, body = recorded.partition("\n")
    return bool(sep) and header.startswith("# nbagent:") and "\r" not in header and \
        body.rstrip() == code.rstrip() and body.rstrip() != ""


def _refusal(store: Any, cell: Any, meta: Any, ran: bool = False) -> tuple[str | None, str]:
    from nbagent.events.levels import Risk

    if not isinstance(meta, dict):
        return "its \"nbagent\" metadata is not what nbagent writes", ""
    run_id, call_id = meta.get("run_id"), meta.get("call_id")
    if not isinstance(run_id, str) or not run_id or not isinstance(call_id, str) or not call_id:
        return ("its metadata names no run and call to check an approval against (an older nbagent wrote it, or "
                "it was edited)"), ""
    where = f" (run {run_id}, call {call_id})"
    if store is None or run_id not in store.run_ids():
        return f"run {run_id} is not in this notebook's log", where
    events = store.run_events(run_id)
    order = {e.id: i for i, e in enumerate(events)}
    tools = RAN_TOOLS if ran else (INSERT_TOOL,)
    started = next((e for e in events if e.type == "tool_call_started" and e.payload.call_id == call_id), None)
    if started is None or started.payload.tool not in tools:
        return f"the log of run {run_id} holds no {' or '.join(tools)} call {call_id}", where
    p = started.payload
    completed = _completed(events, call_id)
    if completed is None:
        return f"the log holds no completed {p.tool} for call {call_id}", where
    recorded = completed.result.get("source") if isinstance(completed.result, dict) else None
    if ran and (recorded is None or not same_source(_source(cell), str(recorded))):
        return _EDITED, where  # said first: the person's change is what matters to them, whoever approved the call
    if p.approval_event_id is None:
        return (f"no one approved its code: the call ran because \"{p.reason or 'no reason recorded'}\", which is "
                "not an approval of running it"), where
    approval = next((e for e in events if e.id == p.approval_event_id), None)
    if approval is None or approval.type != "plan_approved" or order[approval.id] > order[started.id] or \
            approval.payload.plan_id != p.plan_id:
        return f"the approval it names ({p.approval_event_id}) is not a plan_approved of run {run_id}", where
    by = approval.payload.by or ""
    if by.startswith(_NOT_APPROVALS) and by != "policy:all":
        return f"its plan was approved by {by}, not by a person or --approve all", where
    plan = next((e for e in events if e.type == "plan_proposed" and e.payload.plan_id == p.plan_id
                 and order[e.id] < order[approval.id]), None)
    step = next((s for s in plan.payload.steps if s.call_id == call_id), None) if plan is not None else None
    if step is None or step.tool != p.tool or _canonical(step.arguments) != _canonical(p.arguments):
        return f"the approved plan {p.plan_id} does not list this call with this code", where
    if Risk(step.risk) != Risk.WRITE_HIGH_RISK:
        return f"its plan was approved as {Risk(step.risk).value}: the card did not say the code would run", where
    code, explanation = p.arguments.get("code"), p.arguments.get("explanation", "")
    if ran:
        return (None if _runs_exactly(recorded, code) else _EDITED), where
    if not isinstance(code, str) or not isinstance(explanation, str) or \
            _source(cell).rstrip() != cell_source(code, run_id, explanation).rstrip():
        return f"its source is not the code approved in run {run_id} (it was edited since)", where
    return None, where


def _canonical(value: Any) -> str:
    from nbagent.events.envelope import canonical_json

    try:
        return canonical_json(value)
    except (TypeError, ValueError):
        return repr(value)


# ------------------------------------------------------------------------------------------ before: taken out


def open_store(store_path: Path | None) -> Any:
    from nbagent.store import Store

    return Store(store_path, readonly=True) if store_path is not None and (store_path / "meta.json").exists() \
        else None


def _writer(store: Any, nb: Any, index: int) -> str | None:
    """The id of the `%%agent` cell that wrote the ran cell at `index`: its run's cell in the log, else the cell the
    logged result names, else the nearest `%%agent` cell above it."""
    meta = _meta(nb.cells[index])
    run_id = meta.get("run_id")
    if store is not None and isinstance(run_id, str) and run_id in store.run_ids():
        cell_id = store.run_state(run_id).cell_id
        if cell_id:
            return str(cell_id)
        done = _completed(store.run_events(run_id), str(meta.get("call_id")))
        after = done.result.get("after_cell_id") if done is not None and isinstance(done.result, dict) else None
        if after:
            return str(after)
    for cell in reversed(nb.cells[:index]):
        if is_agent_request(cell):
            return str(cell.get("id"))
    return None


def _unchanged(store: Any, cell: Any) -> bool:
    """The cell's source is exactly what its tool wrote, as the log records it: nothing of a person's in it."""
    meta = _meta(cell)
    run_id, call_id = meta.get("run_id"), meta.get("call_id")
    if store is None or not isinstance(run_id, str) or run_id not in store.run_ids():
        return False
    done = _completed(store.run_events(run_id), str(call_id))
    if done is None or done.tool not in RAN_TOOLS or not isinstance(done.result, dict):
        return False
    recorded = done.result.get("source")
    return isinstance(recorded, str) and same_source(_source(cell), recorded)




def take_out_ran_cells(nb: Any, store: Any) -> list[tuple[str, str, Any]]:
    """Takes out of `nb` the ran cells whose `%%agent` cell is in the notebook to re-execute and whose source is
    exactly what the agent wrote; returns them as (their `%%agent` cell's id, the id of the cell they followed,
    the cell), for `put_back`. A cell a person changed, or one that cannot be checked, stays."""
    requests = {str(c.get("id")) for c in nb.cells if is_agent_request(c)}
    out: list[tuple[str, str, Any]] = []
    keep: list[Any] = []
    for i, cell in enumerate(nb.cells):
        writer = _writer(store, nb, i) if is_ran(cell) else None
        if writer is not None and writer in requests and _unchanged(store, cell):
            anchor = str(keep[-1].get("id")) if keep else ""
            out.append((writer, anchor, cell))
        else:
            keep.append(cell)
    nb.cells = keep
    return out


def put_back(nb: Any, taken: list[tuple[str, str, Any]], rewritten: set[str]) -> int:
    """The cells taken out whose `%%agent` cell wrote no ran cells in this execution (not reached, its calls
    denied), back where they were; returns how many."""
    back = 0
    last: dict[str, Any] = {}
    for writer, anchor, cell in taken:
        ids = [str(c.get("id")) for c in nb.cells]
        if writer in rewritten or str(cell.get("id")) in ids:  # written anew (a replace may reuse its id)
            continue
        after = last.get(anchor, anchor)
        at = ids.index(after) + 1 if after in ids else 0
        nb.cells.insert(at, cell)
        last[anchor] = str(cell.get("id"))
        back += 1
    return back


# ------------------------------------------------------------------------------------------ while: outputs


class Outputs:
    """IOPub output messages whose parent is not a request this client sent: the cells the agent runs (parent M).
    `tap` wraps the kernel client's IOPub `get_msg`, which nbclient reads every message through."""

    KINDS = ("stream", "display_data", "update_display_data", "clear_output", "execute_result", "error")

    def __init__(self) -> None:
        self.own: set[str] = set()
        self.by_parent: dict[str, list[dict[str, Any]]] = {}

    def see(self, msg: Any) -> None:
        if not isinstance(msg, dict):
            return
        kind = (msg.get("header") or {}).get("msg_type") or msg.get("msg_type")
        parent = (msg.get("parent_header") or {}).get("msg_id")
        if kind in self.KINDS and parent and parent not in self.own:
            self.by_parent.setdefault(str(parent), []).append(msg)

    def tap(self, channel: Any) -> None:
        plain = channel.get_msg

        async def get_msg(*args: Any, **kwargs: Any) -> Any:
            msg = plain(*args, **kwargs)
            if inspect.isawaitable(msg):
                msg = await msg
            self.see(msg)
            return msg

        channel.get_msg = get_msg


def outputs_from_messages(msgs: list[dict[str, Any]]) -> list[Any]:
    """The outputs a front end shows for these IOPub messages: clear_output (also `wait`), update_display_data by
    display id, adjacent stream texts of one name made one."""
    from nbformat.v4 import output_from_msg

    outs: list[Any] = []
    ids: list[str | None] = []
    clear_next = False
    for msg in msgs:
        kind = (msg.get("header") or {}).get("msg_type") or msg.get("msg_type")
        content = msg.get("content") or {}
        display_id = (content.get("transient") or {}).get("display_id")
        if kind == "clear_output":
            if content.get("wait"):
                clear_next = True
            else:
                outs, ids, clear_next = [], [], False
            continue
        if kind == "update_display_data":
            for o, i in zip(outs, ids, strict=True):
                if display_id and i == display_id:
                    o["data"] = content.get("data", {})
                    o["metadata"] = content.get("metadata", {})
            continue
        if clear_next:
            outs, ids, clear_next = [], [], False
        out = output_from_msg(msg)
        last = outs[-1] if outs else None
        if kind == "stream" and last is not None and last.get("output_type") == "stream" and \
                last.get("name") == out.get("name"):
            last["text"] += out.get("text", "")
            continue
        outs.append(out)
        ids.append(display_id)
    return outs


def outputs_from_result(result: dict[str, Any]) -> list[Any]:
    """When no IOPub message of the cell came: the text outputs the logged tool result holds."""
    from nbformat import v4

    outs: list[Any] = []
    for name in ("stdout", "stderr"):
        if isinstance(result.get(name), str) and result[name]:
            outs.append(v4.new_output("stream", name=name, text=result[name]))
    for o in result.get("outputs") or []:
        if not isinstance(o, dict) or o.get("output_type") not in ("display_data", "execute_result"):
            continue
        text = o.get("text") if isinstance(o.get("text"), str) else "; ".join(map(str, o.get("images") or []))
        if o["output_type"] == "execute_result":
            outs.append(v4.new_output("execute_result", data={"text/plain": text},
                                      execution_count=result.get("execution_count")))
        else:
            outs.append(v4.new_output("display_data", data={"text/plain": text}))
    error = result.get("error")
    if isinstance(error, str) and error:
        ename, _, evalue = error.partition(": ")
        trace = result.get("traceback")
        outs.append(v4.new_output("error", ename=ename, evalue=evalue,
                                  traceback=trace.splitlines() if isinstance(trace, str) and trace else [error]))
    return outs


def _redacted(outs: list[Any], redactor: Any) -> list[Any]:
    """The outputs read from IOPub, redacted as the kernel redacts them (ipython/cell_redaction.py): what it cannot
    reach (a cell's error as ipykernel sent it, what the agent's code printed after its cell ended) is not written."""
    import nbformat

    from nbagent.secrets.outputs import redact_output

    return [nbformat.from_dict(redact_output(redactor, dict(o))) for o in outs]


# ------------------------------------------------------------------------------------------ after: written


def _place(nb: Any, after: Any, run_id: str) -> int:
    """As the lab extension places a cell: below the agent's cell, after the cells this run already wrote."""
    ids = [c.get("id") for c in nb.cells]
    at = ids.index(after) + 1 if after in ids else len(nb.cells)
    while at < len(nb.cells) and (_meta(nb.cells[at]) or {}).get("run_id") == run_id:
        at += 1
    return at


def write_agent_cells(nb: Any, store: Any, run_ids: list[str], outputs: Outputs | None = None) -> set[str]:
    """The cells the runs `run_ids` wrote, into `nb` from their logs: inserted cells (not run), ran cells with
    their outputs and execution count, replaced cells updated in place. Returns the ids of the `%%agent` cells
    whose runs wrote ran cells (their old ran cells are not put back)."""
    import nbformat

    from nbagent.secrets.redactor import Redactor

    redactor = Redactor()
    rewritten: set[str] = set()
    written: set[str] = set()  # ids of the ran cells written here
    for run_id in run_ids:
        agent_cell = store.run_state(run_id).cell_id
        for e in store.run_events(run_id):
            r = e.payload.result if e.type == "tool_call_completed" else None
            if not isinstance(r, dict) or not isinstance(r.get("source"), str):
                continue
            after = r.get("after_cell_id") or agent_cell
            if e.payload.tool == INSERT_TOOL and r.get("inserted"):
                nb.cells.insert(_place(nb, after, run_id),
                                nbformat.v4.new_code_cell(r["source"], metadata=r.get("metadata") or {}))
                continue
            if e.payload.tool not in RAN_TOOLS or not r.get("ran") or not isinstance(r.get("cell_id"), str):
                continue
            rewritten.add(str(agent_cell or after))
            msgs = outputs.by_parent.get(str(r.get("msg_id")), []) if outputs is not None else []
            fields = {"source": r["source"], "metadata": nbformat.from_dict(r.get("metadata") or {}),
                      "execution_count": r.get("execution_count") if isinstance(r.get("execution_count"), int)
                      else None,
                      "outputs": _redacted(outputs_from_messages(msgs), redactor) if msgs else outputs_from_result(r)}
            target = next((c for c in nb.cells if c.get("id") == r["cell_id"]), None)
            if target is not None and r.get("replaced") and (r["cell_id"] in written or _unchanged(store, target)):
                target.update(fields)  # the agent's own cell, as it wrote it: replaced in place
                continue
            # a new cell; beside a cell of that id a person changed (kept: never overwritten), under an id of its own
            new_id = r["cell_id"] if target is None else uuid.uuid4().hex
            nb.cells.insert(_place(nb, after, run_id), nbformat.v4.new_code_cell(id=new_id, **fields))
            written.add(new_id)
    return rewritten
