"""`run_cell` in real kernels: the agent's code runs as a person's cell would (counts, In/Out, rich outputs), its
outputs go out under their own parent message, and the model gets what the cell showed, and only that."""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kernel_harness import Cell, RecordingKernel, script

from nbagent.store import Store

pytestmark = [pytest.mark.kernel, pytest.mark.slow]  # (the fixture builds a Kernel subclass: said here)
AGENT = "%%agent --script s.json --approve all --autonomy L3 --new\n"


@pytest.fixture
def k(tmp_path: Path) -> Iterator[RecordingKernel]:
    kernel = RecordingKernel(tmp_path)
    assert kernel.run("%load_ext nbagent", cell_id="setup").ok
    yield kernel
    kernel.close()


def call(code: str, explanation: str = "") -> dict[str, Any]:
    return {"tool_calls": [{"name": "run_cell", "arguments": {"code": code, "explanation": explanation}}]}


def agent(k: RecordingKernel, *turns: dict[str, Any], cell_id: str = "c1", timeout: float = 120) -> Cell:
    script(k.folder / "s.json", *turns, {"content": "done"})
    cell = k.run(AGENT + "go", cell_id=cell_id, timeout=timeout)
    assert cell.ok, (cell.stderr, cell.outputs)
    return cell


def results(k: RecordingKernel) -> list[dict[str, Any]]:
    """Every run_cell result the log holds, oldest first."""
    store = Store(k.folder / "test.nbagent", readonly=True)
    out = []
    for run_id in store.run_ids():
        for e in store.run_events(run_id):
            if e.type == "tool_call_completed" and e.payload.tool == "run_cell":
                out.append(e.payload.result)
    return out


RICH = '''
class Frame:
    def __repr__(self):
        return "Frame(rows=3)"
    def _repr_html_(self):
        return "<table><tr><td>3 rows</td></tr></table>"
print("hello from the agent")
from IPython.display import display
display(Frame())
answer = 6 * 7
answer
'''


def test_print_value_and_rich_output_reach_the_result_under_their_own_parent(k: RecordingKernel) -> None:
    agent(k, call(RICH, "compute the answer"))
    (r,) = results(k)
    assert r["ran"] and r["stdout"] == "hello from the agent\n" and r["stderr"] == ""
    kinds = [(o["output_type"], o.get("text")) for o in r["outputs"]]
    assert kinds == [("display_data", "Frame(rows=3)"), ("execute_result", "42")]
    assert "text/html" in r["outputs"][0]["mimes"]
    assert r["source"].startswith("# nbagent: run by run ") and "compute the answer" in r["source"]
    assert r["metadata"]["nbagent"]["ran"] and r["metadata"]["nbagent"]["source_sha256"]
    k.pump(0.5)
    mine = k.by_parent.get(r["msg_id"], [])
    types = [m["msg_type"] for m in mine]
    assert "stream" in types and "display_data" in types and "execute_result" in types, types
    assert next(m for m in mine if m["msg_type"] == "execute_result")["content"]["execution_count"] == \
        r["execution_count"]
    # the front end was told of the cell before it ran, with the parent to route by
    opened = [m for msgs in k.by_parent.values() for m in msgs if m["msg_type"] == "comm_open"
              and m["content"].get("target_name") == "nbagent.cells"]
    assert opened and opened[-1]["content"]["data"]["msg_id"] == r["msg_id"]
    assert opened[-1]["content"]["data"]["execution_count"] == r["execution_count"]
    # post_run_cell ran as after a person's cell: {Out[n]} has what the cell showed, and nothing after it
    probe = k.run("from nbagent.ipython.entry import current\noutputs = current().outputs\n"
                  f"print([o.text for o in outputs.cell({r['execution_count']}).outputs])",
                  cell_id="p1")
    assert probe.stdout == "['Frame(rows=3)', '42']\n", probe.stdout


def test_an_exception_reaches_the_result_with_its_traceback(k: RecordingKernel) -> None:
    agent(k, call("def f():\n    return 1 / 0\nprint('before')\nf()"))
    (r,) = results(k)
    assert r["stdout"] == "before\n" and r["error"].startswith("ZeroDivisionError")
    assert "f()" in r["traceback"] and "\x1b[" not in r["traceback"] and "interrupted" not in r


def test_counts_in_and_out_advance_like_a_persons_cell(k: RecordingKernel) -> None:
    before = k.run("x = 1", cell_id="p1")
    n = before.reply["content"]["execution_count"]  # type: ignore[index]
    agent_cell = agent(k, call("y = 5\ny * 2"), cell_id="c1")
    (r,) = results(k)
    assert r["execution_count"] == n + 2  # the %%agent cell took n + 1
    # (ipykernel replies with the last count used: the %%agent cell's reply names its agent's cell)
    assert agent_cell.reply["content"]["execution_count"] == n + 2  # type: ignore[index]
    after = k.run(f"print(repr(In[{n + 2}]), Out[{n + 2}], len(In))", cell_id="p2")
    assert after.reply["content"]["execution_count"] == n + 3  # type: ignore[index]
    assert r["source"].rstrip() in eval(after.stdout.rsplit(" ", 2)[0])
    assert after.stdout.split()[-2:] == ["10", str(n + 4)]  # Out[n+2] is the value; In[n+3] is this cell


def test_a_print_from_another_thread_is_not_in_the_result(k: RecordingKernel) -> None:
    k.run("import threading, time\nstop = threading.Event()\n"
          "def chatter():\n    while not stop.is_set():\n        print('background'); time.sleep(0.01)\n"
          "t = threading.Thread(target=chatter, daemon=True); t.start()", cell_id="p1")
    agent(k, call("import time\nfor i in range(3):\n    print('agent', i); time.sleep(0.05)"))
    k.run("stop.set(); t.join()", cell_id="p2")
    (r,) = results(k)
    assert r["stdout"] == "agent 0\nagent 1\nagent 2\n"


def test_nothing_process_wide_changes(k: RecordingKernel) -> None:
    probe = ("import sys, builtins, signal\nsnap = lambda: (id(sys.stdout), id(sys.stderr), id(builtins.__import__),"
             " sys.getswitchinterval(), sys.gettrace(), signal.getsignal(signal.SIGINT))")
    k.run(probe + "\nfirst = snap()", cell_id="p1")
    # (the SIGINT handler differs while the cell runs, as it does in a person's cell: see the interrupt test)
    agent(k, call("inside = snap()\nprint(inside[:5] == first[:5])"))
    (r,) = results(k)
    assert r["stdout"] == "True\n"
    assert k.run("print(snap() == first)", cell_id="p2").stdout == "True\n"


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib is not installed")
def test_a_matplotlib_plot_gives_an_image_output(k: RecordingKernel) -> None:
    # shown by matplotlib's post_execute hook, as after a person's cell: no plt.show(); a magic works too
    agent(k, call("%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3]);"))
    (r,) = results(k)
    images = [o for o in r.get("outputs", []) if "image/png" in o["mimes"]]
    assert images and images[0]["images"][0].startswith("a PNG image, "), r
    assert f"{{Out[{r['execution_count']}]}}" in r["images_note"]
    k.pump(0.5)
    assert any("image/png" in m["content"].get("data", {}) for m in k.by_parent.get(r["msg_id"], []))
    later = k.run("print(len(get_ipython().user_ns['plt'].get_fignums()))", cell_id="p1")
    assert later.stdout == "0\n"  # closed after the cell, as inline figures are


def test_the_next_turn_sees_the_result(k: RecordingKernel) -> None:
    agent(k, call("print('seen by the model')\n21 * 2"))
    store = Store(k.folder / "test.nbagent", readonly=True)
    (run_id,) = store.run_ids()
    tool_messages = [m for m in store.run_state(run_id).messages if m.get("role") == "tool"]
    assert tool_messages and "seen by the model" in tool_messages[0]["content"] and '"42"' in \
        tool_messages[0]["content"]


@pytest.mark.parametrize("loop", ["while True:\n    time.sleep(0.01)", "await asyncio.sleep(600)"],
                         ids=["running", "awaiting"])
def test_an_interrupt_stops_the_cell_and_the_result_says_so(k: RecordingKernel, loop: str) -> None:
    script(k.folder / "s.json", call("import asyncio, time\nstarted = True\n" + loop), {"content": "stopped"})
    cell = k.submit(AGENT + "go", cell_id="c1")
    deadline = time.monotonic() + 60
    while not any(m["msg_type"] == "comm_open" and m["content"].get("target_name") == "nbagent.cells"
                  for msgs in k.by_parent.values() for m in msgs):
        assert time.monotonic() < deadline
        k.pump(0.1)
    time.sleep(0.5)
    k.km.interrupt_kernel()
    k.wait(cell, timeout=60)
    (r,) = results(k)
    assert r["interrupted"] and "the kernel was interrupted" in r["error"], r
    assert r["error"].startswith("KeyboardInterrupt" if "while" in loop else "CancelledError"), r
    assert assert_answer(k) == "stopped"  # the run goes on: the model reads that the cell was stopped
    assert k.run("print(started)", cell_id="p1").stdout == "True\n"  # the kernel goes on


def test_run_cell_is_offered_and_run_python_still_runs_recordings_that_name_it(k: RecordingKernel) -> None:
    turn = {"tool_calls": [{"name": "run_python", "arguments": {"code": "old = 'still works'"}}]}
    agent(k, turn)
    store = Store(k.folder / "test.nbagent", readonly=True)
    (run_id,) = store.run_ids()
    offered = next(e for e in store.run_events(run_id) if e.type == "llm_called").payload.request["tools"]
    assert "run_cell" in offered and "run_python" not in offered
    assert k.run("print(old)", cell_id="p1").stdout == "still works\n"


def assert_answer(k: RecordingKernel) -> str:
    store = Store(k.folder / "test.nbagent", readonly=True)
    (run_id,) = store.run_ids()
    return str(next(e for e in store.run_events(run_id) if e.type == "answer_ready").payload.content)


def test_the_result_is_bounded_and_redacted(tmp_path: Path) -> None:
    secret = "s3cr3t-value-0123456789abcdef"
    k = RecordingKernel(tmp_path, env={"MY_SERVICE_API_KEY": secret})
    try:
        assert k.run("%load_ext nbagent", cell_id="setup").ok
        agent(k, call("import os\nprint(os.environ['MY_SERVICE_API_KEY'])\nprint('x' * 50_000)\n"
                      "raise ValueError(os.environ['MY_SERVICE_API_KEY'])"))
        (r,) = results(k)
        assert secret not in str(r) and r["error"].startswith("ValueError")
        assert len(r["stdout"]) <= 20_000 and "the first 20,000 shown" in r["stdout_truncated"]
        assert r["stdout_truncated"].startswith("50,0")  # the whole length, said
        # many big outputs: every text cut shorter, the result still a dict under the runtime's cap
        agent(k, call("from IPython.display import display\nfor i in range(6):\n    display('y' * 30_000)\n"
                      "print('z' * 30_000)"), cell_id="c2")
        big = results(k)[-1]
        assert isinstance(big, dict) and len(json.dumps(big)) <= 45_000 and len(big["outputs"]) == 6
        assert all("_truncated" in str(o) for o in big["outputs"]) and big["stdout_truncated"].startswith("30,001")
    finally:
        k.close()


def test_an_updated_display_is_read_as_updated_and_clear_output_clears(k: RecordingKernel) -> None:
    agent(k, call("from IPython.display import display, clear_output\nprint('gone')\nclear_output()\n"
                  "h = display('first', display_id=True)\nh.update('second')\nprint('kept')"))
    (r,) = results(k)
    assert [o["text"] for o in r["outputs"]] == ["'second'"] and r["stdout"] == "kept\n"
