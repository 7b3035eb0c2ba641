"""What ends `nbagent run` before its notebook's end: `--timeout`, Ctrl-C and SIGTERM (docs/cli.md).

Each stops the notebook as the stop button stops it in JupyterLab: the kernel is interrupted, so the cell that runs
fails there (an `%%agent` cell's run is recorded as interrupted, its model call cancelled in the model process, and
the run can be resumed), no later cell runs, and the executed notebook and the summary are written as far as the
notebook got. A cell past `--timeout` is a failure (exit 1); a signal exits 128 + its number (130 for Ctrl-C, 143 for
SIGTERM), as a shell reports a program it stopped. A kernel that does not end its cell within STOP_GRACE_S of the
interrupt (code in C that never returns to Python), or a second signal, has the kernel shut down at once.

This is mixed into the runner's nbclient client (runner._client_class). nbclient's own handlers for these signals
shut the kernel down without interrupting it, so the run in it was never told and stayed `running` in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

STOP_GRACE_S = 10.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stops:
    """The stopping half of the runner's client: `listen` once the kernel's client runs, `before_cell` before each
    cell, `stop_listening` at the end; `why` words a cell's failure with what stopped it."""

    km: Any
    timeout: int | None
    stopped_by: int | None = None  # the signal that stopped the notebook
    timed_out: str | None = None  # the id of the cell that ran past --timeout
    executing: bool = False

    def listen(self) -> None:
        """Take SIGINT and SIGTERM over from nbclient (which only shuts the kernel down) while the notebook runs."""
        self._stop_tasks: set[asyncio.Task[None]] = set()
        loop = asyncio.get_running_loop()
        for signum in SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
                loop.add_signal_handler(signum, self._on_signal, signum)

    def stop_listening(self) -> None:
        for task in list(getattr(self, "_stop_tasks", ())):
            task.cancel()

    def before_cell(self) -> None:
        """No cell runs once the notebook was stopped (the signal may come between two cells)."""
        if self.stopped_by is not None:
            from nbclient.exceptions import CellExecutionError

            raise CellExecutionError("", "Stopped", "not run: nbagent run was stopped")

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        loop = asyncio.get_running_loop()
        if self.stopped_by is not None:  # a second one: no more waiting
            print(f"nbagent run: {name} again: shutting the kernel down now", file=sys.stderr)
            self._keep(loop.create_task(self._shut_down()))
            return
        self.stopped_by = signum
        print(f"nbagent run: {name}: interrupting the kernel; what ran is saved (again to stop at once)",
              file=sys.stderr)
        self._keep(loop.create_task(self._interrupt_then_shut_down()))

    def _keep(self, task: asyncio.Task[None]) -> None:
        self._stop_tasks.add(task)
        task.add_done_callback(self._stop_tasks.discard)

    async def _interrupt_then_shut_down(self) -> None:
        await _maybe_await(self.km.interrupt_kernel())
        await asyncio.sleep(STOP_GRACE_S)
        if self.executing:  # the cell did not end when interrupted
            print(f"nbagent run: the cell did not end within {STOP_GRACE_S:g} s of the interrupt: shutting the "
                  "kernel down", file=sys.stderr)
            await self._shut_down()

    async def _shut_down(self) -> None:
        with contextlib.suppress(Exception):  # gone already
            await _maybe_await(self.km.shutdown_kernel(now=True))

    def timed_out_cell(self, cell: Any) -> bool:
        """Called by nbclient's timeout handling: True the first time a cell runs past --timeout (it is interrupted,
        as nbclient's `interrupt_on_timeout` does); False when it still runs after that (nbclient then gives up)."""
        cell_id = str(cell.get("id")) if cell is not None else ""
        if self.timed_out == cell_id:
            return False
        self.timed_out = cell_id
        return True

    def why(self, cell_error: str | None) -> str | None:
        """The failure `nbagent run` reports, with what stopped the notebook before it."""
        if self.stopped_by is not None:
            name = signal.Signals(self.stopped_by).name
            return f"stopped by {name}" + (f": {cell_error}" if cell_error else "")
        if self.timed_out is not None and cell_error is not None:
            return f"a cell ran past --timeout {self.timeout} s and was interrupted: {cell_error}"
        return cell_error


def record_left_running(store_path: Path, run_ids: list[str], signum: int) -> list[str]:
    """Record as interrupted the runs a stopped notebook's kernel left `running` (a second signal shuts it down
    before it could record its own interrupt), as the kernel would have: the log says what happened, and
    `%agent resume` continues them. A run another process drives (its lease held) is left to it. Returns their ids."""
    from nbagent.events.model import Interrupted
    from nbagent.events.state import RunStatus
    from nbagent.store import Store

    store = Store(store_path)
    marked = []
    try:
        for run_id in run_ids:
            if store.run_state(run_id).status != RunStatus.RUNNING or store.in_progress(run_id):
                continue
            lease = store.lease(run_id)
            try:
                lease.acquire()
            except Exception:  # taken meanwhile
                continue
            try:
                store.append(Interrupted(reason=signal.Signals(signum).name), run_id=run_id)
                marked.append(run_id)
            finally:
                store.release_lease(run_id, lease)
    finally:
        store.close()
    return marked


async def _maybe_await(value: Any) -> Any:
    return await value if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future) else value


__all__ = ["SIGNALS", "STOP_GRACE_S", "Stops", "record_left_running"]
