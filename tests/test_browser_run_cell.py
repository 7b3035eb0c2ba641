"""Issue 27 in a real browser: the agent's code runs as notebook cells, in JupyterLab + Chromium.

A folder with data/sales.csv and a notebook whose `%%agent` cell (the offline scripted model) asks for revenue by
region. The agent's first `run_cell` uses a wrong column name: the cell appears below the `%%agent` cell, with its
execution count and the KeyError traceback; then it plots revenue by region (a second `run_cell`, or `replace_cell`
of the same cell when that tool exists), and the plot shows as an <img> in that cell. Each card is approved by a
click on its Approve button. Saved with Ctrl+S, the .ipynb on disk holds the cells with their outputs (image/png) and
`metadata.nbagent` provenance. Also: a person typing in another cell while the agent's cell runs keeps every
keystroke, and a person's thread printing while the agent's code runs does not print into the agent's cell.

The outputs reach the cell through the lab extension (labextension/src/outputs.ts): the kernel runs the code under
a msg id of its own, which no cell of the page requested. The extension tested is the checkout's build
(nbagent/labextension, made by `pip install -e .` or `npm run build:prod` in labextension/) when there is one, put in
the test server's own data dir so it wins over an older installed copy. The server, browser and helpers are
tests/test_browser.py's; screenshots go to test-artifacts/browser/ (run-cell-*.png).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from test_browser import (  # noqa: F401  (browser, page are fixtures)
    ACTIVE,
    LIVE,
    RECORD,
    RUN_MIME,
    Lab,
    browser,
    expect,
    page,
    save,
    shot,
    start_flow,
    wait_until,
)
from test_browser_undo import run_cell as add_and_run

pytest.importorskip("playwright.sync_api")

from playwright.sync_api import Page

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
BUILT = ROOT / "nbagent" / "labextension"
CELLS = f"{ACTIVE} .jp-Notebook .jp-Cell"
WAITING = f"{LIVE} .nbv-plan.nbv-plan-waiting"
SALES = "date,region,revenue\n2026-01-05,North,120\n2026-01-05,South,60\n2026-01-12,East,95\n" \
        "2026-01-12,West,80\n2026-01-19,North,40\n"
WRONG = "import pandas as pd\nsales = pd.read_csv('data/sales.csv')\nsales.groupby('region')['Revenue'].sum()"
PLOT = ("import matplotlib.pyplot as plt\nimport pandas as pd\nsales = pd.read_csv('data/sales.csv')\n"
        "by_region = sales.groupby('region')['revenue'].sum().sort_values()\n"
        "by_region.plot.barh(title='Revenue by region')\nplt.show()\nprint(by_region.to_string())")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    base = tmp_path_factory.mktemp("lab")
    if (BUILT / "package.json").exists():
        # the checkout's build, ahead of the installed copy: an extra path is searched first (and in a virtualenv
        # the environment's folder comes before the user's data folder)
        extra = base / "extensions"
        dest = extra / "nbagent-labextension"
        shutil.copytree(BUILT, dest)
        shutil.copy(ROOT / "labextension" / "install.json", dest / "install.json")
        config = base / "home" / "config"
        config.mkdir(parents=True)
        for name in ("jupyter_lab_config.json", "jupyter_server_config.json"):
            (config / name).write_text(json.dumps({"LabApp": {"extra_labextensions_path": [str(extra)]}}))
    server = Lab(base)
    try:
        yield server
    finally:
        server.close()


def call(name: str, text: str, **arguments: Any) -> dict[str, Any]:
    """A model turn with one tool call. The call is known by nbagent's id, never the model's: the i-th call of the
    run's k-th model reply is `nb{k}_{i}` (nbagent/gate/approval.py), in the conversation the model gets back too."""
    return {"content": text, "tool_calls": [{"name": name, "arguments": arguments}]}


def write_notebook(lab: Lab, name: str, turns: list[dict[str, Any]], before: str = "%load_ext nbagent",
                   prompt: str = "Plot revenue by region from data/sales.csv") -> Path:
    """A folder with data/sales.csv, the scripted model's turns, and a notebook: `before`, the %%agent cell, and an
    empty cell of the person's at the end."""
    folder = lab.root / name
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "sales.csv").write_text(SALES)
    (folder / "turns.json").write_text(json.dumps({"turns": turns}))
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    magic = "%%agent --model nbagent/scripted --script turns.json --autonomy L1"
    nb.cells = [nbformat.v4.new_code_cell(before), nbformat.v4.new_code_cell(f"{magic}\n{prompt}"),
                nbformat.v4.new_code_cell("")]
    path = folder / "analysis.ipynb"
    nbformat.write(nb, path)
    return path


def approve(page: Page, n: int) -> str:  # noqa: F811
    """Click the Approve button of plan `n`'s card (it names the action); returns what it said."""
    card = page.locator(WAITING)
    expect(card.locator(".nbv-plan-title")).to_contain_text(f"Plan {n}:", timeout=90_000)
    card.scroll_into_view_if_needed()
    button = card.locator("button.nbv-approve")
    expect(button).to_be_enabled()
    label = button.inner_text()
    button.click()
    # the card says the click was sent (its plan may still read "waiting" while the agent's code holds the kernel)
    expect(button).to_be_disabled()
    return label


def cell(page: Page, index: int) -> Any:  # noqa: F811
    return page.locator(CELLS).nth(index)


def editor_text(page: Page, index: int) -> str:  # noqa: F811
    return str(page.evaluate(
        "(i) => window.jupyterapp.shell.currentWidget.content.model.cells.get(i).sharedModel.getSource()", index))


def cell_ids(page: Page) -> list[str]:  # noqa: F811
    return list(page.evaluate(
        "() => { const c = window.jupyterapp.shell.currentWidget.content.model.cells;"
        " return Array.from({length: c.length}, (_, i) => c.get(i).id); }"))


def finished(page: Page, status: str = "completed") -> Any:  # noqa: F811
    record = page.locator(f"{ACTIVE} {RECORD}")
    expect(record).to_be_visible(timeout=90_000)
    expect(record).to_have_class(re.compile(rf"\bnbr-status-{status}\b"))
    return record


def saved_cells(page: Page, notebook: Path) -> list[dict[str, Any]]:  # noqa: F811
    save(page, notebook)
    return list(json.loads(notebook.read_text())["cells"])


def provenance_ok(saved: dict[str, Any], call_id: str) -> dict[str, Any]:
    meta = saved["metadata"]["nbagent"]
    from nbagent.tools.cell_text import source_digest

    assert meta["ran"] is True and meta["call_id"] == call_id and meta["run_id"], meta
    assert meta["approval_event_id"], meta  # a person's click approved it
    assert meta["source_sha256"] == source_digest("".join(saved["source"])), meta
    return dict(meta)


# ------------------------------------------------------------------------------------------------ the tests


def test_a_failing_cell_then_a_plot_in_cells_below_the_agent(page: Page, lab: Lab) -> None:  # noqa: F811
    """run_cell with a wrong column (KeyError), then run_cell that plots: two cells below the %%agent cell."""
    notebook = write_notebook(lab, "run-cell", [
        call("run_cell", "I'll load the data and sum revenue by region.", code=WRONG,
             explanation="revenue by region"),
        call("run_cell", "The column is `revenue`, lower case. I'll plot it.", code=PLOT,
             explanation="plot revenue by region"),
        {"content": "**North** has the most revenue (160); the plot is in the cell below this record."}])
    start_flow(page, lab, notebook)
    label = approve(page, 1)
    assert "run_cell" in label.lower().replace(" ", "_") or "run" in label.lower(), label

    first = cell(page, 2)  # right below the %%agent cell
    expect(first.locator(".jp-OutputArea")).to_contain_text("KeyError", timeout=60_000)
    expect(first.locator(".jp-OutputArea")).to_contain_text("'Revenue'")
    expect(first.locator(".jp-InputArea-editor")).to_contain_text("# nbagent: run by run")
    expect(first.locator(".jp-InputArea-editor")).to_contain_text("['Revenue']")
    expect(first.locator(".jp-InputPrompt")).to_have_text(re.compile(r"\[\d+\]:"))
    first.scroll_into_view_if_needed()
    shot(page, "run-cell-1-keyerror-below-the-agent")
    # the live view's step says so while the next card waits: ✗ and what the kernel reported, never ✓ ok
    live_step = cell(page, 1).locator(".nbagent-live li.nbv-k-tool").first
    expect(live_step.locator(".nbv-main")).to_contain_text(re.compile(r"^raised KeyError: .*Revenue"), timeout=30_000)
    expect(live_step.locator(".nbv-icon")).to_have_text("✗")
    live_step.scroll_into_view_if_needed()
    shot(page, "run-cell-1b-live-step-raised")

    approve(page, 2)
    record = finished(page, "completed_with_errors")  # its first cell raised: said in its step, and in its status
    failed_step = record.locator("li.nbr-k-tool").first
    expect(failed_step).to_have_class(re.compile(r"\bnbr-st-failed\b"))
    expect(failed_step.locator(".nbr-icon")).to_have_text("✗")
    expect(failed_step.locator(".nbr-main")).to_contain_text(re.compile(r"^raised KeyError: .*Revenue.* · run_cell\("))
    expect(record.locator("li.nbr-k-tool").nth(1).locator(".nbr-main")).to_contain_text(
        re.compile(r"^ran \[\d+\]: printed \d+ lines, showed a figure · run_cell\("))
    second = cell(page, 3)
    expect(second.locator(".jp-OutputArea-output img")).to_have_count(1, timeout=60_000)
    expect(second.locator(".jp-OutputArea")).to_contain_text("North")
    expect(second.locator(".jp-InputArea-editor")).to_contain_text("plot revenue by region")
    # the %%agent cell keeps its count (ipykernel's reply would give it the last count the agent's cells took)
    for i, count in ((0, 1), (1, 2), (2, 3), (3, 4)):
        expect(cell(page, i).locator(".jp-InputPrompt")).to_have_text(f"[{count}]:")
    # nothing of the agent's code showed in the %%agent cell (its record names the error) or in the person's cell
    expect(cell(page, 1).locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
           ).to_have_count(0)
    expect(cell(page, 1).locator(".jp-OutputArea-output img")).to_have_count(0)
    expect(cell(page, 4).locator(".jp-OutputArea-output")).to_have_count(0)
    second.scroll_into_view_if_needed()
    shot(page, "run-cell-2-plot")
    record.scroll_into_view_if_needed()
    shot(page, "run-cell-3-record")

    cells = saved_cells(page, notebook)
    assert len(cells) == 5, [c["source"] for c in cells]
    failed, plotted = cells[2], cells[3]
    assert all(RUN_MIME in o.get("data", {}) for o in cells[1]["outputs"]), cells[1]["outputs"]  # the record alone
    assert [o["output_type"] for o in failed["outputs"]] == ["error"] and failed["outputs"][0]["ename"] == "KeyError"
    assert [c["execution_count"] for c in cells] == [1, 2, 3, 4, None]
    assert any("image/png" in o.get("data", {}) for o in plotted["outputs"]), plotted["outputs"]
    assert "North" in "".join("".join(o.get("text", "")) for o in plotted["outputs"])
    one, two = provenance_ok(failed, "nb1_0"), provenance_ok(plotted, "nb2_0")
    assert one["run_id"] == two["run_id"] and (one["index"], two["index"]) == (1, 2)
    assert failed["id"] != plotted["id"] and [c["id"] for c in cells] == cell_ids(page)

    # a person fixes the agent's failing cell by hand and runs it (Shift+Enter): it runs, as their choice
    first.locator(".jp-InputArea-editor .cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.type("print('total', __import__('pandas').read_csv('data/sales.csv')['revenue'].sum())")
    page.keyboard.press("Shift+Enter")
    expect(first.locator(".jp-OutputArea")).to_contain_text("total 395", timeout=60_000)
    expect(first.locator(".jp-OutputArea")).not_to_contain_text("KeyError")
    expect(first.locator(".jp-InputPrompt")).to_have_text("[5]:")
    first.scroll_into_view_if_needed()
    shot(page, "run-cell-9-edited-and-run-by-hand")
    save(page, notebook)

    def persons_code_saved() -> bool:
        mine = json.loads(notebook.read_text())["cells"][2]
        return "".join(mine["source"]).startswith("print('total'") and mine["execution_count"] == 5

    wait_until(persons_code_saved, 20, "the saved notebook holds the person's code in the agent's cell, run")


def test_replace_cell_fixes_the_same_cell(page: Page, lab: Lab) -> None:  # noqa: F811
    """run_cell with a wrong column, then replace_cell (by the first call's id): the same cell gets the plot."""
    notebook = write_notebook(lab, "replace-cell", [
        call("run_cell", "I'll load the data and sum revenue by region.", code=WRONG,
             explanation="revenue by region"),
        call("replace_cell", "The column is `revenue`, lower case. I'll fix the cell and plot it.",
             cell="nb1_0", code=PLOT, explanation="plot revenue by region"),
        {"content": "**North** has the most revenue (160); the plot is in the cell below this record."}])
    start_flow(page, lab, notebook)
    approve(page, 1)
    first = cell(page, 2)
    expect(first.locator(".jp-OutputArea")).to_contain_text("KeyError", timeout=60_000)
    before = cell_ids(page)
    shot(page, "run-cell-4-before-replace")

    approve(page, 2)
    finished(page, "completed_with_errors")  # its first try raised (KeyError), though the second fixed it
    expect(first.locator(".jp-OutputArea-output img")).to_have_count(1, timeout=60_000)
    expect(first.locator(".jp-OutputArea-output").filter(has_text="KeyError")).to_have_count(0)
    expect(first.locator(".jp-InputArea-editor")).to_contain_text("plot revenue by region")
    assert cell_ids(page) == before  # the same cell, no new one
    first.scroll_into_view_if_needed()
    shot(page, "run-cell-5-replaced-with-plot")

    cells = saved_cells(page, notebook)
    assert len(cells) == 4
    fixed = cells[2]
    assert "['revenue']" in "".join(fixed["source"]) and "['Revenue']" not in "".join(fixed["source"])
    assert [o["output_type"] for o in fixed["outputs"] if o["output_type"] == "error"] == []
    assert any("image/png" in o.get("data", {}) for o in fixed["outputs"]), fixed["outputs"]
    meta = provenance_ok(fixed, "nb2_0")
    assert meta.get("replaces_sha256") and meta.get("version"), meta

    # undo the run: the cell it added goes (the panel and its buttons are tests/test_browser_undo.py's)
    add_and_run(page, f"%agent undo {meta['run_id']}")
    panel = page.locator(f"{ACTIVE} .nbagent-live.nbv-undo")
    expect(panel).to_be_visible(timeout=60_000)
    panel.get_by_role("button", name="Undo", exact=True).click()
    confirm = panel.get_by_role("button", name=re.compile(r"^Undo \d+ change"))
    expect(confirm).to_be_visible()
    shot(page, "run-cell-6-undo-asks")
    confirm.click()
    wait_until(lambda: fixed["id"] not in cell_ids(page), 30, "the agent's cell removed by the undo")
    shot(page, "run-cell-7-undone")
    after = cell_ids(page)
    assert after[:3] == [c["id"] for c in cells if c["id"] != fixed["id"]]  # only the agent's cell went

    # the notebook JupyterLab saved, run headless under its recorded approvals: the %%agent cell runs again, and the
    # agent's cell is written anew below it, fixed, with its plot and provenance
    out = notebook.with_name("headless.ipynb")
    done = subprocess.run([str(Path(sys.executable).with_name("nbagent")), "run", str(notebook), "-o", str(out),
                           "--approve", "recorded", "--allow-tool-errors"],  # (its first cell raised)
                          capture_output=True, text=True, cwd=notebook.parent,
                          timeout=300, check=False)  # (a guard against a hang, not a timing assertion)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = [c for c in json.loads(out.read_text())["cells"] if (c["metadata"].get("nbagent") or {}).get("ran")]
    assert len(ran) == 1 and "['revenue']" in "".join(ran[0]["source"]), [c["source"] for c in ran]
    assert any("image/png" in o.get("data", {}) for o in ran[0]["outputs"]), ran[0]["outputs"]
    assert ran[0]["metadata"]["nbagent"]["version"] and ran[0]["metadata"]["nbagent"]["approval_event_id"]


WAIT_FOR = "import os, time\nwhile not os.path.exists({name!r}):\n    time.sleep(0.05)\nprint({said!r})"


def test_typing_in_another_cell_while_the_agent_cells_run(page: Page, lab: Lab) -> None:  # noqa: F811
    """The person types in their own cell while the agent's cells are inserted and run: every keystroke stays there."""
    notebook = write_notebook(lab, "typing", [
        call("run_cell", "First part.", code=WAIT_FOR.format(name="go-a", said="part A done")),
        call("run_cell", "Second part.", code=WAIT_FOR.format(name="go-b", said="part B done")),
        {"content": "Both parts ran."}], prompt="Run the two parts")
    folder = notebook.parent
    start_flow(page, lab, notebook)
    approve(page, 1)
    expect(cell(page, 2).locator(".jp-InputPrompt")).to_have_text("[*]:", timeout=60_000)  # inserted, running
    mine = cell(page, 3)
    mine.locator(".jp-InputArea-editor").click()
    page.keyboard.type("total = 1")
    (folder / "go-a").write_text("")
    expect(cell(page, 2).locator(".jp-OutputArea")).to_contain_text("part A done", timeout=60_000)
    page.keyboard.type(" + 2")  # the output arrived while this editor had the focus
    shot(page, "run-cell-6-typing-while-the-agent-runs")

    approve(page, 2)
    expect(cell(page, 3).locator(".jp-InputPrompt")).to_have_text("[*]:", timeout=60_000)
    mine = cell(page, 4)  # the agent's second cell came in above it
    mine.locator(".jp-InputArea-editor").click()
    page.keyboard.press("End")
    page.keyboard.type(" + 3")
    (folder / "go-b").write_text("")
    expect(cell(page, 3).locator(".jp-OutputArea")).to_contain_text("part B done", timeout=60_000)
    page.keyboard.type(" + 4")
    finished(page)
    shot(page, "run-cell-7-typing-kept")

    assert editor_text(page, 4) == "total = 1 + 2 + 3 + 4"
    assert "total" not in editor_text(page, 2) + editor_text(page, 3)
    cells = saved_cells(page, notebook)
    assert "".join(cells[4]["source"]) == "total = 1 + 2 + 3 + 4" and not cells[4]["outputs"]
    texts = ["".join(o.get("text", "")) for c in cells[2:4] for o in c["outputs"]]
    assert texts == ["part A done\n", "part B done\n"]


THREAD = """import os, threading, time

def chatter():
    while not os.path.exists('agent-started'):
        time.sleep(0.02)
    for i in range(5):
        print(f'background tick {i}', flush=True)
        time.sleep(0.05)
    open('ticks-done', 'w').close()

threading.Thread(target=chatter, daemon=True).start()
%load_ext nbagent"""

AGENT_WAITS = ("import os, time\nopen('agent-started', 'w').close()\n"
               "while not os.path.exists('ticks-done'):\n    time.sleep(0.02)\nprint('agent cell done')")


def test_a_persons_thread_does_not_print_into_the_agent_cell(page: Page, lab: Lab) -> None:  # noqa: F811
    """A thread started in the person's earlier cell prints while the agent's code runs: not into the agent's cell."""
    notebook = write_notebook(lab, "thread", [
        call("run_cell", "I'll wait for the data.", code=AGENT_WAITS),
        {"content": "Done waiting."}], before=THREAD, prompt="Wait for the data")
    start_flow(page, lab, notebook)
    approve(page, 1)
    ours = cell(page, 2)
    expect(ours.locator(".jp-OutputArea")).to_contain_text("agent cell done", timeout=60_000)
    finished(page)
    assert (notebook.parent / "ticks-done").exists()  # the thread printed all its ticks while the agent's code ran
    expect(ours.locator(".jp-OutputArea-output").filter(has_text="background tick")).to_have_count(0)
    ours.scroll_into_view_if_needed()
    shot(page, "run-cell-8-thread-not-in-the-agent-cell")
    cells = saved_cells(page, notebook)
    assert ["".join(o.get("text", "")) for o in cells[2]["outputs"]] == ["agent cell done\n"]
    everything = json.dumps(cells)
    where = [i for i, c in enumerate(cells) if "background tick" in json.dumps(c["outputs"])]
    assert 2 not in where, (where, everything[:2000])
