"""Issue 46 (46-F): a long session's notebook stays readable, and cards name cells as the page shows them.

A finished run's saved record (its `text/html`, which nbconvert's HTML and GitHub show) folds to two lines, the
whole record inside a `<details>` (no script needed); a run that waits or failed is never folded. A card or record
names the agent's cell by its execution count and first line (`[3] data = …`), not by `nb1_0` or a 32-hex id. Run
through the real parts: `nbagent run` in a real kernel, then nbconvert's HTML exporter on the saved notebook; and a
hypothesis property over hostile views: the fold is exactly a finished run's, its two lines escape what they quote.
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
from examples import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from nbagent.ui.cell_names import name_cells
from nbagent.ui.record_html import render_html
from nbagent.ui.viewstate import MIME, with_words

FIRST = "data = {'region': [1, 2]}\ndata['Region']"
FIX = "data = {'region': [1, 2]}\nprint(sum(data['region']))"
TURNS = [
    {"tool_calls": [{"id": "c1", "name": "run_cell", "arguments": {"code": FIRST, "explanation": "sum by region"}}]},
    {"tool_calls": [{"id": "c2", "name": "replace_cell",
                     "arguments": {"cell": "nb1_0", "code": FIX, "explanation": "the key is 'region'"}}]},
    {"content": "The regions add up to 3.\n\nThe cell below the request prints it."},
]
AGAIN = [  # a later request: the model names the earlier run's cell by the call id that wrote it
    {"tool_calls": [{"id": "c3", "name": "replace_cell",
                     "arguments": {"cell": "nb1_0", "code": "total = 3\nprint(total)", "explanation": "simpler"}}]},
    {"content": "Simpler now."},
]


def nbagent_run(path: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("nbagent")
    # the timeout is a guard against a hang, not a timing assertion
    return subprocess.run([str(exe), "run", str(path), "--approve", "all"], capture_output=True, text=True,
                          cwd=path.parent, timeout=300, check=False)


def record_of(nb: Any, cell_id: str = "ask") -> dict[str, Any]:
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.get("id") == cell_id else []:
            if MIME in out.get("data", {}):
                return dict(out["data"])
    raise AssertionError(f"no record in cell {cell_id}")


@pytest.mark.kernel
@pytest.mark.kernel
def test_a_saved_notebook_folds_each_finished_record_and_names_the_cell_by_what_the_page_shows(
        tmp_path: Path) -> None:
    (tmp_path / "loop.json").write_text(json.dumps({"turns": TURNS}))
    (tmp_path / "again.json").write_text(json.dumps({"turns": AGAIN}))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbagent"),
                nbformat.v4.new_code_cell("%%agent --script loop.json\nSum the regions\nthen print the sum"),
                nbformat.v4.new_code_cell("%%agent --script again.json\nMake it simpler")]
    nb.cells[0].id, nb.cells[1].id, nb.cells[2].id = "load", "ask", "again"
    path = tmp_path / "sums.ipynb"
    nbformat.write(nb, path)
    done = nbagent_run(path)
    assert done.returncode in (0, 1), done.stdout + done.stderr  # (a cell that raised may end it with errors)

    saved = nbformat.read(path, as_version=4)
    agent_cell, = [c for c in saved.cells if (c.metadata.get("nbagent") or {}).get("ran")]
    record = record_of(saved)
    view = record[MIME]
    # the replace_cell card names the cell by the execution count it had and its first line of code
    fix_step, = [s for p in view["plans"] for s in p["steps"] if s["tool"] == "replace_cell"]
    first_count = fix_step["cell"]["count"]
    assert isinstance(first_count, int) and fix_step["cell"]["cell_id"] == agent_cell.id
    assert fix_step["cell"]["first_line"] == "data = {'region': [1, 2]}"
    assert view["words"]["plans"][next(p["plan_id"] for p in view["plans"]
                                       if p["steps"][0]["tool"] == "replace_cell")] == \
        f"replace cell [{first_count}] and run it"
    new_step, = [s for p in view["plans"] for s in p["steps"] if s["tool"] == "run_cell"]
    assert new_step["cell"]["new"] is True and new_step["cell"]["below"] is None  # the run's first cell
    html = record["text/html"]
    assert f">[{first_count}] data = {{&#x27;region&#x27;: [1, 2]}}</code>" in html
    assert f'title="cell {agent_cell.id} (the model wrote nb1_0)"' in html

    # folded: two lines, then the whole record, inside one <details>
    assert view["words"]["compact"] is True
    summary = re.search(r'<details class="nbr-compact"><summary class="nbr-summary-line">(.*?)</summary>', html, re.S)
    assert summary, html[:3000]
    line = re.sub(r"<[^>]+>", "", summary.group(1))
    assert line.startswith(("✓ completed · Sum the regions", "⚠ completed with errors · Sum the regions"))
    assert "then print the sum" not in line  # the request's first line only
    assert "The regions add up to 3." in line and "2 tool calls" in line and "1 cell changed" in line
    assert "The cell below the request" not in line  # the answer's first line only
    inside = html[summary.end():html.rindex("</details>")]
    assert "Timeline" in inside and "nbr-foot" in inside and "The cell below the request prints it." in inside
    # a later run's card names the cell an earlier run wrote, from what the kernel ran: as it was before the change
    later = record_of(saved, "again")[MIME]
    (again_step,) = [s for p in later["plans"] for s in p["steps"] if s["tool"] == "replace_cell"]
    assert again_step["cell"]["cell_id"] == agent_cell.id and again_step["cell"]["first_line"] == FIX.split("\n")[0]
    assert isinstance(again_step["cell"]["count"], int) and again_step["cell"]["count"] > first_count
    assert f'>[{again_step["cell"]["count"]}] data = {{&#x27;region' in record_of(saved, "again")["text/html"]
    # text/plain stays whole: the model and tools read it
    assert "The cell below the request prints it." in record["text/plain"]

    # nbconvert's HTML of the saved notebook: the summary and the whole record inside the <details>, no script
    from nbconvert import HTMLExporter

    page, _ = HTMLExporter().from_notebook_node(saved)  # type: ignore[no-untyped-call]
    at = page.index('<details class="nbr-compact">')
    folded = page[at:page.index("</details>", page.index("nbr-foot", at))]
    assert "The regions add up to 3." in folded and "Timeline" in folded and "Totals" in folded
    assert f"[{first_count}] data =" in folded


def view(status: str, **more: Any) -> dict[str, Any]:
    return with_words({"run_id": "01RUN", "status": status, "prompt": "update the notes", "answer": "Done.",
                       "totals": {"tool_calls": 1, "cost": 0.001}, "steps": [], "plans": [], **more})


def test_a_run_that_waits_failed_or_was_interrupted_is_never_folded() -> None:
    waiting = view("waiting", pending={"kind": "approval", "request_id": "r", "plan_id": "p"})
    for v in (waiting, view("failed", error="RuntimeError: boom"), view("interrupted"), view("running")):
        assert v["words"]["compact"] is False
        assert "<details class=\"nbr-compact\">" not in render_html(v)
    assert "RuntimeError: boom" in render_html(view("failed", error="RuntimeError: boom"))
    for v in (view("completed"), view("completed_with_errors"), view("completed", superseded_by="01NEXT")):
        assert v["words"]["compact"] is True and '<details class="nbr-compact">' in render_html(v)
    assert view("completed", superseded_by="01NEXT")["words"]["summary"].startswith("↷ superseded")


class _Event:
    def __init__(self, type_: str, payload: Any) -> None:
        self.type, self.payload = type_, payload


def test_a_cell_an_earlier_run_wrote_is_named_through_what_the_kernel_ran() -> None:
    from nbagent.events.levels import Risk
    from nbagent.events.model import PlanProposed, PlanStep

    cell_id = "9f" * 16
    step = PlanStep(call_id="nb1_0", tool="replace_cell", arguments={"cell": cell_id, "code": "x = 2"},
                    risk=Risk.WRITE_HIGH_RISK, target=cell_id, digest="d")
    events = [_Event("plan_proposed", PlanProposed(plan_id="p", steps=[step]))]
    plain = {"run_id": "R2", "plans": [{"plan_id": "p", "steps": [step.model_dump(mode="json")]}], "steps": []}
    assert "cell" not in name_cells(json.loads(json.dumps(plain)), events)["plans"][0]["steps"][0]

    def known(spelling: str, run_id: str | None) -> tuple[str, int | None, str] | None:
        return (cell_id, 7, "# nbagent: run by run R1: load\nimport pandas as pd\n") if spelling == cell_id else None

    named = with_words(name_cells(json.loads(json.dumps(plain)), events, known))
    assert named["plans"][0]["steps"][0]["cell"] == {"cell_id": cell_id, "count": 7,
                                                     "first_line": "import pandas as pd"}
    assert named["words"]["plans"]["p"] == "replace cell [7] and run it"


_TEXT = st.lists(st.sampled_from([*"ab <>&\"'`*#\n\t-_[]()/", "<script>", "</details>", "</summary>"]),
                 max_size=30).map("".join)


@settings(max_examples=examples(150), deadline=None)
@given(status=st.sampled_from(["completed", "completed_with_errors", "failed", "waiting", "interrupted", "running",
                               "superseded", "weird"]),
       prompt=st.one_of(st.none(), _TEXT), answer=st.one_of(st.none(), _TEXT),
       pending=st.booleans(), superseded=st.booleans(), cost=st.one_of(st.none(), st.floats(0, 5)))
def test_the_fold_is_exactly_a_finished_run_and_its_two_lines_carry_no_markup_of_their_own(
        status: str, prompt: str | None, answer: str | None, pending: bool, superseded: bool,
        cost: float | None) -> None:
    v = with_words({"run_id": "01RUN", "status": status, "prompt": prompt, "answer": answer,
                    "pending": {"kind": "approval", "request_id": "r", "plan_id": "p"} if pending else None,
                    "superseded_by": "01NEXT" if superseded else None,
                    "totals": {"tool_calls": 2, "cost": cost}, "steps": [], "plans": []})
    answerable = pending and not superseded and status != "superseded"
    folds = (status in ("completed", "completed_with_errors", "superseded") or superseded) and not answerable
    assert v["words"]["compact"] is folds
    html = render_html(v)
    assert html.count('<details class="nbr-compact">') == (1 if folds else 0)
    for line in (v["words"]["summary"], v["words"]["summary_more"]):
        assert "\n" not in line  # one line each
    if folds:
        summary = html[html.index('<summary class="nbr-summary-line">'):html.index("</summary>")]
        assert "<script" not in summary and "</details" not in summary  # the model's and person's text escaped
        # the whole record inside the fold (this run changed nothing, so no ↶ Undo line follows it)
        assert html.rstrip().endswith("</details></div>")
    if answerable:
        assert "in a new cell:" in html  # the line that answers it stays in sight


def test_a_folded_record_keeps_its_undo_line_in_sight_below_the_fold() -> None:
    """The ↶ Undo line of a finished run that changed a file is outside the fold, where the lab extension puts its
    Undo… button (as the record showed it in JupyterLab before it was drawn once, by the kernel)."""
    step = {"id": "s1", "kind": "tool", "tool": "create_file", "status": "ok", "target": "a.md",
            "arguments": {"path": "a.md", "content": "x"}}
    v = with_words({"run_id": "01RUN", "status": "completed", "prompt": "write a.md", "answer": "Done.",
                    "totals": {"tool_calls": 1}, "steps": [step], "plans": [], "effects": {"created": ["a.md"]}})
    html = render_html(v)
    fold_end = html.index("</details>", html.index('<details class="nbr-compact">'))
    undo = html.index('<p class="nbr-undo">')
    assert undo > html.rindex("</details>") >= fold_end
    assert html[undo:].startswith('<p class="nbr-undo"><strong>↶ Undo</strong> <code>%agent undo 01RUN</code>')
    assert html.rstrip().endswith("</p></div>")
