"""What the bases of `NotebookHost` may use of the host, declared for the type checker.

`NotebookHost` (host.py) is made of bases, one module each: the `%%agent` cell path (agent_cell.py), the `%agent`
commands (commands.py) and the notes that keep a run's outputs current (notes.py). Each uses the host's state,
set in `NotebookHost.__init__`, and methods that host.py or another base defines. `HostState`, the base of those
bases, declares them once, so each is checked against what the host really has (a base that reads a name the host
lacks, or calls a method with other arguments, is a type error). At run time it is an empty class: the
declarations are read only by the type checker, and every name resolves to the host's own, as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbagent.ipython.agent_cells import Registry
    from nbagent.ipython.kernel_decider import KernelDecider
    from nbagent.ipython.live import LiveDisplay
    from nbagent.ipython.notes import Shown
    from nbagent.ipython.outputs import OutputCapture
    from nbagent.ipython.parameters import Parameters
    from nbagent.ipython.rerun import Reruns
    from nbagent.runtime import Agent as RuntimeAgent
    from nbagent.runtime import RunResult
    from nbagent.store import Store
    from nbagent.tools.base import Tool


class HostState:
    """The host's state and the methods its bases share (see the module's docstring); nothing at run time."""

    if TYPE_CHECKING:
        # set by NotebookHost.__init__ (host.py), where each is described
        shell: Any
        overrides: dict[str, Any]
        frontend_seen: bool
        unanswerable: Any
        display_ids: dict[str, list[Shown]]
        interrupt_notes: dict[str, list[str]]
        status_display: str | None
        no_wait: bool
        last_error: dict[str, str] | None
        current_cell: str | None
        current_run: str | None
        outputs: OutputCapture
        parameters: Parameters
        agent_cells: Registry
        reproduce_next: dict[str, str]  # cell id -> the run its next execution reproduces (%agent reproduce RUN)
        rerun_noted: str | None  # the execution whose "asking again" line is shown (agent_cell.note_rerun)
        reruns: Reruns

        # host.py
        @property
        def notebook(self) -> Path: ...
        @property
        def folder(self) -> Path: ...
        @property
        def store(self) -> Store: ...
        @property
        def decider(self) -> KernelDecider: ...
        def cell_id(self) -> str | None: ...
        def settings(self, args: Any | None = None) -> dict[str, tuple[Any, str]]: ...
        def all_tools(self, mcp: str | None = None, *, approve: str | None = None, session: str | None = None,
                      cell_mcp: str | None = None, notes: bool = True) -> list[Tool]: ...
        def _path(self, value: str) -> Path: ...
        def frontend_rendered(self) -> None: ...
        async def someone_can_answer(self) -> bool: ...

        # agent_cell.py (CellPath)
        async def start_run(self, args: Any, prompt: str, context: list[dict[str, Any]]) -> None: ...
        def make_agent(self, cfg: dict[str, Any], *, session_name: str, replay: str | None = None,
                       recorded_from: str | None = None, cell_mcp: str | None = None) -> RuntimeAgent: ...
        async def drive(self, agent: RuntimeAgent, start: Callable[[], Awaitable[RunResult]],
                        run_id: str | None = None) -> RunResult | None: ...

        # notes.py (RecordNotes)
        def continuation_text(self, run_id: str) -> str: ...
        def _update_earlier(self, run_id: str, live: LiveDisplay) -> None: ...
        def _refresh_records(self, run_ids: list[str]) -> None: ...
        def _refresh_superseded(self, agent: RuntimeAgent) -> None: ...
