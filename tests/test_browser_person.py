"""Issue 24 in a real browser: nothing nbagent shows works against the person at the page.

JupyterLab + Chromium (tests/test_browser.py's server, browser and helpers), clicked and typed by visible text:
- a run interrupted while it waits for approval and resumed with `%agent resume` in a later cell shows its live
  card with its buttons in that cell, and a click there finishes the run;
- a question that arrives while the person types in another cell leaves their typing where it is;
- after save, kernel shut down and reopen, a record's "Undo…" works in the new kernel (the files come back);
- runs that end before their live view would appear (0.1 s) show their record only, no live view drawn and
  removed, and the record's Undo… works though no run widget was made in the kernel;
- keyboard only: approve with Enter, Escape in the reason box, deny with a reason: focus stays in the run view,
  Cancel and Escape drop the draft, a waiting card and a question are announced (a polite live region).
Each flow ends with the saved notebook: every record carries text/html and text/plain, no widget is left, no
absolute path of the log is in it, and `jupyter nbconvert --to html` shows each run's plans and decisions.
Screenshots: test-artifacts/browser/p-*.png.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from test_browser import (  # noqa: F401  (browser, lab, page are fixtures)
    ACTIVE,
    RECORD,
    RUN_MIME,
    Lab,
    ask,
    browser,
    command,
    create,
    expect,
    lab,
    open_notebook,
    page,
    save,
    shot,
    wait_kernel_idle,
    wait_until,
)

from nbagent.store import Store

pytest.importorskip("playwright.sync_api")

from playwright.sync_api import Page

pytestmark = pytest.mark.browser

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
LIVE_VIEW = ".nbagent-live:not(.nbv-static)"
CELLS = f"{ACTIVE} .jp-Notebook .jp-Cell"
MAGIC = "%%agent --model nbagent/scripted --script turns.json --autonomy L1"

# every `nbagent-run-final` event the page's live views send (run_view.js): [the index of its cell, the status]
RECORD_FINALS = """() => {
  window.__nbagentFinals = [];
  document.addEventListener('nbagent-run-final', (e) => {
    const cells = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell')];
    window.__nbagentFinals.push([cells.indexOf(e.target.closest('.jp-Cell')), e.detail.view.status]);
  });
}"""


def notebook_of(lab: Lab, name: str, turns: list[dict[str, Any]], cells: list[str],  # noqa: F811
                files: dict[str, str] | None = None) -> Path:
    """A folder with the scripted model's turns, some files and a notebook of these code cells."""
    folder = lab.root / name
    folder.mkdir()
    for rel, text in (files or {}).items():
        (folder / rel).write_text(text)
    (folder / "turns.json").write_text(json.dumps({"turns": turns}))
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    path = folder / "analysis.ipynb"
    nbformat.write(nb, path)
    return path


def run_cell(page: Page, index: int) -> None:  # noqa: F811
    page.evaluate("(i) => { window.jupyterapp.shell.currentWidget.content.activeCellIndex = i; }", index)
    command(page, "notebook:run-cell")


def cell(page: Page, index: int) -> Any:  # noqa: F811
    return page.locator(CELLS).nth(index)


def outputs_of(notebook: Path) -> list[list[dict[str, Any]]]:
    return [c.get("outputs", []) for c in json.loads(notebook.read_text())["cells"]]


def check_saved(notebook: Path) -> list[dict[str, Any]]:
    """The saved notebook reads well anywhere: every record has text/html and text/plain beside its JSON, no widget
    view is left, and nbconvert's HTML shows each record. Returns the records."""
    records = []
    for outs in outputs_of(notebook):
        for o in outs:
            data = o.get("data", {})
            assert WIDGET_MIME not in data, f"a widget view was saved: {data.get('text/plain')}"
            if RUN_MIME in data:
                assert "text/html" in data and "text/plain" in data, f"a record without HTML or text: {sorted(data)}"
                assert 'class="nbagent-run' in "".join(data["text/html"])
                records.append(data[RUN_MIME])
    html = nbconvert_html(notebook)
    for r in records:
        assert r["run_id"] in html
    assert absolute_paths_in(notebook) == []  # the log's path is saved relative to the notebook (shared safely)
    return records


def nbconvert_html(notebook: Path) -> str:
    out = notebook.with_name(notebook.stem + "-converted.html")
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--output", out.name, str(notebook)],
                   check=True, capture_output=True, timeout=120)
    return out.read_text()


def nbconvert_text(notebook: Path) -> str:
    """What a reader of nbconvert's HTML sees: its text, tags and styles dropped, spaces collapsed."""
    import html as htmllib

    converted = nbconvert_html(notebook)
    body = re.sub(r"<style.*?</style>|<script.*?</script>", " ", converted[converted.index("<main"):], flags=re.S)
    return re.sub(r"\s+", " ", htmllib.unescape(re.sub(r"<[^>]+>", " ", body)))


def absolute_paths_in(notebook: Path) -> list[str]:
    """Where the saved JSON names the notebook's folder by its absolute path (the log's path, shared with the file)."""
    text = notebook.read_text()
    return [m.group(0) for m in re.finditer(re.escape(str(notebook.parent)) + r"[^\"\\]*", text)]


# ------------------------------------------------------------------------------------------------ resume


def test_interrupt_then_resume_in_a_later_cell_decides_on_the_live_card(page: Page, lab: Lab) -> None:  # noqa: F811
    """Interrupt a run that waits for approval; `%agent resume` in a later cell shows the live card with its
    buttons there (not the static record of the interrupted run), and clicking it finishes the run."""
    notebook = notebook_of(lab, "p-resume", [create("report.md", "# R\n"), {"content": "All written."}],
                           ["%load_ext nbagent", f"{MAGIC}\nWrite the report", "%agent resume"])
    folder = notebook.parent
    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    page.evaluate(RECORD_FINALS)
    run_cell(page, 0)
    run_cell(page, 1)
    expect(cell(page, 1).locator(".nbv-plan-waiting .nbv-plan-title")).to_have_text("Plan 1: Create report.md",
                                                                                    timeout=90_000)
    command(page, "kernelmenu:interrupt")
    first = cell(page, 1).locator(RECORD)
    expect(first).to_have_class(re.compile(r"\bnbr-status-interrupted\b"), timeout=60_000)
    shot(page, "p-resume-1-interrupted")

    run_cell(page, 2)
    later = cell(page, 2)
    card = later.locator(f"{LIVE_VIEW} .nbv-plan.nbv-plan-waiting")
    expect(card.locator(".nbv-plan-title")).to_have_text("Plan 1: Create report.md", timeout=60_000)
    approve = later.get_by_role("button", name="Create report.md", exact=True)
    expect(approve).to_be_enabled()
    # the view says where the run is now (waiting for this card), not where it was ("interrupted")
    expect(later.locator(LIVE_VIEW)).to_have_class(re.compile(r"\bnbv-status-waiting\b"))
    expect(later.locator(f"{LIVE_VIEW} .nbv-banner")).to_have_count(0)
    # the live view drew the run as it was ("interrupted") before resuming it: that is not the end of the run, so
    # it must not tell the page to put the static record in its place (run_view.js announceFinal)
    assert [f for f in page.evaluate("() => window.__nbagentFinals") if f[0] == 2] == []
    expect(later).to_contain_text("continues run")
    later.scroll_into_view_if_needed()
    shot(page, "p-resume-2-live-card-in-the-later-cell")
    approve.click()

    record = later.locator(RECORD)
    expect(record).to_have_class(re.compile(r"\bnbr-status-completed\b"), timeout=60_000)
    expect(record).to_contain_text("All written.")
    expect(first).to_have_class(re.compile(r"\bnbr-status-completed\b"), timeout=20_000)
    assert (folder / "report.md").read_text() == "# R\n"
    # the notes name the cells as JupyterLab numbers them: the run started in [2], was continued in [3]
    expect(later.locator(".nbagent-continues")).to_contain_text("from cell [2]")
    expect(cell(page, 1).locator(".nbagent-note")).to_contain_text("continued in cell [3]")
    expect(cell(page, 1).locator(".jp-InputPrompt")).to_contain_text("[2]")
    expect(later.locator(".jp-InputPrompt")).to_contain_text("[3]")
    record.scroll_into_view_if_needed()
    shot(page, "p-resume-3-completed-from-the-live-card")
    save(page, notebook)
    wait_until(lambda: [r["status"] for r in check_saved(notebook)] == ["completed", "completed"], 30,
               "both records of the run saved as completed, with HTML")
    run_id = check_saved(notebook)[0]["run_id"]
    decisions = Store(notebook.with_suffix(".nbagent"), readonly=True).run_state(run_id).decisions
    assert [(d.kind, d.by) for d in decisions] == [("approved", "user")]
    text = nbconvert_text(notebook)  # both records: the plan, the decision on it, the answer
    # (each record's answer twice: its folded summary line, and the full record behind it)
    assert text.count("Plan 1: Create report.md") == 2 and text.count("All written.") == 4
    assert len(re.findall(r"approved by (?:you|user)", text)) >= 2
    assert "continues run" in text and "from cell [2]" in text and "continued in cell [3]" in text


# ---------------------------------------------------------------------------------------------- runs that end at once

# every live run view the page ever draws, counted as it is added (a MutationObserver on the notebook)
COUNT_LIVE_VIEWS = """() => {
  window.__nbagentLiveViews = 0;
  new MutationObserver((changes) => {
    for (const c of changes) for (const n of c.addedNodes) {
      if (!(n instanceof Element)) continue;
      const found = [n, ...n.querySelectorAll('.nbagent-live')].filter(
        (e) => e.classList.contains('nbagent-live') );
      window.__nbagentLiveViews += found.length;
    }
  }).observe(document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook'),
             {childList: true, subtree: true});
}"""


def test_runs_that_end_at_once_show_their_record_only_and_it_works(page: Page, lab: Lab) -> None:  # noqa: F811
    """A run that ends before its live view would appear (0.1 s) shows nothing but its record, in its own cell: no
    live view is drawn and removed, the record's Undo… works though no run widget was ever made in the kernel, and
    the saved notebook and nbconvert's HTML say what happened."""
    fast = "%%agent --model nbagent/scripted --script turns.json --autonomy L3"
    answer = json.dumps({"turns": [{"content": "The folder holds **notes.md** and turns.json."}]})
    notebook = notebook_of(lab, "p-at-once", [create("notes.md", "# N\n", "I'll write the notes."),
                                              {"content": "Wrote **notes.md**."}],
                           ["%load_ext nbagent", f"{fast}\nWrite the notes",
                            f"{fast.replace('turns.json', 'answer.json')} --new\nWhat is here?"],
                           files={"answer.json": answer})
    folder = notebook.parent
    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    page.evaluate(COUNT_LIVE_VIEWS)
    run_cell(page, 0)
    run_cell(page, 1)
    run_cell(page, 2)
    first, second = cell(page, 1).locator(RECORD), cell(page, 2).locator(RECORD)
    expect(first).to_have_class(re.compile(r"\bnbr-status-completed\b"), timeout=90_000)
    expect(second).to_have_class(re.compile(r"\bnbr-status-completed\b"), timeout=60_000)
    wait_kernel_idle(page, lab, notebook)
    assert page.evaluate("() => window.__nbagentLiveViews") == 0, "a live view was drawn for a run that ended at once"
    for i in (1, 2):  # each cell: its record and nothing else (no placeholder line, no empty widget area)
        expect(cell(page, i).locator(".jp-OutputArea-output")).to_have_count(1)
    expect(first.locator(".nbr-effects")).to_contain_text("notes.md")
    expect(first.locator(".nbr-answer strong")).to_have_text("notes.md")
    expect(second.locator(".nbr-answer")).to_contain_text("The folder holds notes.md and turns.json.")
    expect(second.locator(".nbr-answer strong")).to_have_text("notes.md")
    expect(second.get_by_role("button", name="Undo…", exact=True)).to_have_count(0)  # it changed nothing
    assert (folder / "notes.md").read_text() == "# N\n"
    first.scroll_into_view_if_needed()
    shot(page, "p-at-once-1-records-only")

    first.get_by_role("button", name="Undo…", exact=True).click()
    below = cell(page, 2)  # the inserted `%agent undo RUN` cell, right below the run's cell
    panel = below.locator(".nbagent-live.nbv-undo")
    expect(panel).to_contain_text("Undo run", timeout=60_000)
    panel.get_by_role("button", name="Undo", exact=True).click()
    panel.get_by_role("button", name="Undo 1 change", exact=True).click()
    wait_until(lambda: not (folder / "notes.md").exists(), 30, "notes.md removed by the undo")
    expect(first.locator(".nbr-undone")).to_contain_text("Undone by run", timeout=30_000)
    first.scroll_into_view_if_needed()
    shot(page, "p-at-once-2-undone")

    save(page, notebook)
    wait_until(lambda: '"undone_by": "' in notebook.read_text() and WIDGET_MIME not in notebook.read_text(), 30,
               "the undo saved as its outcome, the first record saved as undone")
    records = check_saved(notebook)
    assert [r["status"] for r in records] == ["completed", "completed"]
    text = nbconvert_text(notebook)
    assert re.search(r"Answer Wrote notes\.md ?\.", text) and "The folder holds notes.md and turns.json." in text
    assert "Undone by run" in text and "No file was created, changed or deleted." in text
    assert re.search(r"undone: 1 file put back", text), text[-2000:]
    assert "nbagent: running" not in text  # the placeholder of a slow start is never saved for a fast run


# ------------------------------------------------------------------------------------------------ the question box

SLOW_TOOL = '''import asyncio, os, nbagent

@nbagent.tool(risk="READ_ONLY")
async def slow_scan(path: str) -> str:
    "Scan a data file (slowly)."
    while not os.path.exists("go.flag"):  # the test says when the scan ends
        await asyncio.sleep(0.1)
    return "3 rows"'''


def test_a_question_arriving_while_the_person_types_elsewhere_takes_no_keys(page: Page, lab: Lab) -> None:  # noqa: F811
    """A slow read-only step, then ask_human, while the person types in another cell: what they type stays in
    their cell (Enter included), the answer box stays empty, and nothing is answered for them."""
    notebook = notebook_of(lab, "p-question", [
        {"content": "Let me scan it first.", "tool_calls": [{"name": "slow_scan", "arguments": {"path": "sales.csv"}}]},
        ask("Which year should I use?"), {"content": "Using 2024."}],
        ["%load_ext nbagent", SLOW_TOOL, f"{MAGIC}\nSummarise sales.csv", ""], files={"sales.csv": "a\n1\n"})
    folder = notebook.parent
    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    for i in range(3):
        run_cell(page, i)
    live = cell(page, 2).locator(LIVE_VIEW)
    expect(live.locator(".nbv-step.nbv-st-running")).to_contain_text("slow_scan", timeout=90_000)
    mine = cell(page, 3).locator(".cm-content")
    mine.click()
    page.keyboard.type("hello wor")
    (folder / "go.flag").write_text("")  # the scan ends: the question comes while the person is mid-word
    box = live.get_by_role("textbox", name="your answer")
    expect(box).to_be_visible(timeout=60_000)
    page.keyboard.type("ld")
    page.keyboard.press("Enter")
    page.keyboard.type("print(2)")
    shot(page, "p-question-1-typed-elsewhere")
    expect(mine).to_have_text(re.compile(r"hello world\s*print\(2\)"))
    expect(box).to_have_value("")
    expect(box).not_to_be_focused()
    store = Store(notebook.with_suffix(".nbagent"), readonly=True)
    run = store.list_runs()[-1]
    state = store.run_state(run.id)
    assert state.pending is not None and state.pending.kind == "human_input" and not state.decisions
    # announced, politely, without taking the focus
    expect(live.locator('[aria-live="polite"]').filter(has_text="Which year should I use?")).to_have_count(1)

    box.click()
    page.keyboard.type("2024")
    page.keyboard.press("Enter")
    record = cell(page, 2).locator(RECORD)
    expect(record).to_have_class(re.compile(r"\bnbr-status-completed\b"), timeout=60_000)
    expect(record.locator(".nbr-k-question")).to_contain_text("answer: 2024")
    expect(mine).to_have_text(re.compile(r"hello world\s*print\(2\)"))
    record.scroll_into_view_if_needed()
    shot(page, "p-question-2-answered-by-click")
    assert [(d.kind, d.text) for d in store.run_state(run.id).decisions] == [("answered", "2024")]
    save(page, notebook)
    check_saved(notebook)


# ------------------------------------------------------------------------------------------------ Undo… after a restart


def shut_down_kernel(lab: Lab, notebook: Path) -> None:  # noqa: F811
    """Close the notebook's session on the server: its kernel stops (what "Shut Down Kernel" and closing do)."""
    rel = notebook.relative_to(lab.root).as_posix()
    sessions = [s for s in lab.api("GET", "/api/sessions") if s["path"] == rel]
    assert sessions
    for s in sessions:
        lab.api("DELETE", f"/api/sessions/{s['id']}")
    gone = {s["kernel"]["id"] for s in sessions if s.get("kernel")}
    wait_until(lambda: not gone & {k["id"] for k in lab.api("GET", "/api/kernels")}, 60, "the kernel shut down")


def test_undo_from_a_record_after_save_shut_down_and_reopen(page: Page, lab: Lab) -> None:  # noqa: F811
    """The record's "Undo…" in a notebook reopened with a new kernel, which has not loaded nbagent: the inserted
    `%agent undo RUN` cell works (the lab extension loads nbagent in the kernel first), and the file comes back."""
    notebook = notebook_of(lab, "p-undo-restart", [create("report.md", "# R\n", "I'll write the report."),
                                                   {"content": "Wrote report.md."}],
                           ["%load_ext nbagent", f"{MAGIC}\nWrite the report"], files={"notes.md": "mine\n"})
    folder = notebook.parent
    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    run_cell(page, 0)
    run_cell(page, 1)
    expect(cell(page, 1).locator(".nbv-plan-waiting .nbv-plan-title")).to_have_text("Plan 1: Create report.md",
                                                                                    timeout=90_000)
    cell(page, 1).get_by_role("button", name="Create report.md", exact=True).click()
    expect(cell(page, 1).locator(RECORD)).to_have_class(re.compile(r"\bnbr-status-completed\b"), timeout=60_000)
    assert (folder / "report.md").read_text() == "# R\n"
    save(page, notebook)
    run_id = check_saved(notebook)[0]["run_id"]

    # save, close, shut down; reopen: a new kernel, where nothing has loaded nbagent
    page.goto("about:blank")
    shut_down_kernel(lab, notebook)
    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    record = cell(page, 1).locator(RECORD)
    expect(record).to_have_class(re.compile(r"\bnbr-status-completed\b"), timeout=60_000)
    offer = record.get_by_role("button", name="Undo…", exact=True)
    offer.scroll_into_view_if_needed()
    shot(page, "p-undo-1-reopened-record-offers-undo")
    offer.click()

    below = cell(page, 2)
    expect(below.locator(".jp-InputArea")).to_contain_text(f"%agent undo {run_id}")
    panel = below.locator(".nbagent-live.nbv-undo")
    expect(panel).to_contain_text(f"Undo run {run_id}", timeout=60_000)
    expect(below).not_to_contain_text("not found")  # "Line magic function `%agent` not found" before
    panel.get_by_role("button", name="Undo", exact=True).click()
    expect(panel.locator("li", has_text="report.md")).to_contain_text("removed")
    assert (folder / "report.md").exists()  # asked first: nothing changed before the confirmation
    shot(page, "p-undo-2-panel-asks-in-the-new-kernel")
    panel.get_by_role("button", name="Undo 1 change", exact=True).click()
    wait_until(lambda: not (folder / "report.md").exists(), 30, "report.md removed by the undo")
    expect(below).to_contain_text("undone", timeout=30_000)
    below.scroll_into_view_if_needed()
    shot(page, "p-undo-3-undone-after-restart")
    assert (folder / "notes.md").read_text() == "mine\n"
    store = Store(notebook.with_suffix(".nbagent"), readonly=True)
    (undo_run,) = [r.id for r in store.list_runs() if r.model == "nbagent/undo"]
    assert store.run_state(undo_run).status.value == "completed"
    # the record the earlier kernel made says it was undone, and offers no Undo… (the new kernel sent the lab
    # extension the run's newer record: its display id died with the old kernel)
    expect(record.locator(".nbr-undone")).to_contain_text(f"Undone by run {undo_run}", timeout=30_000)
    expect(record.get_by_role("button", name="Undo…", exact=True)).to_have_count(0)
    expect(record.locator(".nbr-effects")).to_contain_text("report.md")
    record.scroll_into_view_if_needed()
    shot(page, "p-undo-4-record-marked-undone")
    save(page, notebook)
    # (the file held records before this save: wait for this one's content)
    wait_until(lambda: WIDGET_MIME not in notebook.read_text() and f'"undone_by": "{undo_run}"' in notebook.read_text(),
               30, "the panel saved as its outcome (not a widget), the record saved as undone")
    (saved,) = [r for r in check_saved(notebook) if r["run_id"] == run_id]
    assert saved["undone_by"] == undo_run
    text = nbconvert_text(notebook)
    assert "Plan 1: Create report.md" in text and f"Undo of run {run_id}" in text
    assert re.search(r"undone: 1 file put back \(undo run \w+\)", text), text[-2000:]
    assert f"Undone by run {undo_run}" in text


# ------------------------------------------------------------------------------------------------ keyboard only

FOCUS = """() => {
  const a = document.activeElement;
  if (!a || a === document.body) return {where: 'body', text: ''};
  const view = a.closest('.nbagent-live, .nbagent-run');
  return {where: view ? (view.classList.contains('nbagent-run') ? 'record' : 'view') : 'elsewhere',
          tag: a.tagName, text: (a.getAttribute('aria-label') || a.textContent || '').trim().slice(0, 60)};
}"""


def focus(page: Page) -> dict[str, str]:  # noqa: F811
    return page.evaluate(FOCUS)


def tab_to(page: Page, name: str, back: bool = False, most: int = 40) -> None:  # noqa: F811
    """Press Tab (Shift+Tab) until the focused element is the button `name`: what a keyboard user does."""
    for _ in range(most):
        page.keyboard.press("Shift+Tab" if back else "Tab")
        now = focus(page)
        if now.get("tag") == "BUTTON" and now["text"] == name:
            return
    raise AssertionError(f"Tab never reached the button {name!r} (last: {focus(page)})")


def test_keyboard_only_approve_deny_with_a_reason_and_escape(page: Page, lab: Lab) -> None:  # noqa: F811
    """Decisions by keyboard alone: the focus stays in the run view after each one (never the page's body), Escape
    and Cancel close the text box empty and give the focus back to the button that opened it, a new card takes the
    focus only from a person already in the view, and each waiting card is announced to screen readers."""
    notebook = notebook_of(lab, "p-keys", [
        create("a.md", "a\n", "I'll add a.md."),
        {"content": "old.txt looks unused.", "tool_calls": [{"name": "delete_file", "arguments": {"path": "old.txt"}}]},
        create("c.md", "c\n", "Then c.md."), {"content": "Kept old.txt; wrote a.md and c.md."}],
        ["%load_ext nbagent", f"{MAGIC}\nTidy up"], files={"old.txt": "keep\n"})
    folder = notebook.parent
    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    run_cell(page, 0)
    run_cell(page, 1)
    live = cell(page, 1).locator(LIVE_VIEW)
    said = live.locator('[aria-live="polite"]')
    expect(live.locator(".nbv-plan-waiting .nbv-plan-title")).to_have_text("Plan 1: Create a.md", timeout=90_000)
    expect(said).to_have_text("waiting for your approval: Create a.md?")
    assert focus(page)["where"] != "view"  # the card did not take the focus from the notebook

    tab_to(page, "Create a.md")
    shot(page, "p-keys-1-tabbed-to-approve")
    page.keyboard.press("Enter")
    expect(live.locator(".nbv-plan-waiting .nbv-plan-title")).to_have_text("Plan 2: Delete old.txt", timeout=60_000)
    expect(said).to_have_text("waiting for your approval: Delete old.txt?")
    assert focus(page)["where"] == "view", focus(page)  # not the page's body
    page.keyboard.press("Tab")  # the next Tab stays in the view (it landed on "New Launcher" before)
    assert focus(page)["where"] == "view", focus(page)

    tab_to(page, "Deny")
    page.keyboard.press("Enter")
    reason = live.get_by_role("textbox", name="reason for denying")
    expect(reason).to_be_focused()
    page.keyboard.type("not now")
    page.keyboard.press("Escape")
    expect(reason).to_be_hidden()
    deny = live.get_by_role("button", name="Deny", exact=True)
    expect(deny).to_be_focused()  # back where the person was, not the body
    shot(page, "p-keys-2-escape-back-on-deny")
    page.keyboard.press("Enter")
    expect(reason).to_be_focused()
    expect(reason).to_have_value("")  # Escape dropped the draft: no "not nownot needed"
    page.keyboard.type("not needed")
    shot(page, "p-keys-3-deny-with-a-reason")
    page.keyboard.press("Enter")

    expect(live.locator(".nbv-plan-waiting .nbv-plan-title")).to_have_text("Plan 3: Create c.md", timeout=60_000)
    assert focus(page)["where"] == "view", focus(page)
    tab_to(page, "Refine")
    page.keyboard.press("Enter")
    feedback = live.get_by_role("textbox", name="feedback for the model")
    expect(feedback).to_be_focused()
    page.keyboard.type("call it d.md")
    tab_to(page, "Cancel")
    page.keyboard.press("Enter")
    expect(feedback).to_be_hidden()
    refine = live.get_by_role("button", name="Refine", exact=True)
    expect(refine).to_be_focused()
    page.keyboard.press("Enter")
    expect(feedback).to_have_value("")  # Cancel dropped the draft too
    page.keyboard.press("Escape")
    expect(refine).to_be_focused()
    tab_to(page, "Create c.md", back=True)
    page.keyboard.press("Enter")

    record = cell(page, 1).locator(RECORD)
    expect(record).to_have_class(re.compile(r"\bnbr-status-completed"), timeout=60_000)
    # the record took the place of the view, and the focus with it
    wait_until(lambda: focus(page)["where"] == "record", 20, f"the focus on the record (it is {focus(page)})")
    page.keyboard.press("Tab")
    assert focus(page)["where"] == "record", focus(page)
    record.scroll_into_view_if_needed()
    shot(page, "p-keys-4-record-has-the-focus")
    assert (folder / "a.md").exists() and (folder / "c.md").exists() and (folder / "old.txt").read_text() == "keep\n"
    effects = record.locator(".nbr-effects")  # what happened, beside the answer that tells it
    expect(effects.locator("li", has_text="a.md")).to_contain_text("created")
    expect(effects.locator("li", has_text="c.md")).to_contain_text("created")
    expect(effects.locator("li", has_text="old.txt")).to_contain_text("not done")
    save(page, notebook)
    (saved,) = check_saved(notebook)
    expected = [("approved", ""), ("rejected", "not needed"), ("approved", "")]
    assert [(d["kind"], d["text"]) for d in saved["decisions"]] == expected
    state = Store(notebook.with_suffix(".nbagent"), readonly=True).run_state(saved["run_id"])
    assert [(d.kind, d.text) for d in state.decisions] == expected
    text = nbconvert_text(notebook)
    assert "reason: not needed" in text and "not nownot" not in text and "Plan 3: Create c.md" in text
