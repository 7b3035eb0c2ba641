"""Issue 24 in a real kernel (driven as JupyterLab drives it, tests/kernel_harness.py): what the page is told.

- a run view says it has ended only when the kernel is done with it (`ended`, with the record's text/html and
  text/plain): a run resumed after an interrupt is drawn "interrupted" first, and a page that took that status for
  the end replaced the live card by the record, leaving the run waiting with no buttons (the browser side is
  tests/test_browser_person.py);
- the cell numbers in the notes are the ones JupyterLab shows (IPython 9 raises `execution_count` before a cell
  runs, so reading it gave the next cell's number);
- `%load_ext nbagent` and an `%agent` line in the same cell: the line runs (it was "%agent runs at the start of a
  line in a cell"), or, for the commands that drive a run, says in one line what to do.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kernel_harness import RUN_MIME, Kernel, is_run_view, script

from nbagent.store import Store

pytestmark = pytest.mark.kernel


def create(path: str, content: str = "hello\n") -> dict:
    return {"content": "I'll write it.", "tool_calls": [{"name": "create_file", "arguments": {"path": path,
                                                                                          "content": content}}]}


def note_lines(cell: object, cls: str) -> list[str]:
    return [o["data"]["text/plain"] for o in cell.outputs  # type: ignore[attr-defined]
            if "data" in o and cls in str(o["data"].get("text/html", ""))]


def test_a_resumed_view_is_ended_by_the_kernel_not_by_its_first_status(kernel: Kernel) -> None:
    script(kernel.folder / "s.json", create("report.md"), {"content": "Wrote it."})
    first = kernel.submit("%%agent --script s.json\nwrite a report", cell_id="c1")  # [2]
    kernel.wait_for_pending("approval")
    kernel.km.interrupt_kernel()
    kernel.wait(first, timeout=30)
    (ended_first,) = [s for s in kernel.closed.values() if is_run_view(s)]
    assert ended_first["ended"][RUN_MIME]["status"] == "interrupted"  # that view did end: the page may replace it

    later = kernel.submit("%agent resume", cell_id="c2")  # [3]
    comm, pending = kernel.wait_for_pending("approval")
    live = kernel.widgets[comm]
    assert live["ended"] == {}  # drawn "interrupted" at first, and not over: its card must stay
    kernel.click(comm, pending["request_id"], "approve")
    kernel.wait(later)
    assert later.ok and (kernel.folder / "report.md").exists()
    ended = kernel.closed[comm]["ended"]
    # what the page puts in the view's place (after a reload) is the whole record: JSON, HTML and text
    assert ended[RUN_MIME]["status"] == "completed" and ended[RUN_MIME]["run_id"] == ended_first["view"]["run_id"]
    assert 'class="nbagent-run' in ended["text/html"] and ended["text/plain"].startswith("nbagent run")
    for cell in (first, later):  # every output of the run is the full record, in both cells
        (record,) = [o["data"] for o in cell.outputs if RUN_MIME in o.get("data", {})]
        assert record[RUN_MIME]["status"] == "completed" and "text/html" in record and "text/plain" in record

    # the cells as JupyterLab numbers them: [1] loaded nbagent, [2] started the run, [3] continued it
    (note,) = note_lines(later, "nbagent-continues")
    assert "from cell [2] · id c1" in note, note
    (interrupted,) = note_lines(first, "nbagent-note")
    assert "continued in cell [3] · id c2" in interrupted, interrupted


def test_load_ext_and_agent_lines_in_one_cell(tmp_path: Path) -> None:
    """A new kernel (a restart, a reopened notebook) where nothing has loaded nbagent yet."""
    script(tmp_path / "s.json", create("report.md", "# R\n"), {"content": "Done."})
    k = Kernel(tmp_path)
    try:
        made = k.run("%load_ext nbagent\n%agent runs", cell_id="a1")
        assert made.ok and "no runs yet" in made.stdout and not made.stderr.strip(), made.stderr
        assert k.run("%%agent --script s.json --approve all\nwrite the report", cell_id="a2").ok
        run_id = Store(tmp_path / "test.nbagent", readonly=True).list_runs()[-1].id
        k.restart()

        # undo: the panel, as the record's Undo… shows it, and nothing changes before its button
        cell = k.run(f"%load_ext nbagent\n%agent undo {run_id}", cell_id="b1")
        assert cell.ok, cell.outputs
        assert "not found" not in cell.stderr and "start of a line" not in cell.stderr, cell.stderr
        (panel,) = [cid for cid, s in k.widgets.items() if (s.get("offer") or {}).get("run_id") == run_id]
        assert (tmp_path / "report.md").exists()
        k.custom(panel, {"event": "undo", "nonce": "n1"})
        after = k.run("%agent status", cell_id="b2")  # the click was handled before this cell ran
        assert after.ok and not (tmp_path / "report.md").exists()

        # a command that goes on with a run cannot wait in such a cell: one line, and nothing half done
        k.restart()
        refused = k.run("%load_ext nbagent\n%agent resume", cell_id="c1")
        assert not refused.ok
        (error,) = [o["error"] for o in refused.outputs if "error" in o]
        assert error.startswith("UsageError: %agent resume goes on with a run") and "run this cell again" in error
        again = k.run("%agent tools", cell_id="c1")  # nbagent is loaded now: the same lines work as usual
        assert again.ok and "create_file" in again.stdout
    finally:
        k.close()
