"""nbagent with JupyterLab's debugger attached to the kernel (issue 26, a bad input: "A debugger attached ...: the
kernel behaves as it would without nbagent loaded, apart from the time the library takes").

The debugger is attached as JupyterLab attaches it: `debug_request` messages on the kernel's control channel, the
Debug Adapter Protocol's `initialize`, `attach` and `configurationDone` (ipykernel runs debugpy in the kernel's own
process and forwards `attach` to it), with no breakpoint set. The kernel has a real provider's model configured
(tests/test_model_loading.py's `real_kernel`: the stub OpenAI server on 127.0.0.1), so `%load_ext nbagent` loads
the model library ahead of need. Nothing here looks at how nbagent loads it: only what the cells show.

Timeouts are long: debugpy traces every line run while it is attached, and an import is many lines. Measured on 2
cores, the library took ~40 s to be ready under the debugger against ~4 s without it (as `import litellm` typed in a
cell takes ~34 s against ~3 s): debugpy's cost, not nbagent's.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kernel_harness import Kernel
from stub_openai import Reply, Respond, StubOpenAI
from test_model_loading import answered, real_kernel

pytestmark = pytest.mark.kernel

# what JupyterLab's debugger sends first (@jupyterlab/debugger's session `start`)
INITIALIZE = {"clientID": "jupyterlab", "clientName": "JupyterLab", "adapterID": "python", "pathFormat": "path",
              "linesStartAt1": True, "columnsStartAt1": True, "supportsVariableType": True,
              "supportsVariablePaging": True, "supportsRunInTerminalRequest": True, "locale": "en"}
LIBRARY_S = 300  # a cell that needs the model library, loaded under the debugger (~40 s when measured)
LOADING = "loading the model library"


@pytest.fixture
def stub() -> Iterator[StubOpenAI]:
    with StubOpenAI() as server:
        server.fallback = Reply(content="hello from the stub")
        yield server


class Debugger:
    """A DAP client speaking through the kernel's control channel, as JupyterLab's debugger does."""

    def __init__(self, k: Kernel) -> None:
        self.k = k
        self.seq = 0
        self.replies: list[dict[str, Any]] = []  # every reply's content, in order

    def request(self, command: str, arguments: dict[str, Any] | None = None, timeout: float = 120) -> dict[str, Any]:
        """Send one request and return its reply's content (IOPub is pumped meanwhile, as the harness does)."""
        self.seq += 1
        content: dict[str, Any] = {"type": "request", "seq": self.seq, "command": command}
        if arguments is not None:
            content["arguments"] = arguments
        msg = self.k.kc.session.msg("debug_request", content)
        self.k.kc.control_channel.send(msg)
        deadline = time.monotonic() + timeout
        while True:
            try:
                reply = self.k.kc.control_channel.get_msg(timeout=0.1)
            except queue.Empty:
                assert time.monotonic() < deadline, f"no debug_reply to {command!r} within {timeout} s"
                self.k.pump(0.05)
                continue
            if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                assert reply["msg_type"] == "debug_reply", reply["msg_type"]
                self.replies.append(reply["content"])
                return dict(reply["content"])

    def attach(self) -> None:
        """initialize, attach, configurationDone. ipykernel >= 7.4 requires debugpy, so the debugger is there."""
        info = self.k.kc.kernel_info(reply=True, timeout=120)
        assert "debugger" in info["content"].get("supported_features", []), info["content"]
        first = self.request("initialize", INITIALIZE)
        assert first, "the kernel answered the debugger's initialize with nothing (no debugger)"
        assert (first["command"], first["success"]) == ("initialize", True), first
        attached = self.request("attach", {})
        assert (attached["command"], attached["success"]) == ("attach", True), attached
        done = self.request("configurationDone")
        assert (done["command"], done["success"]) == ("configurationDone", True), done
        self.assert_running()

    def assert_running(self) -> None:
        """The debugger is attached, and no thread is stopped (no breakpoint was ever set)."""
        info = self.request("debugInfo")
        assert info["success"] is True, info
        assert info["body"]["isStarted"] is True, info["body"]
        assert info["body"]["stoppedThreads"] == [] and info["body"]["breakpoints"] == [], info["body"]


def test_with_the_debugger_attached_cells_run_as_without_nbagent_each_with_its_own_output(
        tmp_path: Path, stub: StubOpenAI) -> None:
    k = real_kernel(tmp_path, stub)
    try:
        debugger = Debugger(k)
        debugger.attach()
        load = k.submit("%load_ext nbagent", cell_id="load")
        # the cell right after (as Run All sends it)
        compute = k.run("print(sum(range(10**6)))", cell_id="compute", timeout=120)
        assert load.ok, load.stderr
        assert compute.ok, compute.stderr
        assert compute.stdout == "499999500000\n" and compute.stderr == "" and compute.outputs == []
        agent = k.run("%%agent --new\nsay hello", cell_id="agent", timeout=LIBRARY_S)
        assert agent.ok and answered(agent), (agent.stdout, agent.stderr, agent.outputs)
        assert LOADING not in str(agent.outputs)  # a line shown while waiting is cleared when the wait ends
        plain = k.run("print(1 + 1)", cell_id="plain", timeout=120)
        assert plain.ok and plain.stdout == "2\n" and plain.stderr == "" and plain.outputs == []
        k.pump(1.0)  # anything that trails
        # each cell's output is its own: nothing from another cell, nor from the library's import, in the cells
        # that printed (checked again once everything has arrived)
        assert compute.stdout == "499999500000\n" and compute.stderr == "" and compute.outputs == []
        assert plain.stdout == "2\n" and plain.stderr == "" and plain.outputs == []
        for cell in (load, agent):
            assert "499999500000" not in cell.stdout + cell.stderr + str(cell.outputs)
        assert "hello from the stub" not in load.stdout + load.stderr + str(load.outputs)
        # the debugger is still attached and answers as JupyterLab's variables panel asks after a cell
        debugger.assert_running()
        variables = debugger.request("inspectVariables")
        assert (variables["command"], variables["success"]) == ("inspectVariables", True), variables
        # detached as JupyterLab's stop does: the kernel goes on
        gone = debugger.request("disconnect", {"restart": False, "terminateDebuggee": True})
        assert (gone["command"], gone["success"]) == ("disconnect", True), gone
        after = k.run("print(1 + 1)", cell_id="after", timeout=120)
        assert after.ok and after.stdout == "2\n" and after.stderr == "", after.stdout + after.stderr
    finally:
        k.close()


def test_with_the_debugger_attached_an_interrupt_ends_a_waiting_agent_cell(tmp_path: Path,
                                                                            stub: StubOpenAI) -> None:
    # the model answers only once the test says so: the cell waits, for the library or for the answer, until then
    answer = threading.Event()

    def held(body: dict[str, Any]) -> Reply:
        answer.wait(LIBRARY_S)
        return Reply(content="hello from the stub")

    stub.fallback = Respond(held)
    k = real_kernel(tmp_path, stub)
    try:
        debugger = Debugger(k)
        debugger.attach()
        assert k.run("%load_ext nbagent", cell_id="load", timeout=120).ok
        cell = k.submit("%%agent --new\nsay hello", cell_id="wait")
        deadline = time.monotonic() + LIBRARY_S
        while LOADING not in str(cell.outputs) and not stub.completion_requests:
            assert cell.reply is None, (cell.stdout, cell.stderr, cell.outputs)
            assert time.monotonic() < deadline, "the agent cell never waited"
            k.pump(0.1)
        k.km.interrupt_kernel()
        k.wait(cell, timeout=120)
        assert not cell.ok
        assert not answered(cell)
        assert LOADING not in str(cell.outputs)  # the line is cleared when the wait ends
        alive = k.run("print('alive')", cell_id="alive", timeout=120)
        assert alive.ok and alive.stdout == "alive\n" and alive.stderr == "", alive.stdout + alive.stderr
        answer.set()
        again = k.run("%%agent --new\nsay hello", cell_id="again", timeout=LIBRARY_S)
        assert again.ok and answered(again), (again.stdout, again.stderr, again.outputs)
        debugger.assert_running()
    finally:
        answer.set()
        k.close()
