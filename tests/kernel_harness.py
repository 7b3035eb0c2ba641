"""A real kernel driven like JupyterLab drives it: cell ids in execute_request metadata, widget clicks as the
custom comm messages the run view's front end sends (`model.send`, docs/architecture.md: a click is never lost
while a cell awaits; never a state sync, which ipywidgets' page holds back while a cell awaits), display updates
applied the way a frontend applies them.
"""

from __future__ import annotations

import json
import os
import queue
import time
from pathlib import Path
from typing import Any

from jupyter_client import KernelManager

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
RUN_MIME = "application/vnd.nbagent.run+json"


class Cell:
    """What one execution produced, with display updates applied (as a frontend shows the output)."""

    def __init__(self, msg_id: str) -> None:
        self.msg_id = msg_id
        self.outputs: list[dict[str, Any]] = []
        self.reply: dict[str, Any] | None = None
        self.stdout = ""
        self.stderr = ""

    def apply(self, msg: dict[str, Any]) -> None:
        t, c = msg["msg_type"], msg["content"]
        if t == "stream":
            if c["name"] == "stdout":
                self.stdout += c["text"]
            else:
                self.stderr += c["text"]
        elif t in ("display_data", "execute_result"):
            self.outputs.append({"data": c["data"], "display_id": (c.get("transient") or {}).get("display_id")})
        elif t == "error":
            self.outputs.append({"error": c["ename"] + ": " + c["evalue"]})

    def update(self, msg: dict[str, Any]) -> None:
        display_id = (msg["content"].get("transient") or {}).get("display_id")
        for out in self.outputs:
            if out.get("display_id") == display_id:
                out["data"] = msg["content"]["data"]

    @property
    def notes(self) -> list[str]:
        """nbagent's notes in the cell (nbagent/ipython/notes.py `Note`: displays, not stderr), as text."""
        return [o["data"]["text/plain"] for o in self.outputs
                if "nbagent-info" in str(o.get("data", {}).get("text/html", ""))]

    @property
    def records(self) -> list[dict[str, Any]]:
        return [o["data"][RUN_MIME] for o in self.outputs if RUN_MIME in o.get("data", {})]

    @property
    def ok(self) -> bool:
        return self.reply is not None and self.reply["content"]["status"] == "ok"


class Kernel:
    def __init__(self, folder: Path, notebook: str = "test.ipynb", env: dict[str, str] | None = None,
                 frontend: bool = True, stderr: Any = None) -> None:
        self._kernel_stderr = stderr  # where the kernel process writes its stderr (default: inherited)
        self.folder = folder
        self.frontend = frontend  # act as a front end that draws run views (and says so)
        self.notebook = folder / notebook
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("NBAGENT_")}
        self.env = {**inherited, "JPY_SESSION_NAME": str(self.notebook), **(env or {})}
        import tempfile

        sockets = tempfile.mkdtemp(prefix="nbagent-test-kernel-")  # absolute: the kernel runs in `folder`
        self.km = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(sockets, "kernel"))
        self.widgets: dict[str, dict[str, Any]] = {}  # comm id -> synced state
        self.closed: dict[str, dict[str, Any]] = {}  # comm id -> the last state of a widget the kernel closed
        self.cells: dict[str, Cell] = {}  # by msg id
        self.statuses: dict[str, list[str]] = {}  # execution states published on IOPub, by parent msg id
        self._start()

    def _start(self) -> None:
        extra = {"stderr": self._kernel_stderr} if self._kernel_stderr is not None else {}
        self.km.start_kernel(env=self.env, cwd=str(self.folder), **extra)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)

    def restart(self) -> None:
        self.kc.stop_channels()
        self.km.restart_kernel(now=True)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.widgets.clear()

    # ------------------------------------------------------------------ executing

    def submit(self, code: str, cell_id: str | None = None) -> Cell:
        content = {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                   "allow_stdin": False, "stop_on_error": True}
        msg = self.kc.session.msg("execute_request", content, metadata={"cellId": cell_id} if cell_id else {})
        self.kc.shell_channel.send(msg)
        cell = Cell(msg["header"]["msg_id"])
        self.cells[cell.msg_id] = cell
        return cell

    def run(self, code: str, cell_id: str | None = None, timeout: float = 120) -> Cell:
        cell = self.submit(code, cell_id)
        self.wait(cell, timeout)
        return cell

    def pump(self, timeout: float = 0.1) -> None:
        """Apply every message that has arrived (iopub and shell replies)."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            try:
                msg = self.kc.get_iopub_msg(timeout=left)
            except queue.Empty:
                break
            self._iopub(msg)
            if time.monotonic() > deadline:
                break
        while True:
            try:
                reply = self.kc.get_shell_msg(timeout=0)
            except queue.Empty:
                break
            cell = self.cells.get(reply["parent_header"].get("msg_id", ""))
            if cell is not None:
                cell.reply = reply

    def _iopub(self, msg: dict[str, Any]) -> None:
        t, c = msg["msg_type"], msg["content"]
        if t == "status":
            self.statuses.setdefault(msg["parent_header"].get("msg_id", ""), []).append(c["execution_state"])
        if t == "comm_open" and c.get("target_name") == "jupyter.widget":
            state = dict(c["data"].get("state", {}))
            self.widgets[c["comm_id"]] = state
            if (is_run_view(state) or "offer" in state) and self.frontend:
                self.custom(c["comm_id"], {"event": "rendered"})  # what a run view's or Undo panel's JS says once drawn
        elif t == "comm_msg" and c["comm_id"] in self.widgets:
            data = c["data"]
            if data.get("method") == "update":
                self.widgets[c["comm_id"]].update(data.get("state", {}))
        elif t == "comm_close" and c["comm_id"] in self.widgets:
            self.closed[c["comm_id"]] = self.widgets.pop(c["comm_id"])
        if t == "update_display_data":
            for cell in self.cells.values():
                cell.update(msg)
            return
        cell = self.cells.get(msg["parent_header"].get("msg_id", ""))
        if cell is not None:
            cell.apply(msg)

    def wait(self, cell: Cell, timeout: float = 120) -> Cell:
        deadline = time.monotonic() + timeout
        while cell.reply is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"cell did not finish in {timeout} s; stderr: {cell.stderr[-2000:]}")
            self.pump(0.1)
        self.pump(0.3)  # outputs that trail the reply
        return cell

    # ------------------------------------------------------------------ widgets

    def run_views(self) -> dict[str, dict[str, Any]]:
        return {cid: s for cid, s in self.widgets.items() if is_run_view(s)}

    def wait_for_pending(self, kind: str = "approval", timeout: float = 60,
                         exclude: set[str] | None = None) -> tuple[str, dict[str, Any]]:
        """The comm id and pending request of a run view that is waiting (and not one in `exclude`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump(0.1)
            for cid, state in self.run_views().items():
                pending = (state.get("view") or {}).get("pending")
                if pending and pending["kind"] == kind and pending["request_id"] not in (exclude or set()):
                    return cid, pending
        raise TimeoutError(f"no run view waited for {kind} within {timeout} s")

    def undo_panel(self, timeout: float = 30) -> str:
        """The comm id of the latest Undo panel the kernel opened (its state has an `offer`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump(0.1)
            found = [cid for cid, state in self.widgets.items() if state.get("offer")]
            if found:
                return str(found[-1])
        raise TimeoutError(f"no Undo panel was opened within {timeout} s")

    def custom(self, comm_id: str, content: dict[str, Any]) -> str:
        """A custom widget message (ipywidgets' `{"method": "custom"}`); returns its msg id."""
        msg = self.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {"method": "custom",
                                                                           "content": content}})
        self.kc.shell_channel.send(msg)
        return str(msg["header"]["msg_id"])

    def click(self, comm_id: str, request_id: str, action: str, text: str = "") -> str:
        """What the Approve/Deny/Refine/Answer buttons send: a custom message, as run_view.js's `model.send`."""
        return self.custom(comm_id, {"event": "decision", "request_id": request_id, "action": action, "text": text,
                              "nonce": f"{time.monotonic_ns():x}"})


def is_run_view(state: dict[str, Any]) -> bool:
    """A RunView's state (its traits), told from the other widgets the kernel opens (its Layout)."""
    return "view" in state and "decided" in state


class RecordingKernel(Kernel):
    """The harness, also keeping every IOPub message by its parent msg id (the agent's cells have their own)."""

    def __init__(self, folder: Path, env: dict[str, str] | None = None) -> None:
        self.by_parent: dict[str, list[dict[str, Any]]] = {}
        super().__init__(folder, env=env)

    def _iopub(self, msg: dict[str, Any]) -> None:
        self.by_parent.setdefault(msg["parent_header"].get("msg_id", ""), []).append(msg)
        super()._iopub(msg)

    def comms(self) -> list[dict[str, Any]]:
        """The data of every `nbagent.cells` comm the kernel opened, oldest first."""
        return [m["content"]["data"] for msgs in self.by_parent.values() for m in msgs
                if m["msg_type"] == "comm_open" and m["content"].get("target_name") == "nbagent.cells"]


def script(path: Path, *turns: Any) -> Path:
    path.write_text(json.dumps({"turns": list(turns)}))
    return path


def answer(text: str) -> dict[str, Any]:
    """A script turn that answers in text (no tool call)."""
    return {"content": text}
