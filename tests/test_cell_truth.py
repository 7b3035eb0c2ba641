"""The kernel hears the truth (issue 45): an `%%agent` cell whose run failed or was interrupted fails as a person's
cell would, after its record and in the one line the record gives, so Run All (the kernel aborts the cells queued
behind a failed one), `jupyter execute`, nbconvert and papermill stop where they would stop for any failing cell. A
run left waiting for a decision, or one that carried on past a denial (`completed_with_errors`), has not failed.

Real kernels (tests/kernel_harness.py, driven as JupyterLab drives them: cells queued behind one another with
`stop_on_error`), the offline scripted model for failures of the run's own, and the OpenAI-compatible stub on
127.0.0.1 behind the kernel's model process for an interrupt during a model call.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from kernel_harness import RUN_MIME, Kernel, answer, script
from stub_openai import Reply, StubOpenAI, Trickle

from nbagent.events.state import RunStatus
from nbagent.store import Store

FAILING = {"error": {"type": "bad_request", "message": "the scripted server refused the request"}}


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    k = Kernel(tmp_path)
    assert k.run("%load_ext nbagent", cell_id="setup").ok
    yield k
    k.close()


def errors(cell: object) -> list[dict[str, object]]:
    return [o for o in cell.outputs if "error" in o]  # type: ignore[attr-defined]


def one_line_failure(k: Kernel, cell: object, ename: str) -> str:
    """The cell failed with `ename`, its record shown before the error, the error one line (no traceback)."""
    reply = cell.reply["content"]  # type: ignore[attr-defined]
    assert reply["status"] == "error" and reply["ename"] == ename, reply
    assert len(reply["traceback"]) == 1 and ename in reply["traceback"][0], reply["traceback"]
    kinds = ["record" if RUN_MIME in o.get("data", {}) else "error" if "error" in o else "other"
             for o in cell.outputs]  # type: ignore[attr-defined]
    assert "record" in kinds and kinds.index("record") < kinds.index("error"), kinds
    return str(reply["evalue"])


@pytest.mark.kernel
def test_a_failed_run_fails_its_cell_and_the_queued_cells_do_not_run(kernel: Kernel) -> None:
    script(kernel.folder / "fail.json", FAILING)
    failed = kernel.submit("%%agent --script fail.json\nsummarise the data", cell_id="c1")
    queued = kernel.submit("print('ran after a failed run')", cell_id="c2")  # Run All: queued behind it
    kernel.wait(failed)
    kernel.wait(queued)
    text = one_line_failure(kernel, failed, "RunFailed")
    run_id = failed.records[-1]["run_id"]
    state = Store(kernel.folder / "test.nbagent", readonly=True).run_state(run_id)
    assert state.status == RunStatus.FAILED and state.error
    assert text == f"run {run_id} failed: {state.error}"  # the line its record gives
    assert "the scripted server refused the request" in text
    assert queued.reply["content"]["status"] == "aborted" and "ran after" not in queued.stdout  # type: ignore[index]


@pytest.mark.kernel
def test_waiting_for_a_decision_and_carrying_on_past_a_denial_are_not_failures(kernel: Kernel) -> None:
    script(kernel.folder / "ask.json", {"tool_calls": [{"name": "ask_human", "arguments": {"question": "Which?"}}]})
    waiting = kernel.run("%%agent --script ask.json --approve all\nask me", cell_id="w")  # no fixed answer: waits
    assert waiting.ok and waiting.records[-1]["status"] == "waiting", waiting.outputs
    script(kernel.folder / "deny.json",
           {"tool_calls": [{"name": "create_file", "arguments": {"path": "r.md", "content": "x"}}]},
           answer("I could not write it."))
    denied = kernel.run("%%agent --script deny.json --approve none\nwrite r.md", cell_id="d")
    assert denied.ok and denied.records[-1]["status"] == "completed_with_errors", denied.outputs
    assert not errors(waiting) and not errors(denied)


# ------------------------------------------------------------------------------------------ an interrupt


@pytest.fixture
def stub() -> Iterator[StubOpenAI]:
    with StubOpenAI() as server:
        server.fallback = Reply(content="hello from the stub")
        yield server


@pytest.mark.kernel
def test_stop_during_a_model_call_fails_the_cell_and_the_queue_behind_it(tmp_path: Path, stub: StubOpenAI) -> None:
    k = Kernel(tmp_path, env={"OPENAI_API_KEY": "sk-test-truth", "OPENAI_API_BASE": stub.base_url,
                              "NBAGENT_MODEL": "openai/gpt-4o-mini"})
    try:
        assert k.run("%load_ext nbagent", cell_id="setup").ok
        stub.push(Trickle(every=0.05, seconds=60.0))
        cell = k.submit("%%agent\nsay hello at length", cell_id="c1")
        queued = k.submit("print('ran after an interrupted run')", cell_id="c2")
        deadline = time.monotonic() + 120
        while not (stub.requests and stub.requests[0].trickled > 5):  # the answer is coming, slowly
            assert time.monotonic() < deadline, cell.stderr
            k.pump(0.1)
        k.km.interrupt_kernel()  # the stop button
        k.wait(cell, timeout=60)
        k.wait(queued, timeout=60)
        text = one_line_failure(k, cell, "RunInterrupted")
        run_id = cell.records[-1]["run_id"]
        assert f"run {run_id} was interrupted" in text and f"%agent resume {run_id}" in text
        assert Store(tmp_path / "test.nbagent", readonly=True).run_state(run_id).status == RunStatus.INTERRUPTED
        assert queued.reply["content"]["status"] == "aborted" and "ran after" not in queued.stdout  # type: ignore
        deadline = time.monotonic() + 30
        while stub.requests[0].client_left is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stub.requests[0].client_left is True  # the model process stopped reading that stream
        again = k.run(f"%agent resume {run_id}", cell_id="c3", timeout=120)
        assert again.ok and again.records[-1]["status"] == "completed", again.outputs
    finally:
        k.close()


# ------------------------------------------------------------------------------------------ headless runners


def failing_notebook(folder: Path) -> Path:
    script(folder / "fail.json", FAILING)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in ("%load_ext nbagent", "%%agent --script fail.json\nsummarise",
                                                       "open('after.txt', 'w').write('ran')")]
    path = folder / "failing.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.mark.slow
def test_jupyter_execute_stops_at_a_failed_run_and_shows_its_line(tmp_path: Path) -> None:
    path = failing_notebook(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBAGENT_")}
    jupyter = Path(sys.executable).with_name("jupyter")
    done = subprocess.run([str(jupyter), "execute", path.name], cwd=tmp_path, capture_output=True, text=True,
                          timeout=180, env=env)
    assert done.returncode != 0, done.stdout + done.stderr
    # jupyter execute prints its own traceback for any failing cell, then the cell's error: here one line
    shown = re.sub(r"\x1b\[[0-9;]*m", "", done.stderr).rstrip().splitlines()
    assert shown[-1].startswith("RunFailed: run ") and "the scripted server refused the request" in shown[-1]
    assert "nbagent/ipython" not in done.stderr and not (tmp_path / "after.txt").exists()


@pytest.mark.kernel
def test_papermill_stops_at_a_failed_run(tmp_path: Path) -> None:
    papermill = pytest.importorskip("papermill")
    path = failing_notebook(tmp_path)
    with pytest.raises(papermill.PapermillExecutionError) as info:
        papermill.execute_notebook(str(path), str(tmp_path / "out.ipynb"), cwd=str(tmp_path), kernel_name="python3",
                                   progress_bar=False)
    assert info.value.ename == "RunFailed" and "the scripted server refused the request" in info.value.evalue
    assert not (tmp_path / "after.txt").exists()
    out = json.loads((tmp_path / "out.ipynb").read_text())
    outputs = out["cells"][-2]["outputs"]  # papermill adds its banner cell first; the %%agent cell is second to last
    assert [o["output_type"] for o in outputs][-1] == "error" and any(RUN_MIME in o.get("data", {}) for o in outputs)
