"""`nbagent run NOTEBOOK`: execute a notebook headlessly, as CI and the README's first command do.

nbclient underneath, plus what a plain nbclient run lacks:
- cell ids: each execute_request carries `metadata.cellId` (as JupyterLab sends it), so runs are tied to cells
  and a re-run forks exactly as it would in JupyterLab;
- the notebook's path (`JPY_SESSION_NAME`), so the log lands beside the notebook;
- approvals by policy (`NBAGENT_APPROVE`): nobody is there to click;
- a one-line summary per run, and a non-zero exit when a cell fails (an unknown `{name}` in a request too), a
  run fails, is interrupted or is left waiting, or a run's tools failed or were denied (`completed_with_errors`;
  `allow_tool_errors` accepts those);
- one record per run: a run continued in a later cell (`%agent approve`, `%agent resume`) has its earlier
  records replaced by the final one, so the notebook never shows a run in two states;
- a cell the agent wrote (`insert_code_cell`: `metadata.nbagent`) runs only when the notebook's log holds an
  approval of exactly its code (`agent_cell_clearance`); otherwise it fails with one line, unsent to the kernel;
- a cell the agent ran (`run_cell`, `replace_cell`: `metadata.nbagent.ran`) is taken out before its `%%agent` cell
  re-runs (which runs that code again and writes it anew) and written back after, with the outputs the kernel sent
  for it (images kept); one a person changed since its approval stays, and fails with one line, unsent; one whose
  `%%agent` cell wrote nothing this time is put back as it was (runner_cells.py).
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from nbagent.cli.run_cells import (
    AGENT_CELL_ERROR,
    Outputs,
    agent_cell_clearance,
    open_store,
    put_back,
    take_out_ran_cells,
    write_agent_cells,
)

ERROR_WIDTH = 400  # characters of a failed run's error in its summary line (an answer gets 110): room for the
# line that says what to do (a misspelt provider: the nearest known one, how a model is written, where they are listed)


class RunSummary(BaseModel):
    run_id: str
    cell_id: str | None
    status: str
    steps: int  # tool calls
    tokens: int
    cost: float | None
    answer: str | None
    error: str | None
    tool_errors: list[str] = Field(default_factory=list)
    cell_label: str | None = None  # the shortest form of cell_id no other cell of the notebook's log shares
    model: str | None = None

    @property
    def finished(self) -> bool:
        """The run reached its end (an answer), whether or not its tools all succeeded."""
        # a superseded run counts only if it had finished its work (an answer) before it was forked away
        return self.status in ("completed", "completed_with_errors") or (
            self.status == "superseded" and self.answer is not None)

    @property
    def ok(self) -> bool:
        """Finished with every tool call done: a run whose tools failed or were denied is not a success, whatever
        its answer claims (a scripted answer cannot know that create_file found the file already there)."""
        return self.finished and self.status != "completed_with_errors"

    def line(self) -> str:
        from nbagent.ui.timeline import clip, money

        if self.status == "completed_with_errors":
            n = len(self.tool_errors)
            first = self.tool_errors[0] if self.tool_errors else "see the run's record"
            tail = f"{n or 'some'} tool error(s): {clip(first, 60)}" + (
                f" · answer: {self.answer}" if self.answer else "")
        else:
            tail = (self.answer if self.finished else (self.error or "no answer")) or ""
        from nbagent.ui.viewstate import is_nominal

        cost = money(self.cost) + (" nominal" if self.cost is not None and is_nominal(self.model) else "")
        # an error gets room for what it says is wrong, after the "model call to … failed …:" that leads it
        width = 110 if self.finished else ERROR_WIDTH
        return (f"run {self.run_id[:12]}  cell {self.cell_label or self.cell_id or '-':<12} {self.status:<21} "
                f"{self.steps} tool call(s) · {self.tokens} tokens · {cost} · {clip(tail, width)}")


class NotebookResult(BaseModel):
    notebook: str
    output: str
    runs: list[RunSummary] = Field(default_factory=list)
    cell_error: str | None = None
    stopped_by: int | None = None  # the signal (SIGINT, SIGTERM) that stopped the notebook (runner_stops.py)

    @property
    def ok(self) -> bool:
        """Every cell ran and every run finished with all its tools done."""
        return self.cell_error is None and all(r.ok for r in self.runs)

    @property
    def with_tool_errors(self) -> list[RunSummary]:
        return [r for r in self.runs if r.finished and not r.ok]

    def passed(self, allow_tool_errors: bool = False) -> bool:
        """What the exit status says: `ok`, or, with `allow_tool_errors`, runs whose tools failed count too."""
        if allow_tool_errors:
            return self.cell_error is None and all(r.finished for r in self.runs)
        return self.ok

    def verdict(self, allow_tool_errors: bool = False) -> str:
        n = len(self.runs)
        written = f"executed notebook written to {self.output}"
        if self.stopped_by is not None:
            import signal

            return (f"STOPPED by {signal.Signals(self.stopped_by).name}: {n} run(s); what ran is in the log and can be "
                    f"resumed (%agent resume RUN); {written}")
        if self.ok:
            return f"ok: {n} run(s); {written}"
        errors = self.with_tool_errors
        if self.passed(allow_tool_errors):
            return f"ok, with tool errors allowed: {n} run(s), {len(errors)} completed_with_errors; {written}"
        if self.cell_error is None and all(r.finished for r in self.runs):
            return (f"FAILED: {n} run(s), {len(errors)} completed_with_errors (a tool call failed or was denied; "
                    f"--allow-tool-errors accepts that); {written}")
        return f"FAILED: {n} run(s); {written}"


# ------------------------------------------------------------------------------------------ cells the agent wrote

__all__ = ["AGENT_CELL_ERROR", "NotebookError", "NotebookResult", "RunSummary", "agent_cell_clearance",
           "main_run", "read_notebook", "run_notebook"]


def _source(cell: Any) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


# ------------------------------------------------------------------------------------------ reading

class NotebookError(ValueError):
    """NOTEBOOK cannot be run, or OUTPUT written: the message is one line saying which file, what is wrong and what
    to do (`nbagent run` prints it and exits 2, as for any bad input)."""


def read_notebook(path: Path) -> Any:
    """The notebook at `path`, as nbformat 4; NotebookError for anything else (before any kernel starts: a text
    file, JSON that is not a notebook, another nbformat version, a folder, a missing file)."""
    import json

    import nbformat

    if not path.exists():
        raise NotebookError(f"{path}: no such file; pass the path of a notebook (.ipynb)")
    if path.is_dir():
        raise NotebookError(f"{path}: a folder, not a notebook; pass the path of a notebook (.ipynb) in it")
    if path.suffix != ".ipynb":
        raise NotebookError(f"{path}: not a notebook (an .ipynb file); pass one, e.g. notebooks/quickstart.ipynb")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise NotebookError(f"{path}: not a notebook: not UTF-8 text (a notebook is JSON)") from None
    except OSError as exc:
        raise NotebookError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        where = f" (line {exc.lineno}, column {exc.colno}: {exc.msg})" if isinstance(exc, json.JSONDecodeError) else ""
        raise NotebookError(f"{path}: not a notebook: its text is not JSON{where}; was it saved whole? Open it in "
                            "JupyterLab, or restore it from version control") from None
    version = data.get("nbformat") if isinstance(data, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        raise NotebookError(f"{path}: not a notebook: JSON without an nbformat version")
    if version < 4:
        raise NotebookError(f"{path}: a notebook of nbformat {version}; nbagent runs nbformat 4: convert it first "
                            f"(`jupyter nbconvert --to notebook --output {path.stem}-v4 {path}`, or save it from "
                            "JupyterLab)")
    if version > 4:
        raise NotebookError(f"{path}: a notebook of nbformat {version}, newer than the nbformat 4 nbagent runs; save "
                            "it as nbformat 4")
    try:
        return newest_minor(nbformat.reads(text, as_version=4))
    except Exception as exc:  # nbformat's own checks: a cell that is not an object, ...
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise NotebookError(f"{path}: not a notebook nbagent can read: {first}") from None


def newest_minor(nb: Any) -> Any:
    """`nb` as nbformat 4.5, the first with cell ids (which tie runs to cells), by nbformat's own upgrade and
    normalisation, so the notebook written back validates. Ids already there (an earlier `nbagent run` wrote them
    beside an older minor version) are kept: the log names its cells by them."""
    import nbformat

    kept = [cell.get("id") for cell in nb.cells]
    nb = nbformat.v4.upgrade(nb)  # 4.0-4.4: nbformat_minor 5, and an id for each cell
    for cell, cell_id in zip(nb.cells, kept, strict=True):
        if cell_id:
            cell["id"] = cell_id
    return nbformat.from_dict(nbformat.validator.normalize(nb)[1])  # missing or repeated ids made unique


def _show_log_end(path: str, lines: int = 20) -> None:
    """The last lines the kernel wrote to its log before it died: the one clue to why."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    for line in text.splitlines()[-lines:]:
        print(f"kernel: {line}", file=sys.stderr)


def cell_error_line(exc: Any) -> str:
    """What a failed cell says, as `nbagent run`'s "a cell failed:" quotes it: the error's own line (`ename:
    evalue`, the first line of the value), not the end of the traceback text (an argparse usage line, the row of
    dashes nbclient puts after a cell's output)."""
    import re

    ename = re.sub(r"\x1b\[[0-9;]*m", "", str(getattr(exc, "ename", "") or "")).strip()
    evalue = re.sub(r"\x1b\[[0-9;]*m", "", str(getattr(exc, "evalue", "") or ""))
    first = next((line.strip() for line in evalue.splitlines() if line.strip()), "")
    if not ename or ename == "<Error>":
        return first or "a cell failed"
    return f"{ename}: {first}" if first else ename


# ------------------------------------------------------------------------------------------ executing


def _client_class() -> Any:
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    from nbagent.cli.run_stops import Stops

    class CellIdClient(Stops, NotebookClient):
        """Sends each cell's id with its execute_request, as JupyterLab does; a cell the agent wrote runs only when
        an approval in the notebook's log covers exactly its code (`agent_cell_clearance`); --timeout, Ctrl-C and
        SIGTERM interrupt the kernel (runner_stops.py)."""

        current_cell_id: str | None = None
        store_path: Path | None = None
        outputs: Outputs | None = None  # the IOPub outputs of cells the agent runs (their own parent msg id)

        async def async_execute_cell(self, cell: Any, cell_index: int, execution_count: int | None = None,
                                     store_history: bool = True) -> Any:
            self.before_cell()
            self.current_cell_id = cell.get("id")
            if cell.get("cell_type") == "code" and "nbagent" in (cell.get("metadata") or {}) and \
                    _source(cell).strip():
                why = agent_cell_clearance(open_store(self.store_path), cell)
                if why is not None:  # never sent to the kernel: failed as any failing cell, in one line
                    from nbformat import v4

                    cell.outputs = [v4.new_output("error", ename=AGENT_CELL_ERROR, evalue=why,
                                                  traceback=[f"{AGENT_CELL_ERROR}: {why}"])]
                    cell.execution_count = None
                    raise CellExecutionError("", AGENT_CELL_ERROR, why)
            # the kernel's own count (execute_input), not nbclient's count of the cells it sent: the cells the agent
            # ran took counts of their own, so nbclient's numbering would put [4] above [3]
            self.executing = True
            try:
                return await super().async_execute_cell(cell, cell_index, None, store_history)
            finally:
                self.executing = False

        async def _async_handle_timeout(self, timeout: int, cell: Any = None) -> Any:
            if not self.timed_out_cell(cell):  # interrupted once already, and still running: nbclient gives up
                raise CellTimeoutError.error_from_timeout_and_cell("Cell execution timed out", timeout, cell)
            return await super()._async_handle_timeout(timeout, cell)  # interrupted (interrupt_on_timeout)

        async def async_start_new_kernel_client(self) -> Any:
            kc = await super().async_start_new_kernel_client()
            self.listen()  # after nbclient's own handlers: these replace them
            plain_execute = kc.execute
            seen = self.outputs = Outputs()
            seen.tap(kc.iopub_channel)

            def execute(code: str, silent: bool = False, store_history: bool = True,
                        user_expressions: dict[str, Any] | None = None, allow_stdin: bool | None = None,
                        stop_on_error: bool = True) -> str:
                if self.current_cell_id is None:
                    sent = plain_execute(code, silent=silent, store_history=store_history,
                                         user_expressions=user_expressions, allow_stdin=allow_stdin,
                                         stop_on_error=stop_on_error)
                    seen.own.add(str(sent))
                    return sent
                content = {"code": code, "silent": silent, "store_history": store_history,
                           "user_expressions": user_expressions or {}, "allow_stdin": False,
                           "stop_on_error": stop_on_error}
                msg = kc.session.msg("execute_request", content, metadata={"cellId": self.current_cell_id})
                seen.own.add(str(msg["header"]["msg_id"]))
                kc.shell_channel.send(msg)
                return str(msg["header"]["msg_id"])

            kc.execute = execute  # type: ignore[method-assign]  # this client only: it sends the cell id
            return kc

    return CellIdClient


def run_notebook(path: str | Path, *, output: str | Path | None = None, approve: str = "none",
                 model: str | None = None, timeout: int = 600, kernel_name: str = "python3",
                 env: dict[str, str] | None = None) -> NotebookResult:
    import nbformat
    from jupyter_core.utils import run_sync
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    from nbagent.store import Store, store_path_for

    nb = read_notebook(Path(path))
    nb_path = Path(path).resolve()
    out_path = Path(output).resolve() if output else nb_path
    if output and (out_path.is_dir() or not out_path.parent.is_dir()):
        what = "a folder" if out_path.is_dir() else f"in a folder that does not exist ({out_path.parent})"
        raise NotebookError(f"{output}: the output is {what}; pass a file path for the executed notebook")
    if not _writable(out_path):  # found before anything runs: what the runs did could not be saved
        raise NotebookError(f"{out_path}: cannot write the executed notebook there (not writable); nothing was run. "
                            + ("Copy the notebook to a writable folder (its log is kept beside it) and run it there"
                               if out_path == nb_path else "Pass --output FILE in a writable folder"))
    store_path = store_path_for(nb_path)
    before = set(Store(store_path, readonly=True).run_ids()) if (store_path / "meta.json").exists() else set()
    # the cells the agent ran, which their %%agent cell runs again and writes anew (a person's edit stays)
    taken = take_out_ran_cells(nb, open_store(store_path))
    # runs carry this execution's id: another process running the same notebook at the same time makes runs
    # of its own, which this summary must not count (nor their failures hide this one's)
    execution = uuid.uuid4().hex
    kernel_env = {**os.environ, **(env or {}), "JPY_SESSION_NAME": str(nb_path), "NBAGENT_APPROVE": approve,
                  "NBAGENT_HEADLESS": "1", "NBAGENT_EXECUTION": execution}
    if model:
        kernel_env["NBAGENT_MODEL"] = model
    import tempfile

    from jupyter_client import AsyncKernelManager

    # ipc: the kernel's sockets are files in a private folder, not TCP ports open on the machine. The path
    # must be absolute: the kernel runs in the notebook's folder, the client wherever it was started.
    sockets = tempfile.mkdtemp(prefix="nbagent-kernel-")
    # async: nbclient reads the kernel's messages on its event loop; a blocking client's reads stall that loop until
    # each cell ends, so neither --timeout nor a signal could act while a cell ran
    km = AsyncKernelManager(kernel_name=kernel_name, transport="ipc", ip=os.path.join(sockets, "kernel"))
    # coalesce_streams: adjacent stream outputs become one, as JupyterLab saves them (a print split across
    # messages by a busy machine reads the same); interrupt_on_timeout: a cell past --timeout is interrupted as the
    # stop button does (its run recorded as interrupted), then fails
    client = _client_class()(nb, km=km, timeout=timeout, kernel_name=kernel_name, coalesce_streams=True,
                             interrupt_on_timeout=True, resources={"metadata": {"path": str(nb_path.parent)}})
    client.store_path = store_path
    cell_error = None
    # The kernel's own log (fd 2: tornado's and ipykernel's messages, e.g. a race at shutdown) goes to a file, as
    # a Jupyter server keeps it out of the notebook: `nbagent run` says one line per failure, and shows the log's
    # end only when the kernel died.
    kernel_log_path = os.path.join(sockets, "kernel.log")
    with open(kernel_log_path, "wb") as kernel_log:
        try:
            client.execute(env=kernel_env, cwd=str(nb_path.parent), stderr=kernel_log)
        except CellExecutionError as exc:
            cell_error = cell_error_line(exc)
        except CellTimeoutError:
            cell_error = "it did not end when interrupted, and its kernel was shut down"
        except DeadKernelError as exc:
            cell_error = f"the kernel died: {exc}" if client.stopped_by is None else "its kernel was shut down"
            if client.stopped_by is None:
                _show_log_end(kernel_log_path)
        finally:
            client.stop_listening()
            if km.has_kernel:  # nbclient leaves a kernel it was given running
                run_sync(km.shutdown_kernel)(now=False)
            import shutil

            shutil.rmtree(sockets, ignore_errors=True)
    cell_error = client.why(cell_error)
    store = open_store(store_path)
    ours = [r for r in store.run_ids() if r not in before and store.run_state(r).options.get(
        "execution", execution) == execution] if store is not None else []
    if client.stopped_by is not None and ours:
        from nbagent.cli.run_stops import record_left_running

        record_left_running(store_path, ours, client.stopped_by)
        store = open_store(store_path)
    put_back(nb, taken, write_agent_cells(nb, store, ours, client.outputs) if store is not None else set())
    latest_records(nb)
    from nbagent.secrets.redactor import Redactor, env_secrets

    redactor = Redactor(env_secrets(kernel_env))
    _redact_notebook(nb, redactor)
    try:
        nbformat.write(nb, out_path)
    except OSError as exc:  # it became unwritable while the notebook ran: the runs are in the log all the same
        raise NotebookError(f"{out_path}: cannot write the executed notebook ({exc.strerror or exc}); its runs are "
                            f"in the log ({store_path}): `nbagent runs` lists them. Pass --output FILE in a writable "
                            "folder") from None
    runs = []
    if (store_path / "meta.json").exists():
        store = Store(store_path, readonly=True)
        for run_id in store.run_ids():
            if run_id in before:
                continue
            s = store.run_state(run_id)
            if s.parent_run_id is not None or s.options.get("execution", execution) != execution:
                continue
            error = s.error or (f"waiting for {s.pending.kind}" if s.pending else None)
            runs.append(RunSummary(run_id=run_id, cell_id=s.cell_id, status=s.status.value, steps=len(s.steps),
                                   model=s.model,
                                   tokens=s.tokens, cost=s.cost if s.cost_known else None,
                                   answer=redactor.text(s.answer) if s.answer else s.answer,
                                   error=redactor.text(error) if error else error,
                                   tool_errors=[redactor.text(e) for e in s.errors]))
        from nbagent.ui.viewstate import cell_labels

        # as `nbagent runs` and the records show them: unique among every cell of the notebook's log
        labels = cell_labels(row.get("cell_id") for row in store.runs.all())
        for r in runs:
            r.cell_label = labels.get(r.cell_id or "")
    return NotebookResult(notebook=str(nb_path), output=str(out_path), runs=runs,
                          cell_error=redactor.text(cell_error) if cell_error else None, stopped_by=client.stopped_by)


def _writable(path: Path) -> bool:
    """Whether the executed notebook can be written at `path` (a read-only mount stops root too: access(2) says so)."""
    return os.access(path, os.W_OK) if path.exists() else os.access(path.parent, os.W_OK | os.X_OK)


def latest_records(nb: Any) -> int:
    """Every output holding a record of a run shows the run's newest record in the notebook (the highest
    `revision`: how far into the log it goes). A run continued in a later cell (`%agent approve`, `resume`)
    leaves its first cell saying "interrupted · waiting" otherwise; the kernel updates that output through its
    display id, and this is the same rule for what the kernel could not reach (an earlier kernel's outputs).
    Returns how many outputs were replaced."""
    import copy

    from nbagent.ui.viewstate import MIME

    shown: list[tuple[dict[str, Any], dict[str, Any]]] = []
    newest: dict[str, dict[str, Any]] = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            view = (out.get("data") or {}).get(MIME)
            if not isinstance(view, dict) or not view.get("run_id"):
                continue
            shown.append((out, view))
            best = newest.get(view["run_id"])
            if best is None or int(view.get("revision") or 0) > int(best[MIME].get("revision") or 0):
                newest[view["run_id"]] = out["data"]
    replaced = 0
    for out, view in shown:
        latest = newest[view["run_id"]]
        if latest is not out["data"] and int(latest[MIME].get("revision") or 0) > int(view.get("revision") or 0):
            out["data"] = copy.deepcopy(latest)
            replaced += 1
    return replaced


def _redact_notebook(nb: Any, redactor: Any) -> None:
    """What nbagent put in the notebook, redacted once more before it is written: the widget state nbclient
    saved (the live view's `view` and `streaming` traits) and the outputs of agent cells. The log and the
    stream are redacted at the source; this is the last line, for whatever a listener or an old kernel missed.
    Other cells' outputs are the user's own and stay as they are."""
    from nbformat import from_dict

    widgets = nb.metadata.get("widgets")
    if widgets:
        nb.metadata["widgets"] = from_dict(redactor.redact(widgets))
    for cell in nb.cells:
        source = cell.get("source", "")
        if cell.get("cell_type") == "code" and source.lstrip().startswith(("%%agent", "%agent")):
            cell["outputs"] = from_dict(redactor.redact(cell.get("outputs", [])))


def main_run(args: Any) -> int:
    """Exit status: 0 when every cell ran and every run finished with all its tools done; 1 otherwise (a cell past
    --timeout too); 128 + the signal's number when Ctrl-C (130) or SIGTERM (143) stopped it. A run whose tools
    failed or were denied (`completed_with_errors`) is a failure unless `args.allow_tool_errors`."""
    allow = bool(getattr(args, "allow_tool_errors", False))
    result = run_notebook(args.notebook, output=args.output, approve=args.approve, model=args.model,
                          timeout=args.timeout)
    for r in result.runs:
        print(r.line())
    if result.cell_error:
        print(f"a cell failed: {result.cell_error}", file=sys.stderr)
    print(result.verdict(allow))
    if result.stopped_by is not None:
        return 128 + result.stopped_by
    return 0 if result.passed(allow) else 1
