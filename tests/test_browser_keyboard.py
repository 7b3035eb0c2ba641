"""Issue 46 (46-F) in a real browser: a long session's notebook is readable and keyboard-usable.

A notebook whose `%%agent` cell is followed by forty cells of the person's. Run All scrolls to the last cell it
queued, away from the card the run waits on: a notice at the bottom of the notebook says a card waits, and
Ctrl+Shift+Y scrolls to the card and gives its Approve button the focus, so Enter approves. The card names the
agent's cell as the page shows it (`[3]` and its first line; a new cell by where it goes), never `nb1_0` or a 32-hex
id. While the `%%agent` cell runs, the kernel's status says busy, though the kernel handles the view's comm
messages meanwhile. The finished run's record is two lines, and opens by keyboard (Enter on its summary).
Screenshots (test-artifacts/browser/keyboard-*.png), one of them in JupyterLab Dark.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
from test_browser import (  # noqa: F401  (browser, page are fixtures)
    ACTIVE,
    LIVE,
    RECORD,
    Lab,
    browser,
    command,
    open_notebook,
    page,
    save,
    shot,
    shot_dark,
    wait_kernel_idle,
)
from test_browser_run_cell import lab  # noqa: F401  (the checkout's build of the lab extension)

pytest.importorskip("playwright.sync_api")

from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

CELLS = f"{ACTIVE} .jp-Notebook .jp-Cell"
WAITING = f"{LIVE} .nbv-plan.nbv-plan-waiting"
NOTICE = f"{ACTIVE} > .jp-nbagent-WaitingNotice"
FIRST = "data = {'region': [1, 2]}\ndata['Region']"
FIX = "data = {'region': [1, 2]}\nprint(sum(data['region']))"
FILLERS = 40
KERNEL_STATUS = "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
IN_VIEW = """(el) => {
  const r = el.getBoundingClientRect();
  const v = el.closest('.jp-Notebook').getBoundingClientRect();
  return r.bottom > v.top && r.top < v.bottom;
}"""


def notebook_of(lab: Lab, name: str) -> Path:  # noqa: F811
    folder = lab.root / name
    folder.mkdir()
    turns = [
        {"content": "I'll sum the regions.", "tool_calls": [{"name": "run_cell", "arguments": {
            "code": FIRST, "explanation": "sum by region"}}]},
        {"content": "The key is `region`.", "tool_calls": [{"name": "replace_cell", "arguments": {
            "cell": "nb1_0", "code": FIX, "explanation": "the key is 'region'"}}]},
        {"content": "The regions add up to **3**.\n\nThe cell below the request prints it."}]
    (folder / "turns.json").write_text(json.dumps({"turns": turns}))
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    magic = "%%agent --model nbagent/scripted --script turns.json --autonomy L1"
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbagent"),
                nbformat.v4.new_code_cell(f"{magic}\nSum the regions of data\nand print the sum")]
    nb.cells += [nbformat.v4.new_code_cell(f"step_{i} = {i}\n# the person's own work\nstep_{i}")
                 for i in range(FILLERS)]
    path = folder / "long.ipynb"
    nbformat.write(nb, path)
    return path


def test_a_card_off_screen_after_run_all_is_one_shortcut_away_and_the_record_folds(
        page: Page, lab: Lab) -> None:  # noqa: F811
    notebook = notebook_of(lab, "k-long")
    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    command(page, "runmenu:run-all")

    card = page.locator(WAITING)
    expect(card.locator(".nbv-plan-title")).to_have_text("Plan 1: Run a cell", timeout=90_000)
    # Run All scrolled to its last cell: the card is off-screen, and the notice says a card waits
    notice = page.locator(NOTICE)
    expect(notice).to_be_visible(timeout=10_000)
    expect(notice).to_have_text("‖ nbagent waits: Run a cell? — Ctrl+Shift+Y")
    assert not card.evaluate(IN_VIEW)
    # the kernel is busy with the %%agent cell, though it handled the view's comm messages meanwhile
    page.wait_for_timeout(1_500)  # (the view's "rendered" message and its idle have come and gone)
    assert page.evaluate(KERNEL_STATUS) == "busy"
    expect(page.locator(f'{ACTIVE} .jp-Notebook-ExecutionIndicator[data-status="busy"]')).to_have_count(1)
    shot(page, "keyboard-1-notice-card-off-screen")

    # Ctrl+Shift+Y: the card is in view and its Approve button has the focus; the notice goes
    page.locator(CELLS).last.locator(".jp-InputPrompt").click()  # the focus somewhere in the notebook
    page.keyboard.press("Control+Shift+Y")
    approve = card.locator("button.nbv-approve")
    expect(approve).to_be_focused()
    assert card.evaluate(IN_VIEW)
    expect(notice).to_be_hidden()
    # the card names the cell by where it goes and its first line, never an id
    expect(card.locator(".nbv-cell-name")).to_have_text("new cell below the request: data = {'region': [1, 2]}")
    shot(page, "keyboard-2-shortcut-focused-approve")
    page.keyboard.press("Enter")

    # the second card: replace_cell names the cell [n] (its execution count) and its first line
    expect(card.locator(".nbv-plan-title")).to_have_text(re.compile(r"^Plan 2: Replace cell \[\d+\] and run it$"),
                                                         timeout=60_000)
    count = page.locator(CELLS).nth(2).locator(".jp-InputPrompt").inner_text().strip()
    assert re.fullmatch(r"\[\d+\]:", count), count
    expect(card.locator(".nbv-plan-title")).to_have_text(f"Plan 2: Replace cell {count[:-1]} and run it")
    name = card.locator(".nbv-cell-name")
    expect(name).to_have_text(f"{count[:-1]} data = {{'region': [1, 2]}}")
    assert "nb1_0" not in card.locator("tbody td:nth-child(3)").inner_text()
    assert re.fullmatch(r"cell [0-9a-f]{32} \(the model wrote nb1_0\)", name.get_attribute("title") or "")
    page.keyboard.press("Control+Shift+Y")
    expect(card.locator("button.nbv-approve")).to_be_focused()
    page.keyboard.press("Enter")

    # the finished record: two lines, the rest folded
    record = page.locator(CELLS).nth(1).locator(RECORD)
    expect(record).to_be_visible(timeout=90_000)
    folded = record.locator("details.nbr-compact")
    summary = folded.locator("summary.nbr-summary-line")
    expect(summary).to_be_visible()
    expect(summary.locator(".nbr-summary-request")).to_have_text(" · Sum the regions of data")
    # its first cell raised: said first (the run ended with errors), then the answer's first line and the counts
    expect(summary.locator(".nbr-summary-state")).to_have_text("⚠ completed with errors")
    expect(summary.locator(".nbr-summary-more")).to_have_text(re.compile(
        r"^⚠ 1 tool call failed · The regions add up to 3\. · 2 tool calls · 1 cell changed · \$[0-9.]+ nominal$"))
    expect(record.locator("ol.nbr-steps")).to_be_hidden()
    expect(record.locator(".nbr-foot")).to_be_hidden()
    expect(page.locator(NOTICE)).to_be_hidden()
    record.scroll_into_view_if_needed()
    shot(page, "keyboard-3-record-folded")
    line = summary.bounding_box()
    assert line is not None and line["height"] < 50, line  # two lines of text
    closed = record.bounding_box()

    # opened by keyboard: the summary takes the focus (Tab), Enter opens it
    summary.focus()
    page.keyboard.press("Enter")
    expect(record.locator("ol.nbr-steps")).to_be_visible()
    expect(record.locator(".nbr-foot")).to_be_visible()
    opened = record.bounding_box()
    assert closed is not None and opened is not None and opened["height"] > 3 * closed["height"], (closed, opened)
    expect(record.locator(".nbr-plan .nbr-cell-name").nth(1)).to_have_text(f"{count[:-1]} data = {{'region': [1, 2]}}")
    shot(page, "keyboard-4-record-opened")
    shot_dark(page, record, "keyboard-5-record-opened-dark")
    # the kernel is idle again once the cells are done
    page.wait_for_function(f"() => ({KERNEL_STATUS})() === 'idle'", timeout=60_000)

    # saved: the .ipynb's HTML record folds the same way (nbconvert shows it)
    save(page, notebook)
    nb = json.loads(notebook.read_text())
    html = "".join("".join(o["data"]["text/html"]) for c in nb["cells"] for o in c.get("outputs", [])
                   if "application/vnd.nbagent.run+json" in o.get("data", {}))
    assert '<details class="nbr-compact">' in html and "The regions add up to 3." in html
