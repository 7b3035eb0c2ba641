"""The decider of a notebook's `%%agent` cells: inline approvals that wait for a click only where one can come.

Kept apart from the cell path (agent_cell.py) because it is a subclass of the runtime's `InteractiveDecider`:
the host makes one on its first run (`NotebookHost.decider`), so `%load_ext` does not import the deciders.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nbagent.gate.deciders import InteractiveDecider

if TYPE_CHECKING:
    from nbagent.ipython.host import NotebookHost

__all__ = ["KernelDecider"]


class KernelDecider(InteractiveDecider):
    """Waits for a click, but only when a front end has shown that someone can click (see `someone_can_answer`)."""

    def __init__(self, host: NotebookHost) -> None:
        super().__init__()
        self.host = host

    async def _wait(self, request_id: str, request: Any) -> object | None:
        if not await self.host.someone_can_answer():
            self.host.unanswerable = request
            return None
        return await super()._wait(request_id, request)
