"""`%%agent` in a real kernel, clicked like JupyterLab clicks: the run view's custom comm messages, no policy
shortcut."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kernel_harness import RUN_MIME, WIDGET_MIME, Kernel, answer, is_run_view, script

from nbagent.events.state import RunStatus
from nbagent.store import Store

pytestmark = pytest.mark.kernel


def create(path: str, content: str = "hello\n", text: str = "I'll write it.") -> dict:
    return {"content": text, "tool_calls": [{"name": "create_file", "arguments": {"path": path, "content": content}}]}


def store(k: Kernel) -> Store:
    return Store(k.folder / "test.nbagent", readonly=True)


def notes(cell: object) -> list[str]:
    """The "↪ continues run ..." lines shown above the record of a run continued in a later cell."""
    return [o["data"]["text/plain"] for o in cell.outputs  # type: ignore[attr-defined]
            if "data" in o and "nbagent-continues" in o["data"].get("text/html", "")]


def interrupt_note(cell: object) -> str:
    """The "⏸ Interrupted… %agent resume" line under an interrupted run's record (a display, so it can change)."""
    return next(o["data"]["text/plain"] for o in cell.outputs  # type: ignore[attr-defined]
                if "data" in o and "nbagent-note" in o["data"].get("text/html", ""))


def error(cell: object) -> str:
    """The cell's error output (`ename: evalue`), or ""."""
    return "\n".join(o["error"] for o in cell.outputs if "error" in o)  # type: ignore[attr-defined]


def assert_static_record(cell: object) -> dict:
    """The cell's output is the static record only (besides a continuation or interruption note): html + run
    json, no live-widget-only output."""
    outputs = [o for o in cell.outputs if "data" in o  # type: ignore[attr-defined]
               and "nbagent-continues" not in o["data"].get("text/html", "")
               and "nbagent-note" not in o["data"].get("text/html", "")]
    assert len(outputs) == 1, outputs
    data = outputs[0]["data"]
    assert WIDGET_MIME not in data and {"text/plain", "text/html", RUN_MIME} <= set(data)
    return data[RUN_MIME]


def test_approve_by_click(kernel: Kernel) -> None:
    script(kernel.folder / "s.json", create("report.md"), answer("Wrote **report.md**."))
    cell = kernel.submit("%%agent --script s.json\nwrite a report", cell_id="c1")
    comm, pending = kernel.wait_for_pending("approval")
    view = kernel.widgets[comm]["view"]
    assert view["plans"][0]["steps"][0]["tool"] == "create_file" and "+hello" in view["plans"][0]["steps"][0]["preview"]
    kernel.click(comm, pending["request_id"], "approve")
    kernel.wait(cell)
    assert cell.ok and (kernel.folder / "report.md").read_text() == "hello\n"
    record = assert_static_record(cell)
    assert record["status"] == "completed" and record["answer"] == "Wrote **report.md**."
    assert record["cell_id"] == "c1" and record["decisions"][0]["kind"] == "approved"


def test_two_approvals_in_one_run_and_why_clicks_are_custom_messages(kernel: Kernel) -> None:
    script(kernel.folder / "s.json", create("a.md"), create("b.md", "bye\n"), answer("Wrote both."))
    cell = kernel.submit("%%agent --script s.json\nwrite two files", cell_id="c1")
    comm, first = kernel.wait_for_pending("approval")
    assert "decision" not in kernel.widgets[comm]  # no trait for the front end to sync: a click is an event
    click = kernel.click(comm, first["request_id"], "approve")
    comm, second = kernel.wait_for_pending("approval", exclude={first["request_id"]})
    kernel.click(comm, second["request_id"], "approve")
    kernel.wait(cell)
    assert (kernel.folder / "a.md").read_text() == "hello\n" and (kernel.folder / "b.md").read_text() == "bye\n"
    assert [d.kind for d in store(kernel).run_state(assert_static_record(cell)["run_id"]).decisions] == [
        "approved", "approved"]
    # ipykernel 7.4 handles a comm message that arrives while the cell awaits with concurrent=True, which publishes
    # no busy/idle for it; ipywidgets' page counts a *state sync* pending until that idle, so a second sync of the
    # same widget would never leave the page. Custom messages are not counted: the second click got through.
    assert "idle" not in kernel.statuses.get(click, []), kernel.statuses.get(click)


def test_deny_by_click_with_a_reason(kernel: Kernel) -> None:
    script(kernel.folder / "s.json", create("report.md"), answer("Understood, nothing written."))
    cell = kernel.submit("%%agent --script s.json\nwrite a report", cell_id="c1")
    comm, pending = kernel.wait_for_pending("approval")
    kernel.click(comm, pending["request_id"], "deny", "not today")
    kernel.wait(cell)
    assert cell.ok and not (kernel.folder / "report.md").exists()
    record = assert_static_record(cell)
    assert record["decisions"][0] == {**record["decisions"][0], "kind": "rejected", "text": "not today"}
    state = store(kernel).run_state(record["run_id"])
    assert any("not today" in m["content"] for m in state.messages if m["role"] == "tool")


def test_refine_by_click_then_approve(kernel: Kernel) -> None:
    script(kernel.folder / "s.json", create("report.md"), create("summary.md", text="Renamed."),
           answer("Wrote summary.md."))
    cell = kernel.submit("%%agent --script s.json\nwrite a report", cell_id="c1")
    comm, first = kernel.wait_for_pending("approval")
    kernel.click(comm, first["request_id"], "refine", "call it summary.md")
    comm, second = kernel.wait_for_pending("approval", exclude={first["request_id"]})
    kernel.click(comm, second["request_id"], "approve")
    kernel.wait(cell)
    assert (kernel.folder / "summary.md").exists() and not (kernel.folder / "report.md").exists()
    state = store(kernel).run_state(assert_static_record(cell)["run_id"])
    assert {"role": "user", "content": "call it summary.md"} in state.messages
    assert [d.kind for d in state.decisions] == ["refined", "approved"]


def test_ask_human_answered_in_the_view(kernel: Kernel) -> None:
    script(kernel.folder / "s.json",
           {"tool_calls": [{"name": "ask_human", "arguments": {"question": "Which year?"}}]},
           answer("Using 2024."))
    cell = kernel.submit("%%agent --script s.json\nsummarise the year", cell_id="c1")
    comm, pending = kernel.wait_for_pending("human_input")
    assert pending["question"] == "Which year?"
    kernel.click(comm, pending["request_id"], "answer", "2024")
    kernel.wait(cell)
    record = assert_static_record(cell)
    assert record["status"] == "completed" and record["decisions"][0]["text"] == "2024"


def test_stale_and_duplicate_clicks_are_ignored(kernel: Kernel) -> None:
    script(kernel.folder / "s.json", create("report.md"), answer("done"))
    cell = kernel.submit("%%agent --script s.json\nwrite a report", cell_id="c1")
    comm, pending = kernel.wait_for_pending("approval")
    kernel.click(comm, "01STALEREQUESTID0000000000", "approve")  # a click from an older card
    kernel.click(comm, pending["request_id"], "answer", "wrong kind")
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        kernel.pump(0.1)
    assert cell.reply is None and not (kernel.folder / "report.md").exists()  # still waiting
    kernel.click(comm, pending["request_id"], "deny", "no")
    kernel.click(comm, pending["request_id"], "approve")  # a double click after the decision
    kernel.wait(cell)
    assert not (kernel.folder / "report.md").exists()
    assert [d.kind for d in store(kernel).run_state(assert_static_record(cell)["run_id"]).decisions] == ["rejected"]


def test_interrupt_while_waiting_then_approve_in_a_later_cell(kernel: Kernel) -> None:
    script(kernel.folder / "s.json", create("report.md"), answer("Wrote it after all."))
    cell = kernel.submit("%%agent --script s.json\nwrite a report", cell_id="c1")
    kernel.wait_for_pending("approval")
    kernel.km.interrupt_kernel()
    kernel.wait(cell, timeout=30)
    record = assert_static_record(cell)
    assert record["status"] == "interrupted" and record["pending"] is not None
    assert interrupt_note(cell).startswith("⏸ Interrupted.") and "%agent resume" in interrupt_note(cell)
    later = kernel.run("%agent approve", cell_id="c2")
    assert later.ok and (kernel.folder / "report.md").exists()
    final = assert_static_record(later)
    assert final["run_id"] == record["run_id"] and final["status"] == "completed"
    # one run, one state: the first cell's record now says what the later one says, not "interrupted · waiting"
    updated = assert_static_record(cell)
    assert updated == final and updated["pending"] is None and updated["decisions"][0]["kind"] == "approved"
    assert "interrupted" not in next(o["data"]["text/plain"] for o in cell.outputs if "data" in o).split("\n")[0]
    # and the later cell says it continues that run, started in cell c1 (its record there is kept up to date)
    (note,) = notes(later)
    assert note.startswith(f"↪ continues run {record['run_id']} from cell [") and "id c1" in note
    assert "updated to match" in note
    # and the first cell's "Interrupted… %agent resume" line no longer asks for what was done
    assert interrupt_note(cell).startswith("↪ Interrupted here, then continued in cell [") and "(completed)" in \
        interrupt_note(cell) and "%agent resume" not in interrupt_note(cell)


def test_resume_in_a_later_cell_then_an_approval_there_updates_every_record(kernel: Kernel) -> None:
    """Interrupted twice, continued in two later cells: all three outputs end showing the final state."""
    script(kernel.folder / "s.json", create("a.md"), create("b.md", "bye\n"), answer("Wrote both."))
    first = kernel.submit("%%agent --script s.json\nwrite two files", cell_id="c1")
    _, asked = kernel.wait_for_pending("approval")
    kernel.km.interrupt_kernel()
    kernel.wait(first, timeout=30)
    run_id = assert_static_record(first)["run_id"]
    second = kernel.submit("%agent approve", cell_id="c2")  # writes a.md, then asks about b.md
    _, asked_again = kernel.wait_for_pending("approval", exclude={asked["request_id"]})
    kernel.km.interrupt_kernel()  # nobody answers here either
    kernel.wait(second, timeout=30)
    assert (kernel.folder / "a.md").exists() and assert_static_record(first)["status"] == "interrupted"
    assert assert_static_record(first)["decisions"][0]["kind"] == "approved"  # updated when c2 stopped
    third = kernel.submit(f"%agent resume {run_id}", cell_id="c3")
    comm, pending = kernel.wait_for_pending("approval", exclude={asked["request_id"]})
    assert pending["request_id"] == asked_again["request_id"]
    assert run_id in notes(third)[0] and "id c1" in notes(third)[0]  # shown before the run view, while it runs
    kernel.click(comm, pending["request_id"], "approve")
    kernel.wait(third)
    assert (kernel.folder / "b.md").exists()
    views = [assert_static_record(c) for c in (first, second, third)]
    assert all(v == views[2] for v in views) and views[2]["status"] == "completed"
    assert [d["kind"] for d in views[0]["decisions"]] == ["approved", "approved"]
    del second


def test_kernel_restart_then_resume(kernel: Kernel) -> None:
    script(kernel.folder / "s.json", create("report.md"), answer("Resumed and wrote it."))
    cell = kernel.submit("%%agent --script s.json\nwrite a report", cell_id="c1")
    kernel.wait_for_pending("approval")
    kernel.restart()  # the cell dies with the kernel; the run stays `waiting` in the store
    run_id = store(kernel).run_ids()[-1]
    assert store(kernel).run_state(run_id).status == RunStatus.WAITING
    assert kernel.run("%load_ext nbagent", cell_id="setup").ok
    resumed = kernel.submit(f"%agent resume {run_id}", cell_id="c2")
    comm, pending = kernel.wait_for_pending("approval")
    kernel.click(comm, pending["request_id"], "approve")
    kernel.wait(resumed)
    assert (kernel.folder / "report.md").exists()
    assert assert_static_record(resumed)["status"] == "completed"
    # the first cell's output belongs to the kernel that died: this cell says where the run started instead
    (note,) = notes(resumed)
    assert f"continues run {run_id}, started in cell id c1" in note and "this record is the latest" in note
    del cell


def test_rerunning_an_earlier_cell_forks_and_supersedes(kernel: Kernel) -> None:
    for name, text in (("a", "first answer"), ("b", "second answer"), ("a2", "first again")):
        script(kernel.folder / f"{name}.json", answer(text))
    a1 = kernel.run("%%agent --script a.json\nfirst question", cell_id="cell-a")
    b1 = kernel.run("%%agent --script b.json\nsecond question", cell_id="cell-b")
    a2 = kernel.run("%%agent --script a2.json\nfirst question, edited", cell_id="cell-a")
    s = store(kernel)
    ra1, rb1, ra2 = (assert_static_record(c)["run_id"] for c in (a1, b1, a2))
    assert s.run_state(ra1).status == s.run_state(rb1).status == RunStatus.SUPERSEDED
    assert s.run_state(ra1).superseded_by == ra2 and s.run_state(ra2).previous_run_id is None
    request = next(e for e in s.run_events(ra2) if e.type == "llm_called").payload.request
    assert request["prefix"]["messages"] == 1  # the system prompt only: nothing of the superseded runs
    assert request["messages"] == [{"role": "user", "content": "first question, edited"}]
    # the old cells' records were re-rendered in place with the banner
    assert assert_static_record(a1)["superseded_by"] == ra2
    assert assert_static_record(b1)["status"] == "superseded"
    # a cell after the fork continues from it
    script(kernel.folder / "c.json", answer("third"))
    c = kernel.run("%%agent --script c.json\nthird question", cell_id="cell-c")
    assert s.run_state(assert_static_record(c)["run_id"]).previous_run_id == ra2


def test_line_magics(kernel: Kernel) -> None:
    script(kernel.folder / "s.json", answer("Hello."))
    kernel.run("%%agent --script s.json\nsay hello", cell_id="c1")
    run_id = store(kernel).run_ids()[-1]
    out = kernel.run("%agent runs", cell_id="c2").stdout
    assert "RUN" in out and run_id[:12] in out and "completed" in out
    assert "run_started" in kernel.run(f"%agent show {run_id}", cell_id="c3").stdout
    assert "create_file" in kernel.run("%agent tools", cell_id="c4").stdout
    assert "latest run" in kernel.run("%agent status", cell_id="c5").stdout
    kernel.run("%agent config autonomy=L2 max_steps=7", cell_id="c6")
    config = kernel.run("%agent config", cell_id="c7").stdout
    assert "'L2'" in config and "%agent config" in config and "7" in config
    exported = kernel.run(f"%agent export {run_id} --format json -o run.json", cell_id="c8")
    assert json.loads((kernel.folder / "run.json").read_text())["run_id"] == run_id, exported.stderr
    log = kernel.run(f"%agent log {run_id}", cell_id="c8b")
    table = next(o["data"] for o in log.outputs if "data" in o)
    assert "text/html" in table and "run_started" in table["text/plain"]  # a pandas DataFrame
    bad = kernel.run("%agent approve", cell_id="c9")
    assert not bad.ok and "no run is waiting" in error(bad)
    assert "usage: %%agent" in kernel.run("%%agent --help\n", cell_id="c10").stdout


def test_bad_options_are_clear_errors(kernel: Kernel) -> None:
    """An nbagent error fails the cell (Run All and `nbagent run` stop there) with one line, no traceback."""
    cell = kernel.run("%%agent --autonomy L9\nx", cell_id="c1")
    assert not cell.ok and "UsageError: %%agent: argument -a/--autonomy: invalid choice: 'L9'" in error(cell)
    (shown,) = cell.reply["content"]["traceback"]  # type: ignore[index]
    assert shown.startswith("\x1b[0;31mUsageError\x1b[0m: %%agent: argument") and "Traceback" not in shown
    cell = kernel.run("%%agent\n", cell_id="c2")
    assert not cell.ok and "the cell has no request" in error(cell)
    cell = kernel.run("%%agent\nwho are you", cell_id="c3")
    assert "no model" in error(cell) and "--script" in error(cell)
    cell = kernel.run("%%agent --script missing.json\nx", cell_id="c4")
    assert "missing.json: script file not found" in error(cell)


def test_load_is_fast_and_imports_no_litellm(tmp_path: Path) -> None:
    k = Kernel(tmp_path)
    try:
        out = k.run("import sys, time\nt = time.perf_counter()\n%load_ext nbagent\n"
                    "print(round(time.perf_counter() - t, 3), 'litellm' in sys.modules)", cell_id="c").stdout
        assert out.split()[1] == "False"  # the time itself is measured in bench/kernel_bench.py
    finally:
        k.close()


def test_a_run_that_ends_at_once_goes_straight_to_its_record(kernel: Kernel) -> None:
    """No live view is made for a run that ends before a person could see one (ipython/live.py, LIVE_AFTER_S):
    the cell's one output is its record, and no widget comm was ever opened for it. A run that waits still gets
    its view (the approval tests above click in it)."""
    script(kernel.folder / "s.json", answer("Done at once."))
    cell = kernel.run("%%agent --script s.json\nanswer", cell_id="fast")
    assert cell.ok, error(cell)
    record = assert_static_record(cell)
    assert record["status"] == "completed" and record["answer"] == "Done at once."
    assert not kernel.run_views() and not any(is_run_view(s) for s in kernel.closed.values())
    assert "nbagent: running" not in json.dumps(cell.outputs)  # the placeholder was replaced, not left behind

