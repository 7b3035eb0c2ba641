"""Each step says what it did, in a real kernel (issue 46): the agent's cell raises KeyError, another is interrupted
by the kernel's ■; each run ends completed_with_errors, and its record says "✗ raised KeyError: 'Revenue'" and
"■ interrupted after …" in the cell's output (text/plain and text/html), in the saved notebook, and in the HTML
nbconvert makes of it (never "✓ … ok", never only inside a cut JSON preview)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from bs4 import BeautifulSoup
from kernel_harness import RUN_MIME, Cell, RecordingKernel, script

from nbagent.events.outcomes import duration
from nbagent.events.state import RunStatus
from nbagent.store import Store

pytestmark = [pytest.mark.kernel, pytest.mark.slow]
AGENT = "%%agent --script {name} --approve all --autonomy L3 --new\n"
RAISES = "prices = {'revenue': 120}\nprices['Revenue']"
SPINS = "import time\nwhile True:\n    time.sleep(0.01)"


def run_cell(code: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "run_cell", "arguments": {"code": code, "explanation": "revenue"}}]}


def record(cell: Cell) -> dict[str, Any]:
    """The record the run left in its cell: the bundle's text/plain, text/html and the view."""
    (data,) = [o["data"] for o in cell.outputs if RUN_MIME in o.get("data", {})]
    return dict(data)


def text_of(html: str) -> str:
    return " ".join(BeautifulSoup(html, "html.parser").get_text().split())


def tool_lines(html: str) -> list[str]:
    return [text_of(str(li.select_one(".nbr-line"))) for li in
            BeautifulSoup(html, "html.parser").select("li.nbr-k-tool")]


def interrupted_run(k: RecordingKernel) -> Cell:
    script(k.folder / "stop.json", run_cell(SPINS), {"content": "It was stopped."})
    cell = k.submit(AGENT.format(name="stop.json") + "spin", cell_id="c2")
    deadline = time.monotonic() + 60
    while not any("while True" in str(c.get("source")) for c in k.comms()):
        assert time.monotonic() < deadline, "the agent's cell never started"
        k.pump(0.1)
    time.sleep(0.5)
    k.km.interrupt_kernel()
    return k.wait(cell, timeout=60)


def test_a_cell_that_raised_and_one_interrupted_say_so_in_every_form_of_the_record(tmp_path: Path) -> None:
    k = RecordingKernel(tmp_path)
    try:
        assert k.run("%load_ext nbagent", cell_id="setup").ok
        script(k.folder / "raise.json", run_cell(RAISES), {"content": "Revenue is 120."})
        raised = k.run(AGENT.format(name="raise.json") + "what is the revenue?", cell_id="c1")
        assert raised.ok, raised.outputs  # the %%agent cell itself does not fail: the run went on
        stopped = interrupted_run(k)
        shown = [record(raised), record(stopped)]
    finally:
        k.close()

    store = Store(tmp_path / "test.nbagent", readonly=True)
    states = [store.run_state(r[RUN_MIME]["run_id"]) for r in shown]
    assert [s.status for s in states] == [RunStatus.COMPLETED_WITH_ERRORS] * 2
    assert states[0].errors == ["run_cell: raised KeyError: 'Revenue'"]
    (held,) = [e.payload for e in store.run_events(states[1].run_id or "") if e.type == "tool_call_completed"]
    seconds = duration(held.duration_ms)  # the duration the log holds, as the record words it ("808 ms", "4.6 s")
    assert states[1].errors == [f"run_cell: interrupted after {seconds}"]

    # the cell's output: text/plain and text/html
    for bundle, said in ((shown[0], "✗ raised KeyError: 'Revenue'"), (shown[1], f"■ interrupted after {seconds}")):
        assert "completed_with_errors" in bundle["text/plain"].split("\n")[0]
        step_rows = [line for line in bundle["text/plain"].split("\n") if "run_cell(" in line]
        assert len(step_rows) == 1 and said in step_rows[0] and "✓" not in step_rows[0], step_rows
        (line,) = tool_lines(bundle["text/html"])
        assert line.startswith(said + " · run_cell("), line
    assert "the kernel was interrupted" in shown[1]["text/plain"]

    # the saved notebook, and nbconvert's HTML of it
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(AGENT.format(name="raise.json") + "what is the revenue?"),
                nbformat.v4.new_code_cell(AGENT.format(name="stop.json") + "spin")]
    for cell, bundle in zip(nb.cells, shown, strict=True):
        cell.outputs = [nbformat.v4.new_output("display_data", data=bundle)]
    path = tmp_path / "saved.ipynb"
    nbformat.write(nb, path)
    saved = nbformat.read(path, as_version=4)
    plain = [c.outputs[0]["data"]["text/plain"] for c in saved.cells]
    assert "✗ raised KeyError: 'Revenue'" in plain[0] and f"■ interrupted after {seconds}" in plain[1]
    jupyter = Path(sys.executable).with_name("jupyter")
    done = subprocess.run([str(jupyter), "nbconvert", "--to", "html", str(path), "--output", "saved.html"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "saved.html").read_text()
    lines = tool_lines(page)
    assert lines[0].startswith("✗ raised KeyError: 'Revenue' · run_cell("), lines
    assert lines[1].startswith(f"■ interrupted after {seconds} · run_cell("), lines
    assert not re.search(r"run_cell\([^)]*\)[^·]*· ok", text_of(page))  # no "✓ … ok" for either
    assert text_of(page).count("completed with errors") >= 2
