"""Issue 46 in JupyterLab + Chromium: re-running an `%%agent` cell reproduces it, whatever re-runs it.

One notebook, one whole sequence, read by visible text and in the saved .ipynb: the agent runs a cell that raises
(KeyError), then replaces it with the fix (two cards, both approved). Saved, shut down, reopened with a new kernel,
Run All: the cards come again, and once approved the notebook holds exactly one agent cell, with this run's outputs,
where the old one was (its queued request is a no-op in the kernel: the code ran exactly as often as the runs ran
it). The person edits that cell; Run All again: their cell is kept, marked as theirs and run as theirs, and the new
run's cell is beside it. Then Shift+Enter on the `%%agent` cell in the same kernel: every card is on screen and
decided, the run completes, the cell is not left `[*]`, and still one agent cell. Screenshots:
test-artifacts/browser/rerun-*.png.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_browser import (  # noqa: F401  (browser, page are fixtures)
    ACTIVE,
    LIVE,
    RECORD,
    Lab,
    browser,
    command,
    expect,
    open_notebook,
    page,
    save,
    shot,
    wait_kernel_idle,
    wait_until,
)
from test_browser_person import MAGIC, notebook_of, run_cell, shut_down_kernel
from test_browser_run_cell import lab  # noqa: F401  (lab: the checkout's build of the lab extension)

from nbagent.store import Store

pytest.importorskip("playwright.sync_api")

from playwright.sync_api import Page

pytestmark = pytest.mark.browser

CELLS = f"{ACTIVE} .jp-Notebook .jp-Cell"
WRONG = "rows = {'North': 160, 'South': 60}\nopen('ran.txt', 'a').write('wrong\\n')\nrows['Revenue']"
FIXED = "rows = {'North': 160, 'South': 60}\nopen('ran.txt', 'a').write('fixed\\n')\nprint('North', rows['North'])"
TURNS = [
    {"content": "I'll sum revenue by region.",
     "tool_calls": [{"name": "run_cell", "arguments": {"code": WRONG, "explanation": "revenue by region"}}]},
    {"content": "The key is `North`; I'll fix the cell.",
     "tool_calls": [{"name": "replace_cell", "arguments": {"cell": "nb1_0", "code": FIXED,
                                                           "explanation": "print North"}}]},
    {"content": "**North** has 160."}]

MODEL_CELLS = """() => {
  const c = window.jupyterapp.shell.currentWidget.content.model.cells;
  return Array.from({length: c.length}, (_, i) => {
    const m = c.get(i);
    const outs = m.outputs
      ? Array.from({length: m.outputs.length}, (_, j) => JSON.stringify(m.outputs.get(j).toJSON())) : [];
    return {id: m.id, source: m.sharedModel.getSource(), nbagent: m.getMetadata('nbagent') || null,
            outputs: outs.join('\\n')};
  });
}"""


def model_cells(page: Page) -> list[dict[str, Any]]:  # noqa: F811
    return list(page.evaluate(MODEL_CELLS))


def agents(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells that are the agent's: ran by it, not marked as the person's."""
    return [c for c in cells if (c["nbagent"] or {}).get("ran") and not (c["nbagent"] or {}).get("edited")]


def ran(folder: Path) -> list[str]:
    path = folder / "ran.txt"
    return path.read_text().split() if path.exists() else []


def latest_run(notebook: Path) -> str:
    store = Store(notebook.with_suffix(".nbagent"), readonly=True)
    return [r.id for r in store.list_runs() if r.parent_run_id is None][-1]


def approve(page: Page, n: int) -> None:  # noqa: F811
    """Click Approve on plan `n`'s card, which must be on the page (scrolled to, as a person would) and waiting."""
    card = page.locator(f"{LIVE} .nbv-plan.nbv-plan-waiting")
    expect(card.locator(".nbv-plan-title")).to_contain_text(f"Plan {n}:", timeout=90_000)
    expect(card).to_be_visible()
    button = card.locator("button.nbv-approve")
    expect(button).to_be_enabled()
    button.click()  # (scrolled into view first, as a person scrolls to it; retried if the view is redrawn)
    decided = page.locator(f"{LIVE} .nbv-plan", has_text=f"Plan {n}:")
    expect(decided.locator("button.nbv-approve:enabled")).to_have_count(0)  # the click was taken


def both_cards(page: Page, times: list[str], folder: Path, expected: int, name: str) -> None:  # noqa: F811
    """Approve the run's two cards (each must be on screen to be clicked), then wait for its code to have run."""
    approve(page, 1)
    shot(page, f"rerun-{name}-1-first-card-decided")
    approve(page, 2)
    shot(page, f"rerun-{name}-2-second-card-decided")
    wait_until(lambda: len(ran(folder)) >= expected, 60, f"{expected} executions of the agent's code")
    times.append(name)


def the_record(page: Page, run_id: str) -> Any:  # noqa: F811
    """The `%%agent` cell's record of run `run_id`, ended (its first cell raised: completed with errors)."""
    record = page.locator(CELLS).nth(1).locator(RECORD)
    expect(record).to_have_attribute("data-run-id", run_id, timeout=60_000)
    expect(record).to_have_class(re.compile(r"\bnbr-status-completed(_with_errors)?\b"))
    return record


def test_rerun_by_run_all_and_by_shift_enter_reproduces_with_one_agent_cell(page: Page, lab: Lab) -> None:  # noqa: F811
    notebook = notebook_of(lab, "rerun", TURNS, ["%load_ext nbagent", f"{MAGIC}\nSum revenue by region",
                                                 "print('the person')"])
    folder = notebook.parent
    done: list[str] = []
    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    run_cell(page, 0)
    run_cell(page, 1)
    both_cards(page, done, folder, 2, "first")
    first = latest_run(notebook)
    the_record(page, first)
    wait_kernel_idle(page, lab, notebook)
    (a,) = agents(model_cells(page))
    assert "North 160" in a["outputs"] and a["nbagent"]["run_id"] == first
    save(page, notebook)

    # saved, shut down, reopened: a new kernel; Run All
    page.goto("about:blank")
    shut_down_kernel(lab, notebook)
    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    command(page, "runmenu:run-all")
    both_cards(page, done, folder, 4, "run-all")
    second = latest_run(notebook)
    assert second != first
    the_record(page, second)
    wait_kernel_idle(page, lab, notebook)
    cells = model_cells(page)
    (b,) = agents(cells)
    assert b["nbagent"]["run_id"] == second and "North 160" in b["outputs"] and "KeyError" not in b["outputs"]
    assert [c["id"] for c in cells].index(b["id"]) == 2 and len(cells) == 4  # where the old one was; no other
    assert ran(folder) == ["wrong", "fixed", "wrong", "fixed"]  # the old cell's queued request ran nothing
    page.locator(CELLS).nth(2).scroll_into_view_if_needed()
    shot(page, "rerun-run-all-2-one-agent-cell")

    # the person edits the agent's cell, then Run All again in the same kernel
    page.evaluate("(src) => window.jupyterapp.shell.currentWidget.content.model.cells.get(2).sharedModel"
                  ".setSource(src)", b["source"] + "print('mine')\n")
    command(page, "runmenu:run-all")
    both_cards(page, done, folder, 6, "run-all-again")
    third = latest_run(notebook)
    the_record(page, third)
    cells = model_cells(page)
    page.locator(CELLS).nth(3).scroll_into_view_if_needed()
    shot(page, "rerun-run-all-again-3-edited-cell-kept")

    # Shift+Enter on the %%agent cell, same kernel, as soon as the last run's record is drawn (its ended live view is
    # still being replaced by it): every card on screen, decided; the run completes
    run_cell(page, 1)
    (c,) = agents(cells)
    mine = [x for x in cells if x["id"] == b["id"]]
    assert c["nbagent"]["run_id"] == third and "North 160" in c["outputs"]
    assert len(mine) == 1 and mine[0]["nbagent"].get("edited") is True and "print('mine')" in mine[0]["source"]
    assert [x["id"] for x in cells] == [cells[0]["id"], cells[1]["id"], c["id"], b["id"], cells[4]["id"]]
    both_cards(page, done, folder, 9, "shift-enter")
    fourth = latest_run(notebook)
    record = the_record(page, fourth)
    wait_kernel_idle(page, lab, notebook)
    expect(page.locator(CELLS).nth(1).locator(".jp-InputPrompt")).not_to_contain_text("*")
    cells = model_cells(page)
    (d,) = agents(cells)
    assert d["nbagent"]["run_id"] == fourth and "North 160" in d["outputs"]
    assert [x["id"] for x in cells].index(d["id"]) == 2 and len(cells) == 5
    kept = next(x for x in cells if x["id"] == b["id"])
    assert kept["nbagent"].get("edited") is True and "print('mine')" in kept["source"]  # survived both re-runs
    assert "mine" in kept["outputs"] and "not run" not in kept["outputs"]  # Run All ran it as theirs, not refused
    assert ran(folder) == ["wrong", "fixed"] * 3 + ["fixed", "wrong", "fixed"]  # the edited cell once, as theirs
    record.scroll_into_view_if_needed()
    shot(page, "rerun-shift-enter-3-completed-one-agent-cell")
    assert done == ["first", "run-all", "run-all-again", "shift-enter"]

    save(page, notebook)
    wait_until(lambda: fourth in notebook.read_text(), 30, "the last run saved")
    saved = json.loads(notebook.read_text())["cells"]
    theirs = [x for x in saved if (x["metadata"].get("nbagent") or {}).get("edited")]
    ours = [x for x in saved if (x["metadata"].get("nbagent") or {}).get("ran") and x not in theirs]
    assert len(saved) == 5 and len(ours) == 1 and len(theirs) == 1
    assert ours[0]["metadata"]["nbagent"]["run_id"] == fourth and ours[0]["metadata"]["nbagent"]["call_id"] == "nb2_0"
    assert any("North 160" in "".join(o.get("text", "")) for o in ours[0]["outputs"]), ours[0]["outputs"]
    assert "print('mine')" in "".join(theirs[0]["source"])
    records = [o["data"]["application/vnd.nbagent.run+json"] for o in saved[1]["outputs"]
               if "application/vnd.nbagent.run+json" in o.get("data", {})]
    assert [r["run_id"] for r in records] == [fourth] and records[0]["status"] in ("completed", "completed_with_errors")


REPO = Path(__file__).resolve().parents[1]


def test_the_analysis_loop_notebook_run_all_after_reopen_twice_holds_one_agent_cell(page: Page, lab: Lab) -> None:  # noqa: F811
    """notebooks/analysis-loop.ipynb itself (its KeyError, the fix, the plot): run by Run All, saved, shut down,
    reopened, Run All twice in that kernel. Each time: one agent cell, with this run's plot; the step that raised is
    ✗ in the record, and the saved notebook and its nbconvert HTML say the same as the log."""
    import shutil
    import subprocess
    import sys

    folder = lab.root / "loop"
    folder.mkdir()
    shutil.copy(REPO / "notebooks" / "analysis-loop.ipynb", folder / "analysis-loop.ipynb")
    shutil.copytree(REPO / "notebooks" / "data", folder / "data")
    shutil.copytree(REPO / "notebooks" / "scripts", folder / "scripts")
    notebook = folder / "analysis-loop.ipynb"
    runs: list[str] = []

    def run_all_and_approve(name: str) -> list[dict[str, Any]]:
        command(page, "runmenu:run-all")
        approve(page, 1)
        approve(page, 2)
        wait_until(lambda: len(Store(notebook.with_suffix(".nbagent"), readonly=True).list_runs()) > len(runs), 60,
                   "the run recorded")
        runs.append(latest_run(notebook))
        record = page.locator(f"{ACTIVE} {RECORD}[data-run-id=\"{runs[-1]}\"]")
        expect(record).to_have_class(re.compile(r"\bnbr-status-completed_with_errors\b"), timeout=90_000)
        expect(record).to_contain_text("raised KeyError")  # (inside the fold: the text is there, folded or not)
        wait_kernel_idle(page, lab, notebook)
        record.scroll_into_view_if_needed()
        shot(page, f"rerun-loop-{name}")
        cells = model_cells(page)
        (agent,) = agents(cells)
        assert agent["nbagent"]["run_id"] == runs[-1] and '"image/png"' in agent["outputs"], agent["outputs"][:300]
        assert "KeyError" not in agent["outputs"]  # the fixed code's outputs, not the first try's
        assert "by_region" in cells[-1]["source"] and "Revenue by region" not in cells[-1]["outputs"]
        assert "North" in cells[-1]["outputs"]  # the person's cell after it saw the agent's variable
        return cells

    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    first = run_all_and_approve("1-run-all")
    save(page, notebook)
    wait_until(lambda: runs[-1] in notebook.read_text(), 30, "the run saved")

    page.goto("about:blank")
    shut_down_kernel(lab, notebook)
    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    second = run_all_and_approve("2-reopened-run-all")
    third = run_all_and_approve("3-run-all-again")
    assert len(first) == len(second) == len(third)  # nothing duplicated, nothing lost
    save(page, notebook)
    wait_until(lambda: runs[-1] in notebook.read_text(), 30, "the last run saved")

    saved = json.loads(notebook.read_text())
    ours = [c for c in saved["cells"] if (c["metadata"].get("nbagent") or {}).get("ran")]
    assert len(ours) == 1 and ours[0]["metadata"]["nbagent"]["run_id"] == runs[-1]
    assert any("image/png" in o.get("data", {}) for o in ours[0]["outputs"])
    store = Store(notebook.with_suffix(".nbagent"), readonly=True)
    assert store.run_state(runs[-1]).status.value == "completed_with_errors"  # the log says what the record says
    html = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", "--stdout", str(notebook)],
                          capture_output=True, text=True, check=True, timeout=300).stdout
    assert "raised KeyError" in html and "completed with errors" in html
    # one agent cell in what a reader of the HTML sees (its first line, highlighted as code; the record's diff and the
    # notebook's Markdown name the line too)
    assert html.count('<span class="c1"># nbagent: run by run') == 1
