"""Grants in a real kernel: a click "for this run", `%agent approve --for ...`, `%agent grants`, `%agent revoke`."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kernel_harness import Kernel, script

from nbagent.store import Store

pytestmark = pytest.mark.kernel


def write(path: str, content: str) -> dict:
    return {"content": f"Updating {path}.",
            "tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]}


def error(cell: object) -> str:
    return "\n".join(o["error"] for o in cell.outputs if "error" in o)  # type: ignore[attr-defined]


def text(cell: object) -> str:
    return cell.stdout  # type: ignore[attr-defined]


def grant_starts(folder: Path) -> list[str | None]:
    s = Store(folder / "test.nbagent", readonly=True)
    return [e.payload.grant_id for e in s.query_events(types="tool_call_started")]


def test_a_click_for_this_run_gives_a_grant_that_answers_the_next_call(kernel: Kernel) -> None:
    (kernel.folder / "notes.md").write_text("mine\n")
    script(kernel.folder / "s.json", write("notes.md", "v1\n"), write("notes.md", "v2\n"), {"content": "Done."})
    cell = kernel.submit("%%agent --script s.json\nupdate the notes twice", cell_id="c1")
    comm, pending = kernel.wait_for_pending("approval")
    kernel.custom(comm, {"event": "decision", "request_id": pending["request_id"], "action": "approve",
                         "text": "", "scope": "run", "nonce": f"{time.monotonic_ns():x}"})
    kernel.wait(cell)
    assert (kernel.folder / "notes.md").read_text() == "v2\n"
    starts = grant_starts(kernel.folder)
    assert starts[0] is None and starts[1] is not None
    listing = kernel.run("%agent grants --all", cell_id="c2")
    assert "write_file path=notes.md up to WRITE_HIGH_RISK" in text(listing) and "ended with its run" in text(listing)


def test_approve_for_the_session_in_a_cell_then_list_and_revoke(kernel: Kernel) -> None:
    (kernel.folder / "data").mkdir()
    for name in ("a.md", "b.md"):
        (kernel.folder / "data" / name).write_text("old\n")
    script(kernel.folder / "s.json", write("data/a.md", "a\n"), {"content": "Wrote a."})
    first = kernel.run("%%agent --script s.json --approve none\nwrite a", cell_id="c1")  # denied by the policy
    assert (kernel.folder / "data" / "a.md").read_text() == "old\n"
    script(kernel.folder / "t.json", write("data/a.md", "a\n"), write("data/b.md", "b\n"), {"content": "Wrote both."})
    waiting = kernel.submit("%%agent --script t.json\nwrite both", cell_id="c3")
    kernel.wait_for_pending("approval")
    kernel.km.interrupt_kernel()  # the person walks away; the run stays waiting for a decision in a later cell
    kernel.wait(waiting, timeout=30)
    bad = kernel.run("%agent approve --for run --path 'zzz/*'", cell_id="c4")
    assert "covers none of the calls" in error(bad) and "nothing was decided" in error(bad)
    assert error(bad).count("\n") == 0
    assert "--for" in error(kernel.run("%agent approve --path 'data/*'", cell_id="c5"))
    ok = kernel.run("%agent approve --for session --path 'data/*.md' --expires 2h", cell_id="c6")
    assert ok.ok, error(ok)
    assert (kernel.folder / "data" / "b.md").read_text() == "b\n"  # covered by the grant: no second question
    assert grant_starts(kernel.folder)[-1] is not None
    listing = text(kernel.run("%agent grants", cell_id="c7"))
    assert "session" in listing and "write_file path=data/*.md" in listing and "active until" in listing
    gid = Store(kernel.folder / "test.nbagent", readonly=True).query_events(types="grant_given")[0].payload.grant_id
    revoked = kernel.run(f"%agent revoke {gid[:10]} done with it", cell_id="c8")
    assert f"revoked grant {gid}" in text(revoked)
    twice = kernel.run(f"%agent revoke {gid}", cell_id="c9")
    assert "already revoked" in error(twice) and "nothing changed" in error(twice)
    assert "no grants in force" in text(kernel.run("%agent grants", cell_id="c10"))
    assert first.ok


def test_undo_in_a_kernel_after_a_real_restart(kernel: Kernel) -> None:
    """A run changes files; the kernel is restarted (a new process); `%agent undo RUN` there puts them back."""
    (kernel.folder / "notes.md").write_text("mine\n")
    script(kernel.folder / "s.json", write("notes.md", "agent\n"),
           {"tool_calls": [{"name": "create_file", "arguments": {"path": "new.md", "content": "n\n"}}]},
           {"content": "Done."})
    done = kernel.run("%%agent --script s.json --approve all\nedit", cell_id="c1")
    assert done.ok, error(done)
    assert (kernel.folder / "notes.md").read_text() == "agent\n" and (kernel.folder / "new.md").exists()
    run_id = Store(kernel.folder / "test.nbagent", readonly=True).list_runs()[-1].id
    kernel.restart()
    assert kernel.run("%load_ext nbagent", cell_id="c2").ok
    undone = kernel.run(f"%agent undo {run_id}", cell_id="c3")
    assert undone.ok, error(undone) + undone.stderr
    # the harness draws the Undo panel as JupyterLab does (it says "rendered"): the undo runs on its click
    kernel.custom(kernel.undo_panel(), {"event": "undo"})
    deadline = time.monotonic() + 30
    while (kernel.folder / "notes.md").read_text() != "mine\n" and time.monotonic() < deadline:
        kernel.pump(0.2)
    assert (kernel.folder / "notes.md").read_text() == "mine\n" and not (kernel.folder / "new.md").exists()
    runs = Store(kernel.folder / "test.nbagent", readonly=True).list_runs()
    assert runs[-1].model == "nbagent/undo" and runs[-1].status.value == "completed"
