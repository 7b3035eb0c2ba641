"""`run_python` in a kernel runs as `run_cell` does (issue 46): on the kernel's main thread through IPython, its
output under a parent message of its own, nothing process-wide redirected. So a print from another thread of the
person's (a progress bar, a server) stays in its own cell and never lands in the agent's result, `sys.stdout` is
the kernel's own stream before, during and after, and a run that called the old thread-and-redirect `run_python`
(an older log) still replays in a kernel, offline, to the same result."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kernel_harness import RecordingKernel, script

from nbagent.store import Store

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

NOISE = '''
import sys, threading, time
kernel_stdout = sys.stdout
samples, stop = [], threading.Event()
def noisy():
    while not stop.is_set():
        print("THREAD-NOISE")
        samples.append(sys.stdout is kernel_stdout)
        time.sleep(0.002)
threading.Thread(target=noisy, daemon=True).start()
'''

CODE = '''import sys, time
inside = []
for i in range(5):
    inside.append(sys.stdout is kernel_stdout and sys.stderr is kernel_stderr)
    print("agent", i)
    time.sleep(0.02)
"answer " + str(6 * 7)'''


def results(folder: Path, tool: str = "run_python") -> list[Any]:
    store = Store(folder / "test.nbagent", readonly=True)
    return [e.payload.result for run_id in store.run_ids() for e in store.run_events(run_id)
            if e.type == "tool_call_completed" and e.payload.tool == tool]


def streamed(k: RecordingKernel, msg_id: str) -> str:
    k.pump(0.3)
    return "".join(m["content"].get("text", "") for m in k.by_parent.get(msg_id, []) if m["msg_type"] == "stream")


@pytest.fixture
def k(tmp_path: Path) -> Iterator[RecordingKernel]:
    kernel = RecordingKernel(tmp_path)
    assert kernel.run("%load_ext nbagent", cell_id="setup").ok
    yield kernel
    kernel.close()


def test_another_threads_prints_stay_out_of_the_result_and_sys_stdout_is_never_swapped(k: RecordingKernel) -> None:
    noise = k.run(NOISE + "kernel_stderr = sys.stderr", cell_id="noise")
    assert noise.ok, noise.outputs
    busy = "progress = 'started'\nwhile True:\n    pass"
    script(k.folder / "s.json", {"tool_calls": [{"name": "run_python", "arguments": {"code": CODE}}]},
           {"tool_calls": [{"name": "run_python", "arguments": {"code": busy, "timeout": 0.5}}]},
           {"content": "done"})
    cell = k.run("%%agent --script s.json --approve all --autonomy L3 --new\ncompute", cell_id="c1")
    assert cell.ok, (cell.stderr, cell.outputs)
    after = k.run("stop.set(); time.sleep(0.05)\nprint('SEEN', all(inside), len(samples) > 20, all(samples), "
                  "sys.stdout is kernel_stdout)", cell_id="after")
    # during the agent's code: its own view and the other thread's, many times; after: the same stream
    assert "SEEN True True True True\n" in after.stdout, after.stdout
    assert k.run("print(progress)", cell_id="p").stdout == "started\n"
    r, stopped = results(k.folder)
    # a timeout stops it as the person's stop button would, and says so as run_python always did
    assert stopped["error"] == "TimeoutError: stopped after 0.5 s; variables it set before that remain", stopped
    assert r["stdout"] == "".join(f"agent {i}\n" for i in range(5)), r  # the agent's prints, only they
    assert "THREAD-NOISE" not in str(r) and r["stderr"] == ""
    assert r["value"]["repr"] == "'answer 42'" and "error" not in r
    shown = streamed(k, noise.msg_id)
    assert "THREAD-NOISE" in shown and "agent 0" not in shown  # the thread's prints went to its own cell


OLDER = """
import nbagent.ipython.run_python as kernel_run_python
from nbagent.tools.kernel import kernel_tools
kernel_run_python.new_tool = kernel_run_python.run_python_tool
kernel_run_python.run_python_tool = lambda shell, where: kernel_tools(shell.user_ns)[-1]
"""
OLDER_UNDONE = "kernel_run_python.run_python_tool = kernel_run_python.new_tool"


def test_an_older_logs_run_python_replays_in_a_kernel(tmp_path: Path) -> None:
    """A log whose run_python ran in a thread under redirect_stdout (the runtime's own tool, put where an older
    kernel had it): `%%agent --replay RUN` in a kernel runs the code again, as a cell does, and the replay asks the
    recorded model exactly what it was asked (no divergence), so the result is what was recorded."""
    code = "total = sum(range(10))\nprint('total is', total)\ntotal * 2"
    script(tmp_path / "s.json", {"tool_calls": [{"name": "run_python", "arguments": {"code": code}}]},
           {"content": "The total is 45."})
    k = RecordingKernel(tmp_path)
    try:
        assert k.run("%load_ext nbagent", cell_id="setup").ok
        # the older kernel's run_python: the runtime's thread-and-redirect tool, where the kernel's tools have it
        assert k.run(OLDER, cell_id="older").ok
        first = k.run("%%agent --script s.json --approve all --autonomy L3\nadd up", cell_id="c1")
        assert first.ok and first.records[-1]["status"] == "completed", (first.stderr, first.outputs)
        (old,) = results(tmp_path)
        assert old == {"stdout": "total is 45\n", "stderr": "", "value": old["value"]}
        assert old["value"]["repr"] == "90"
        assert k.run(OLDER_UNDONE + "\ndel total", cell_id="back").ok
        cell = k.run(f"%%agent --replay {first.records[-1]['run_id']} --autonomy L3\nadd up", cell_id="c1")
        assert cell.ok, (cell.stderr, cell.outputs)
        assert cell.records[-1]["status"] == "completed", cell.records[-1]
        assert cell.records[-1]["answer"] == "The total is 45."
        old_again, new = results(tmp_path)
        assert new == old_again == old
        assert k.run("print(total)", cell_id="p1").stdout == "45\n"  # it ran in the person's namespace
    finally:
        k.close()
