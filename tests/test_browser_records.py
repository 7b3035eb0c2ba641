"""Issue 13 in a real browser: what a researcher sees of a run, checked by visible text in JupyterLab + Chromium.

A page reload while a run waits; a run interrupted in one cell and continued in a later one (every record of it
in the notebook brought up to date by the lab extension, also after save and reload); the approval question and
high-risk wording phrased from the plan; and the contrast of every text colour of the live view and of both
records (the lab extension's and the text/html fallback), measured in JupyterLab Light and Dark. The server,
browser and helpers are tests/test_browser.py's; screenshots go to the same test-artifacts/browser/ folder.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

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
    command,
    create,
    delete,
    expect,
    finished_record,
    lab,
    open_notebook,
    page,
    save,
    shot,
    shut_down_kernel_and_reload,
    start_flow,
    wait_kernel_idle,
    wait_until,
    waiting_card,
    write_flow,
)

pytest.importorskip("playwright.sync_api")

from playwright.sync_api import Page

pytestmark = pytest.mark.browser


def records_in(notebook: Path) -> list[dict[str, Any]]:
    nb = wait_until(lambda: _parsed(notebook), 20, f"{notebook.name} readable (not half written by a save)")
    return [o["data"][RUN_MIME] for c in nb["cells"] for o in c.get("outputs", []) if RUN_MIME in o.get("data", {})]


def _parsed(notebook: Path) -> dict[str, Any] | None:
    try:
        return json.loads(notebook.read_text())  # type: ignore[no-any-return]
    except ValueError:
        return None


# every element with text of its own, visible and enabled: its colour (alpha composited) against the composited
# background of its ancestors, as WCAG 2 contrast ratios
CONTRAST = """(selector) => {
  const parse = (c) => {
    const m = /rgba?\\(([^)]+)\\)/.exec(c || '');
    if (!m) return null;
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, bottom) => [0, 1, 2].map((i) => top[i] * top[3] + bottom[i] * (1 - top[3])).concat([1]);
  const lin = (v) => { v /= 255; return v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  const lum = (c) => 0.2126 * lin(c[0]) + 0.7152 * lin(c[1]) + 0.0722 * lin(c[2]);
  const background = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    let bg = [255, 255, 255, 1];
    for (let i = layers.length - 1; i >= 0; i--) bg = over(layers[i], bg);
    return bg;
  };
  const out = [];
  for (const root of document.querySelectorAll(selector)) {
    for (const el of [root, ...root.querySelectorAll('*')]) {
      const own = [...el.childNodes].filter((n) => n.nodeType === 3 && n.textContent.trim());
      if (!own.length || !el.getClientRects().length) continue;
      const st = getComputedStyle(el);
      if (st.visibility === 'hidden' || el.closest('button:disabled, input:disabled')) continue;
      const bg = background(el);
      const fg = over(parse(st.color), bg);
      const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
      out.push({ text: own.map((n) => n.textContent.trim()).join(' ').slice(0, 40), cls: el.className || el.tagName,
                 color: st.color, bg: `rgb(${bg.slice(0, 3).map(Math.round).join(',')})`,
                 ratio: Math.round(((a + 0.05) / (b + 0.05)) * 100) / 100 });
    }
  }
  return out;
}"""


def set_theme(page: Page, theme: str) -> None:  # noqa: F811
    command(page, "apputils:change-theme", {"theme": theme})
    light = "true" if theme == "JupyterLab Light" else "false"
    page.wait_for_function(f"() => document.body.dataset.jpThemeLight === '{light}'", timeout=30_000)
    page.wait_for_timeout(400)


def contrast(page: Page, selector: str, what: str, measured: dict[str, float], low: list[str]) -> None:  # noqa: F811
    """Measure every text of `selector` in both themes (a screenshot of each); the pairs under 4.5:1 go to `low`."""
    for theme in ("JupyterLab Light", "JupyterLab Dark"):
        set_theme(page, theme)
        page.locator(selector).first.scroll_into_view_if_needed()
        shot(page, f"k-contrast-{what}-{theme.split()[-1].lower()}")
        items = page.evaluate(CONTRAST, selector)
        assert len(items) > 10, items  # the view was there and measured
        worst = min(items, key=lambda i: i["ratio"])
        measured[f"{what} {theme}"] = worst["ratio"]
        low += [f"{theme}: {i['ratio']}:1 {i['color']} on {i['bg']} .{i['cls']} {i['text']!r}"
                for i in items if i["ratio"] < 4.5]
    set_theme(page, "JupyterLab Light")


def read(path: str) -> dict:
    return {"tool_calls": [{"name": "read_file", "arguments": {"path": path}}], "content": "Let me look first."}


def test_several_decisions_phrased_from_the_plan(page: Page, lab: Lab) -> None:  # noqa: F811
    """One run, four decisions: two actions denied by a button that says what it denies, three approved, a question
    answered in a box that has the focus; the questions are nbagent's, each decision shown once."""
    long_text = "# Notes\n" + "".join(f"line {i}: " + "x" * 70 + "\n" for i in range(8))
    two = {"content": "Ranked by growth instead, as you asked.", "tool_calls": [
        {"name": "delete_file", "arguments": {"path": "old.txt"}},
        {"name": "write_file", "arguments": {"path": "report.md", "content": "# New\n"}}]}
    three = {"content": "Three notes then.", "tool_calls": [
        {"name": "create_file", "arguments": {"path": "a.md", "content": long_text}},
        {"name": "create_file", "arguments": {"path": "b.md", "content": "b\n"}},
        {"name": "create_file", "arguments": {"path": "c.md", "content": "c\n"}}]}
    notebook = write_flow(lab, "decisions", [read("report.md"), two, three,
                                             {"tool_calls": [{"name": "ask_human", "arguments": {
                                                 "question": "Which year should I use?"}}]},
                                             {"content": "Done: three notes, old.txt kept."}],
                          files={"old.txt": "stale\nolder\n", "report.md": "# Old\n"})
    start_flow(page, lab, notebook)
    card = waiting_card(page, 1, "2 steps: delete old.txt, overwrite report.md")
    expect(card.locator(".nbv-decide-q")).to_have_text("Delete old.txt and overwrite report.md?")
    expect(card.locator(".nbv-purpose-by")).to_have_text("the model says ")  # its words, labelled as its own
    expect(card.locator(".nbv-purpose q")).to_have_text("Ranked by growth instead, as you asked.")
    expect(card.locator(".nbv-danger li")).to_have_count(2)
    approve = button(page, "Approve 2 actions (1 delete, 1 overwrite)")
    expect(approve).to_have_class(re.compile(r"\bnbv-approve-danger\b"))
    # Refine looks like a choice, not a disabled control: full opacity, coloured like a link, not the grey border
    refine = button(page, "Refine")
    style = refine.evaluate("b => ['opacity', 'color', 'borderColor'].map((k) => getComputedStyle(b)[k])")
    assert style[0] == "1" and style[1] == style[2], style
    # no autonomy boilerplate under the read the model did at L1
    expect(page.locator(LIVE)).not_to_contain_text("runs without asking")
    shot(page, "m1-two-actions-high-risk")
    button(page, "Deny").click()
    page.get_by_role("textbox", name="reason for denying").fill("keep both")
    shot(page, "m2-deny-confirm")
    button(page, "Deny these 2 actions").click()

    card = waiting_card(page, 2, "3 steps: create a.md, create b.md, create c.md")
    expect(card.locator(".nbv-decide-q")).to_have_text("Run these 3 actions?")
    # a long argument is cut in the table, and all of it is there behind "all arguments"
    card.locator("summary", has_text="all arguments").first.click()
    expect(card.locator(".nbv-args-cell pre").first).to_contain_text("line 7: " + "x" * 70)
    shot(page, "m3-three-actions")
    button(page, "Approve 3 actions").click()

    box = page.locator(LIVE).get_by_role("textbox", name="your answer")
    expect(box).to_be_visible(timeout=60_000)
    expect(box).to_be_focused()
    live = page.locator(LIVE)
    # the question once on the page (its polite announcement for screen readers is not shown)
    shown = live.evaluate("e => { const c = e.cloneNode(true); c.querySelectorAll('.nbv-sr-only')"
                          ".forEach((n) => n.remove()); return c.textContent; }")
    assert shown.count("Which year should I use?") == 1
    shot(page, "m4-question-focused")
    page.keyboard.type("2024")
    page.keyboard.press("Enter")

    record = finished_record(page, "completed_with_errors")  # two actions were denied
    text = record.inner_text()
    assert "approved by user" not in text and "runs without asking" not in text and "(plan 01" not in text
    expect(record.locator(".nbr-decisions li")).to_have_count(2)
    denied = re.compile(r"denied by you · .* — reason: keep both")
    expect(record.locator(".nbr-decisions").first).to_contain_text(denied)
    expect(record.locator(".nbr-decisions").nth(1)).to_contain_text(re.compile(r"approved by you · "))
    expect(record.locator(".nbr-k-question")).to_contain_text("answered by you")
    n = record.locator("li.nbr-step").count()
    expect(record.locator("h4.nbr-section").first).to_have_text(f"Timeline · {n} entries")
    # the 2 denied calls count as tool calls: asked for, not run
    expect(record.locator(".nbr-foot")).to_contain_text("7 tool calls · 5 model calls")
    # the risk badge of a long call sits beside its arguments, in the step's own column, not under the icon
    tool = record.locator(".nbr-step.nbr-k-tool", has_text="a.md").first
    badge_x = tool.locator(".nbr-risk").bounding_box()["x"]
    main_x = tool.locator(".nbr-main").bounding_box()["x"]
    assert badge_x >= main_x, (badge_x, main_x)
    record.scroll_into_view_if_needed()
    shot(page, "m5-completed")
    assert (notebook.parent / "old.txt").exists() and (notebook.parent / "c.md").exists()


def test_reload_while_a_run_waits(page: Page, lab: Lab) -> None:  # noqa: F811
    """Reload the page while the run waits: the live view comes back (saved, then restored from the kernel), the
    click still decides, and the output ends as the run's record although the reload lost its display id."""
    notebook = write_flow(lab, "reload-wait", [create("report.md", "# R\n"), {"content": "Done."}])
    start_flow(page, lab, notebook)
    waiting_card(page, 1, "Create report.md")
    save_while_running(page, notebook)
    page.reload(wait_until="domcontentloaded", timeout=60_000)
    card = waiting_card(page, 1, "Create report.md")
    shot(page, "r1-reloaded-while-waiting")
    button(page, "Create report.md").click()
    record = finished_record(page)
    expect(record).to_contain_text("Done.")
    shot(page, "r2-reloaded-then-approved")
    assert (notebook.parent / "report.md").read_text() == "# R\n"
    save(page, notebook)
    assert [r["status"] for r in records_in(notebook)] == ["completed"]
    # the page put the record in the view's place itself (the reload lost the display id): the whole record, so
    # nbconvert and GitHub show it too, not one line of text (issue 24)
    (output,) = [o for c in json.loads(notebook.read_text())["cells"] for o in c.get("outputs", [])
                 if RUN_MIME in o.get("data", {})]
    assert 'class="nbagent-run' in "".join(output["data"]["text/html"])
    assert "".join(output["data"]["text/plain"]).startswith("nbagent run")
    assert "Done." in "".join(output["data"]["text/plain"])
    del card


def save_while_running(page: Page, notebook: Path) -> None:  # noqa: F811
    page.locator(f"{ACTIVE} .jp-Cell .jp-InputPrompt").first.click()
    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")
    wait_until(lambda: "widget-view" in notebook.read_text(), 20, "the notebook saved with the live view")


def run_cell(page: Page, index: int) -> None:  # noqa: F811
    page.evaluate("(i) => { window.jupyterapp.shell.currentWidget.content.activeCellIndex = i; }", index)
    command(page, "notebook:run-cell")


def test_resume_in_a_later_cell_updates_the_original_record(page: Page, lab: Lab) -> None:  # noqa: F811
    """Interrupt a run waiting in cell 1, approve it in cell 2: cell 1's record shows the final state, in the
    page, in the saved file, and after a reload of a file whose cell 1 still held the interrupted record."""
    notebook = write_flow(lab, "resume-later", [create("report.md", "# R\n"), {"content": "All written."}])
    nb = nbformat.read(notebook, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("%agent approve"))
    nbformat.write(nb, notebook)
    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    run_cell(page, 0)
    run_cell(page, 1)
    waiting_card(page, 1, "Create report.md")
    command(page, "kernelmenu:interrupt")
    cells = page.locator(f"{ACTIVE} .jp-Notebook .jp-Cell")
    first = cells.nth(1).locator(RECORD)
    expect(first).to_have_class(re.compile(r"\bnbr-status-interrupted\b"), timeout=60_000)
    expect(first.locator(".nbr-pending")).to_contain_text("waiting for approval")
    shot(page, "s1-interrupted-waiting")
    save(page, notebook)
    stale = json.loads(notebook.read_text())["cells"][1]["outputs"]
    assert [o["data"][RUN_MIME]["status"] for o in stale if RUN_MIME in o.get("data", {})] == ["interrupted"]

    run_cell(page, 2)
    later = cells.nth(2).locator(RECORD)
    expect(later).to_have_class(re.compile(r"\bnbr-status-completed\b"), timeout=60_000)
    expect(first).to_have_class(re.compile(r"\bnbr-status-completed\b"), timeout=20_000)
    expect(first).to_contain_text("All written.")
    expect(first.locator(".nbr-pending")).to_have_count(0)
    first.scroll_into_view_if_needed()
    shot(page, "s2-approved-in-cell-3-record-of-cell-2-updated")
    save(page, notebook)
    wait_until(lambda: [r["status"] for r in records_in(notebook)] == ["completed", "completed"], 20,
               "the saved notebook holds both records, completed")

    # a file saved before the update (cell 1 still interrupted), opened with no kernel: brought up to date
    saved = json.loads(notebook.read_text())
    saved["cells"][1]["outputs"] = stale
    notebook.write_text(json.dumps(saved))
    shut_down_kernel_and_reload(page, lab, notebook)
    first = page.locator(f"{ACTIVE} .jp-Notebook .jp-Cell").nth(1).locator(RECORD)
    expect(first).to_have_class(re.compile(r"\bnbr-status-completed\b"), timeout=60_000)
    expect(first).to_contain_text("All written.")
    first.scroll_into_view_if_needed()
    shot(page, "s3-reloaded-stale-file-brought-up-to-date")


def test_contrast_of_view_and_records_in_both_themes(page: Page, lab: Lab) -> None:  # noqa: F811
    """Every text colour of the live view (a high-risk card with a diff), the lab extension's record and the
    text/html record reaches 4.5:1 against its effective background in JupyterLab Light and Dark."""
    two = {"content": "Tidy.", "tool_calls": [
        {"name": "delete_file", "arguments": {"path": "old.txt"}},
        {"name": "write_file", "arguments": {"path": "report.md", "content": "# New\nkept\n"}}]}
    notebook = write_flow(lab, "contrast", [read("report.md"), two, {"content": "**Done**, see `report.md`."}],
                          files={"old.txt": "stale\nolder\n", "report.md": "# Old\nkept\n"})
    nb = nbformat.read(notebook, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(
        "import json\nfrom IPython.display import HTML\nfrom nbagent.ui.record import render_html\n"
        "HTML(render_html(json.load(open('view.json'))))"))
    nbformat.write(nb, notebook)
    measured: dict[str, float] = {}
    low: list[str] = []
    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    run_cell(page, 0)
    run_cell(page, 1)
    waiting_card(page, 1, "2 steps: delete old.txt, overwrite report.md")
    contrast(page, LIVE, "live-view", measured, low)
    button(page, "Approve 2 actions (1 delete, 1 overwrite)").click()
    record = finished_record(page)
    expect(record).to_contain_text("Done")
    contrast(page, f"{ACTIVE} {RECORD}", "record", measured, low)
    save(page, notebook)
    (notebook.parent / "view.json").write_text(json.dumps(records_in(notebook)[0]))
    run_cell(page, 2)
    html = f"{ACTIVE} .jp-RenderedHTMLCommon .nbagent-run"  # JupyterLab's own HTML renderer, the record's <style>
    expect(page.locator(html)).to_be_visible(timeout=60_000)
    contrast(page, html, "html-record", measured, low)
    print(f"lowest contrast ratio of each: {measured}")
    assert not low, "\n".join(low)
