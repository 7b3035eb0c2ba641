"""Issue 45 in a real browser: a saved record's Undo… is drawn only where undo can act, and a click always says
what came of it.

One notebook holds a record copied from another notebook (its run is in no log beside this one) above an
`%%agent` cell whose run creates report.md. Before nbagent is loaded, Undo… is a question (a click loads nbagent and
runs `%agent undo RUN` below, which checks the log); once `%load_ext nbagent` ran, the kernel (which reads this
notebook's log) says the copied run is not in it, and the record says so beside its "↶ Undo" line, with no button.
The new run's record gets Undo…; a click says where the Undo panel is, the panel asks, the undo puts report.md back,
and the record, brought up to date, offers Undo… no more. JupyterLab, the browser and the helpers are
tests/test_browser.py's; screenshots go to test-artifacts/browser/ (undo-offer-*.png).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from test_browser import (  # noqa: F401  (browser, lab, page are fixtures)
    ACTIVE,
    LIVE,
    RECORD,
    RUN_MIME,
    Lab,
    browser,
    button,
    create,
    expect,
    lab,
    open_notebook,
    page,
    shot,
    wait_kernel_idle,
    wait_until,
    waiting_card,
)

pytest.importorskip("playwright.sync_api")

from playwright.sync_api import Page

pytestmark = pytest.mark.browser

PANEL = f"{ACTIVE} .nbagent-live.nbv-undo"
OUTCOME = f"{ACTIVE} .jp-OutputArea-output .nbr-undo-record"


def foreign_record(folder: Path) -> dict:
    """The output holding the record of a run made in another notebook (in `folder`, by `nbagent run`)."""
    folder.mkdir()
    (folder / "s.json").write_text(json.dumps({"turns": [
        {"tool_calls": [{"name": "create_file", "arguments": {"path": "theirs.md", "content": "x\n"}}]},
        {"content": "Wrote theirs.md."}]}))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbagent"), nbformat.v4.new_code_cell("%%agent --script s.json\nw")]
    nbformat.write(nb, folder / "theirs.ipynb")
    done = subprocess.run([str(Path(sys.executable).with_name("nbagent")), "run", "theirs.ipynb", "--approve", "all"],
                          cwd=folder, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = nbformat.read(folder / "theirs.ipynb", as_version=4)
    return next(o for o in ran.cells[1].outputs if RUN_MIME in o.get("data", {}))


def run_cell_at(page: Page, index: int) -> None:  # noqa: F811
    page.evaluate("""(i) => { const w = window.jupyterapp.shell.currentWidget; w.content.activeCellIndex = i;
                       void window.jupyterapp.commands.execute('notebook:run-cell'); }""", index)


def test_undo_is_offered_only_where_it_can_act_and_a_click_says_where(
        page: Page, lab: Lab, tmp_path: Path) -> None:  # noqa: F811
    copied = foreign_record(tmp_path / "elsewhere")
    folder = lab.root / "undo-offer"
    folder.mkdir()
    (folder / "turns.json").write_text(json.dumps({"turns": [create("report.md", "# Report\n"),
                                                             {"content": "Wrote report.md."}]}))
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbagent"),
                nbformat.v4.new_code_cell("# a cell copied from another notebook, with its output"),
                nbformat.v4.new_code_cell("%%agent --model nbagent/scripted --script turns.json\nWrite report.md")]
    nb.cells[1].outputs = [nbformat.from_dict(copied)]
    notebook = folder / "analysis.ipynb"
    nbformat.write(nb, notebook)
    theirs = copied["data"][RUN_MIME]["run_id"]
    foreign = page.locator(f'{ACTIVE} {RECORD}[data-run-id="{theirs}"]')

    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    expect(foreign).to_be_visible(timeout=60_000)
    expect(foreign.locator(".nbr-undo")).to_contain_text(f"%agent undo {theirs}")  # the saved record's words
    # no kernel has said yet: Undo… asks (a click would load nbagent and run the undo below, which checks the log)
    expect(foreign.get_by_role("button", name="Undo…", exact=True)).to_have_attribute(
        "title", re.compile("nbagent is loaded in the kernel first"))

    run_cell_at(page, 0)  # %load_ext nbagent: the kernel answers from this notebook's log
    expect(foreign.locator(".nbr-undo-why")).to_contain_text("not undoable here: not in this notebook's log",
                                                             timeout=30_000)
    # no Undo…; Reproduce stays (a click says in one line that this log holds no such run: test_reproduce_kernel)
    expect(foreign.get_by_role("button", name="Undo…", exact=True)).to_have_count(0)
    foreign.scroll_into_view_if_needed()
    shot(page, "undo-offer-1-copied-record")

    run_cell_at(page, 2)
    waiting_card(page, 1, "Create report.md")
    button(page, "Create report.md").click()
    ours = page.locator(f"{ACTIVE} {RECORD}").filter(has_text="Wrote report.md.")
    expect(ours).to_be_visible(timeout=60_000)
    expect(page.locator(LIVE)).to_have_count(0)
    assert (folder / "report.md").read_text() == "# Report\n"
    offer = ours.get_by_role("button", name="Undo…", exact=True)
    expect(offer).to_be_visible(timeout=30_000)  # the kernel said this run's change can be undone
    expect(offer).to_have_attribute("title", "insert and run %agent undo " + (ours.get_attribute("data-run-id") or "")
                                    + " below: it shows what will change and asks first")
    expect(foreign.get_by_role("button", name="Undo…", exact=True)).to_have_count(0)
    offer.click()
    expect(ours.locator(".nbr-undo-status")).to_contain_text("runs in the new cell below: its Undo panel lists each "
                                                             "change and asks before any")
    expect(offer).to_be_disabled()
    panel = page.locator(PANEL).first
    expect(panel).to_be_visible(timeout=60_000)
    expect(panel).to_be_in_viewport()  # the page went to where the answer is
    shot(page, "undo-offer-2-clicked")
    panel.get_by_role("button", name="Undo", exact=True).click()
    panel.get_by_role("button", name="Undo 1 change", exact=True).click()
    expect(page.locator(OUTCOME).first).to_contain_text("1 file put back", timeout=30_000)
    wait_until(lambda: not (folder / "report.md").exists(), 10, "report.md removed")
    # the record, brought up to date by the undo, says so and offers nothing more
    expect(ours.locator(".nbr-undone")).to_be_visible(timeout=30_000)
    expect(ours.get_by_role("button", name="Undo…", exact=True)).to_have_count(0)
    ours.scroll_into_view_if_needed()
    shot(page, "undo-offer-3-undone")


SOURCES = """() => { const c = window.jupyterapp.shell.currentWidget.content.model.cells;
  return Array.from({length: c.length}, (_, i) => c.get(i).sharedModel.getSource()); }"""


def test_a_run_that_only_wrote_cells_offers_undo_and_its_undo_keeps_the_cell_you_edited(
        page: Page, lab: Lab) -> None:  # noqa: F811
    """Issue 46: such a run's Effects said "effects not tracked file by file" and its panel "it changed 1 file", and
    its undo said "cell removed" of the cell the person had edited, which stayed. Here its Effects name both cells,
    Undo… is on its record, the panel counts cells and lists the edited one as kept, the undo removes the other,
    and the record says exactly that."""
    folder = lab.root / "undo-cells"
    folder.mkdir()
    (folder / "turns.json").write_text(json.dumps({"turns": [
        {"tool_calls": [{"name": "run_cell", "arguments": {"code": "a = 1"}}]},
        {"tool_calls": [{"name": "run_cell", "arguments": {"code": "b = 2"}}]},
        {"tool_calls": [{"name": "run_cell", "arguments": {"code": "c = 3"}}]},
        {"content": "Set a and b."}]}))
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbagent"),
                nbformat.v4.new_code_cell("%%agent --model nbagent/scripted --autonomy L3 --script turns.json\nset")]
    notebook = folder / "cells.ipynb"
    nbformat.write(nb, notebook)
    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    run_cell_at(page, 0)
    wait_kernel_idle(page, lab, notebook)
    run_cell_at(page, 1)
    ours = page.locator(f"{ACTIVE} {RECORD}").filter(has_text="Set a and b.")
    expect(ours).to_be_visible(timeout=90_000)
    effects = ours.locator(".nbr-effects")
    expect(effects).to_contain_text(re.compile(r"added\s*\[\d+\] a = 1"))
    expect(effects).to_contain_text(re.compile(r"added\s*\[\d+\] b = 2"))
    expect(effects).not_to_contain_text("file by file")
    expect(ours.locator(".nbr-undo")).to_contain_text("undoes this run's changes (3 cells)")
    # the person edits the agent's second cell and runs it: it is theirs now
    wait_until(lambda: any("b = 2" in s for s in page.evaluate(SOURCES)), 30, "the agent's cells in the notebook")
    sources = page.evaluate(SOURCES)
    b = next(i for i, s in enumerate(sources) if "b = 2" in s)
    page.evaluate("([i, src]) => window.jupyterapp.shell.currentWidget.content.model.cells.get(i).sharedModel"
                  ".setSource(src)", [b, "b = 'mine'\n"])
    run_cell_at(page, b)
    wait_kernel_idle(page, lab, notebook)
    # and deletes the third: the kernel hears of it only from the page (undo.ts sends the notebook's cell ids)
    c = next(i for i, s in enumerate(page.evaluate(SOURCES)) if "c = 3" in s)
    page.evaluate("(i) => window.jupyterapp.shell.currentWidget.content.model.sharedModel.deleteCell(i)", c)
    ours.scroll_into_view_if_needed()
    shot(page, "undo-cells-1-record")
    offer = ours.get_by_role("button", name="Undo…", exact=True)
    expect(offer).to_be_visible(timeout=30_000)
    offer.click()
    panel = page.locator(PANEL).first
    expect(panel).to_be_visible(timeout=60_000)
    expect(panel.locator(".nbv-undo-head")).to_contain_text("it changed 3 cells")
    panel.get_by_role("button", name="Undo", exact=True).click()
    expect(panel.locator(".nbv-decide-q")).to_contain_text("a cell you edited since stays as it is: it is yours")
    kept = panel.locator(".nbv-undo-kept")
    expect(kept.first).to_contain_text("c = 3 — not in the notebook any more (deleted since)")
    expect(kept.nth(1)).to_contain_text("b = 2 — kept: you edited it since; it is yours")
    expect(panel).not_to_contain_text("Each file")
    shot(page, "undo-cells-2-panel")
    panel.get_by_role("button", name="Undo 1 change", exact=True).click()
    expect(page.locator(OUTCOME).first).to_contain_text(
        "3 cells: 1 removed, 1 kept as yours (you edited it since), 1 gone (deleted since)", timeout=30_000)
    # exactly what it said: a = 1's cell is gone, the person's cell stays as they wrote it
    wait_until(lambda: not any("a = 1" in s for s in page.evaluate(SOURCES)), 30, "the agent's a = 1 cell removed")
    assert "b = 'mine'\n" in page.evaluate(SOURCES)
    undone = ours.locator(".nbr-undone")
    expect(undone).to_contain_text(re.compile(r"cell \[\d+\] a = 1 removed; \[\d+\] b = 2 kept: you edited it since"),
                                   timeout=30_000)
    expect(undone).to_contain_text(re.compile(r"\[\d+\] c = 3 was deleted since: nothing to undo"))
    expect(undone).to_contain_text("does not bring cells back")
    expect(undone).not_to_contain_text("file")
    ours.scroll_into_view_if_needed()
    shot(page, "undo-cells-3-undone")
