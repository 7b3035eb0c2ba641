"""Issue 14 in a real browser: undo a finished run from the notebook, by visible text in JupyterLab + Chromium.

A run creates report.md and overwrites notes.md (both approved on their cards). Its static record replaces the live
view when it ends (the saved notebook keeps no widget), so the record says how to undo it: "%agent undo RUN undoes
this run's 2 file changes". Running that line with a person at the page shows the Undo panel: "Undo" first asks,
listing each file and what happens to it (removed / restored), "Undo 2 changes" runs the undo in the kernel (a custom
comm message, like a decision) and the panel shows the result; the files are back on disk. A second panel on a
file edited since shows the refusal with its diff, and nothing changes. The server, browser and helpers are
tests/test_browser.py's; screenshots go to test-artifacts/browser/ (undo-*.png).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_browser import (  # noqa: F401  (browser, lab, page are fixtures)
    ACTIVE,
    LIVE,
    RUN_MIME,
    Lab,
    browser,
    button,
    create,
    expect,
    finished_record,
    lab,
    page,
    save,
    saved_record,
    shot,
    start_flow,
    wait_until,
    waiting_card,
    write_flow,
)

from nbagent.store import Store
from nbagent.ui.record import render_html, render_text, undo_hint

pytest.importorskip("playwright.sync_api")

from playwright.sync_api import Page

pytestmark = pytest.mark.browser

PANEL = f"{ACTIVE} .nbagent-live.nbv-undo"
# what the panel's output becomes once it is final (nbagent/ui/undo_record.py): HTML and text, no widget
OUTCOME = f"{ACTIVE} .jp-OutputArea-output .nbr-undo-record"


def overwrite(path: str, content: str) -> dict[str, Any]:
    return {"content": "I'll update the notes.",
            "tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]}


def run_cell(page: Page, source: str) -> None:  # noqa: F811
    """Add a code cell at the end of the notebook with `source` and run it (Shift+Enter)."""
    page.locator(f"{ACTIVE} .jp-Cell .jp-InputPrompt").last.click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")  # a new cell below the last one, in edit mode after Enter
    page.keyboard.press("Enter")
    page.keyboard.insert_text(source)
    page.keyboard.press("Shift+Enter")


def undo_panel(page: Page, index: int = 0) -> Any:  # noqa: F811
    panel = page.locator(PANEL).nth(index)
    expect(panel).to_be_visible(timeout=60_000)
    panel.scroll_into_view_if_needed()
    return panel


def two_changes(page: Page, lab: Lab, name: str) -> tuple[Path, Any]:  # noqa: F811
    """A run that creates report.md and overwrites notes.md, each approved on its card: (notebook, its record)."""
    notebook = write_flow(lab, name, [create("report.md", "# Report\n", "I'll write the report."),
                                      overwrite("notes.md", "agent notes\n"), {"content": "Done."}],
                          files={"notes.md": "my notes\n"}, prompt="Write the report and update the notes")
    start_flow(page, lab, notebook)
    waiting_card(page, 1, "Create report.md")
    button(page, "Create report.md").click()
    waiting_card(page, 2, "Overwrite notes.md")
    button(page, "Overwrite notes.md").click()
    return notebook, finished_record(page)


def test_undo_a_finished_run_in_the_browser(page: Page, lab: Lab) -> None:  # noqa: F811
    notebook, record = two_changes(page, lab, "undo")
    folder = notebook.parent
    assert (folder / "report.md").read_text() == "# Report\n" and (folder / "notes.md").read_text() == "agent notes\n"
    saved = saved_record(page, notebook)  # the record replaced the live view: no widget is left in the notebook
    run_id = saved["run_id"]
    hint = f"%agent undo {run_id} undoes this run's 2 file changes"
    assert undo_hint(saved) == hint
    outputs = [o for c in json.loads(notebook.read_text())["cells"] for o in c.get("outputs", [])
               if RUN_MIME in o.get("data", {})]
    assert hint in "".join(outputs[0]["data"]["text/plain"])  # the saved record tells how, in its text
    assert f"%agent undo {run_id}</code> undoes this run&#x27;s 2 file changes" in "".join(
        outputs[0]["data"]["text/html"])
    record.scroll_into_view_if_needed()
    shot(page, "undo-1-finished-record")

    # the hint's line, run in a new cell: the Undo panel asks before it changes anything
    run_cell(page, f"%agent undo {run_id}")
    panel = undo_panel(page)
    expect(panel).to_contain_text(f"Undo run {run_id}")
    expect(panel).to_contain_text("it changed 2 files")
    panel.get_by_role("button", name="Undo", exact=True).click()
    ask = panel.locator(".nbv-undo-ask")
    expect(ask).to_contain_text("Undo 2 changes?")
    expect(ask.locator("li")).to_have_count(2)
    expect(ask.locator("li", has_text="report.md")).to_contain_text("removed")
    expect(ask.locator("li", has_text="notes.md")).to_contain_text("restored")
    shot(page, "undo-2-asks-first")
    # Cancel changes nothing and goes back to the Undo button
    panel.get_by_role("button", name="Cancel", exact=True).click()
    expect(panel.locator(".nbv-undo-ask")).to_have_count(0)
    assert (folder / "report.md").exists() and (folder / "notes.md").read_text() == "agent notes\n"
    panel.get_by_role("button", name="Undo", exact=True).click()
    panel.get_by_role("button", name="Undo 2 changes", exact=True).click()

    # the outcome replaces the panel: what the saved notebook keeps, as HTML and text
    done = page.locator(OUTCOME).first
    expect(done).to_contain_text("undone", timeout=30_000)
    expect(done).to_contain_text("2 files put back")
    expect(done.locator("li", has_text="report.md")).to_contain_text("removed")
    expect(done.locator("li", has_text="notes.md")).to_contain_text("restored")
    shot(page, "undo-3-done")
    wait_until(lambda: not (folder / "report.md").exists(), 10, "report.md removed")
    assert (folder / "notes.md").read_text() == "my notes\n"
    store = Store(notebook.with_suffix(".nbagent"), readonly=True)
    undo_runs = [r for r in store.list_runs() if r.model == "nbagent/undo"]
    assert len(undo_runs) == 1 and undo_runs[0].status.value == "completed"
    expect(done).to_contain_text(undo_runs[0].id)
    assert not done.get_by_role("button").count()  # done: nothing more to click

    # undo the undo, but notes.md was edited since: the preview says so before any button, nothing changes
    (folder / "notes.md").write_text("edited by hand\n")
    run_cell(page, f"%agent undo {undo_runs[0].id}")
    refused = page.locator(OUTCOME).nth(1)
    expect(refused).to_contain_text("undo refused", timeout=30_000)
    expect(refused).to_contain_text("nothing was changed")
    expect(refused.locator("li", has_text="notes.md")).to_contain_text("+edited by hand")
    expect(refused).to_contain_text(f"%agent undo {undo_runs[0].id} --force")
    assert not refused.get_by_role("button").count()  # nothing to confirm: no Undo button at all
    shot(page, "undo-4-conflict")
    assert (folder / "notes.md").read_text() == "edited by hand\n" and not (folder / "report.md").exists()
    assert len([r for r in store.list_runs() if r.model == "nbagent/undo"]) == 1
    expect(page.locator(LIVE).filter(has_text="nbagent run")).to_have_count(0)


# ------------------------------------------------------------------------------------------------ no browser


def test_the_record_tells_how_to_undo_only_a_run_that_changed_files() -> None:
    step = {"kind": "tool", "tool": "create_file", "status": "ok", "target": "a.md", "call_id": "c1"}
    view = {"run_id": "01ABC", "status": "completed", "steps": [
        step, {**step, "call_id": "c2"}, {**step, "tool": "write_file", "target": "b.md", "call_id": "c3"},
        {**step, "tool": "delete_file", "status": "failed", "target": "c.md", "call_id": "c4"},
        {**step, "tool": "read_file", "target": "d.md", "call_id": "c5"}]}
    hint = "%agent undo 01ABC undoes this run's 2 file changes"
    assert undo_hint(view) == hint and hint in render_text(view)
    assert "<code>%agent undo 01ABC</code> undoes this run&#x27;s 2 file changes" in render_html(view)
    assert undo_hint({**view, "status": "waiting"}) == ""  # not ended: nothing to undo yet
    reads = {**view, "steps": [view["steps"][4]]}
    assert undo_hint(reads) == "" and "%agent undo" not in render_text(reads) + render_html(reads)


def test_the_undo_panel_runs_the_undo_once_and_reports(tmp_path: Path) -> None:
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from nbagent.gate.deciders import PolicyDecider
    from nbagent.runtime import Agent
    from nbagent.scope.rules import Scope
    from nbagent.store.blobs import BlobStore
    from nbagent.tools.files import file_tools
    from nbagent.ui.undo_view import UndoView, undo_offer
    from nbagent.undo.files import UndoError, undo

    (tmp_path / "notes.md").write_text("mine\n")
    store = Store(tmp_path / "nb.nbagent")
    tools = file_tools(Scope(root=tmp_path, base=tmp_path), BlobStore.of_store(store.path))
    script = tmp_path / "turns.json"
    script.write_text(json.dumps({"turns": [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "notes.md", "content": "agent\n"}},
                        {"name": "create_file", "arguments": {"path": "new.md", "content": "n\n"}}]},
        {"content": "done"}]}))
    agent = Agent(script=script, tools=tools, store=store, autonomy="L3", decider=PolicyDecider("all"))
    with ThreadPoolExecutor(1) as pool:  # a thread of its own: Playwright's sync API may hold this one's loop
        run = pool.submit(lambda: asyncio.run(agent.run("edit"))).result().run_id
    offer = undo_offer(store, run)
    assert sorted((c["path"], c["action"]) for c in offer["changes"]) == [("new.md", "removed"),
                                                                         ("notes.md", "restored")]
    calls: list[int] = []

    def run_undo() -> Any:
        calls.append(1)
        return undo(store, run, folder=tmp_path, by="the Undo button")

    panel = UndoView(offer, run_undo)
    panel._on_custom(panel, {"event": "undo"}, [])
    panel._on_custom(panel, {"event": "undo"}, [])  # a second click: ignored
    assert calls == [1] and panel.result["state"] == "done" and panel.result["undo_run_id"]
    assert (tmp_path / "notes.md").read_text() == "mine\n" and not (tmp_path / "new.md").exists()
    panel.close()
    broken = UndoView(offer, lambda: (_ for _ in ()).throw(UndoError("no such run")))
    broken._on_custom(broken, {"event": "undo"}, [])
    assert broken.result == {"state": "error", "text": "no such run"}
    broken.close()


def test_click_undo_on_the_finished_run_and_see_the_file_restored(page: Page, lab: Lab) -> None:  # noqa: F811
    """The finished run's record offers "Undo…": it puts `%agent undo RUN` in a new cell below and runs it, and
    the panel there asks first (each file and what happens to it) before the files are put back."""
    notebook, record = two_changes(page, lab, "undo-click")
    folder = notebook.parent
    offer = record.get_by_role("button", name="Undo…", exact=True)
    offer.scroll_into_view_if_needed()
    shot(page, "undo-click-1-record-offers")
    offer.click()

    panel = undo_panel(page)  # in the new cell below, which holds the very line the record shows
    run_id = Store(notebook.with_suffix(".nbagent"), readonly=True).list_runs()[-1].id
    save(page, notebook)
    sources = ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"]]
    assert sources[-1] == f"%agent undo {run_id}"
    panel.get_by_role("button", name="Undo", exact=True).click()
    ask = panel.locator(".nbv-undo-ask")
    expect(ask.locator("li", has_text="report.md")).to_contain_text("removed")
    expect(ask.locator("li", has_text="notes.md")).to_contain_text("restored")
    assert (folder / "notes.md").read_text() == "agent notes\n"  # nothing changed before the confirmation
    panel.get_by_role("button", name="Undo 2 changes", exact=True).click()
    expect(page.locator(OUTCOME)).to_contain_text("2 files put back", timeout=30_000)
    shot(page, "undo-click-2-done")
    wait_until(lambda: not (folder / "report.md").exists(), 10, "report.md removed")
    assert (folder / "notes.md").read_text() == "my notes\n"
