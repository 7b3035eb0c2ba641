"""Issue 27's analysis loop, headless and whole, through `nbagent run` in real kernels: the agent's first cell raises
(a wrong column), the model reads the traceback and replaces its cell, the plot appears in that cell, the model
receives the figure as an image; the saved notebook holds the cell with its outputs and provenance; `nbagent run
--approve recorded` runs it again under the recorded approvals; a person's edit makes `--approve none` fail that
cell with one line and keeps the edit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

from nbagent.store import Store, store_path_for

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

SALES = "date,region,revenue\n" + "".join(
    f"2026-0{m}-01,{r},{100 + 10 * m + i}\n" for m in range(1, 4) for i, r in enumerate(["North", "South", "East"]))
FIRST = "import pandas as pd\nsales = pd.read_csv('data/sales.csv')\nsales.groupby('Region')['revenue'].sum()"
FIX = ("import pandas as pd\nimport matplotlib\nmatplotlib.use('module://matplotlib_inline.backend_inline')\n"
       "import matplotlib.pyplot as plt\nsales = pd.read_csv('data/sales.csv')\n"
       "by_region = sales.groupby('region')['revenue'].sum()\nby_region.plot.bar(title='Revenue by region')\n"
       "plt.show()\nprint(by_region.to_dict())")
TURNS = [
    {"tool_calls": [{"id": "call_first", "name": "run_cell",
                     "arguments": {"code": FIRST, "explanation": "revenue by region"}}]},
    {"tool_calls": [{"id": "call_fix", "name": "replace_cell",
                     "arguments": {"cell": "nb1_0", "code": FIX, "explanation": "the column is 'region'"}}]},
    {"content": "The plot of revenue by region is in the cell below the request; I saw {images_received} image."},
]


def nbagent_run(path: Path, approve: str, *more: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("nbagent")
    # the timeout is a guard against a hang, not a timing assertion
    return subprocess.run([str(exe), "run", str(path), "--approve", approve, *more], capture_output=True, text=True,
                          cwd=path.parent, timeout=400, check=False)


def ran_cells(nb: Any) -> list[Any]:
    return [c for c in nb.cells if (c.metadata.get("nbagent") or {}).get("ran")]


def results(folder: Path, tool: str) -> list[dict[str, Any]]:
    store = Store(store_path_for(folder / "sales.ipynb"), readonly=True)
    return [e.payload.result for rid in store.run_ids() for e in store.run_events(rid)
            if e.type == "tool_call_completed" and e.payload.tool == tool]


def requests(folder: Path) -> list[dict[str, Any]]:
    store = Store(store_path_for(folder / "sales.ipynb"), readonly=True)
    return [e.payload.request for rid in store.run_ids() for e in store.run_events(rid) if e.type == "llm_called"]


def test_the_agent_fixes_its_cell_and_the_notebook_says_what_ran(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "sales.csv").write_text(SALES)
    (tmp_path / "loop.json").write_text(json.dumps({"images": True, "turns": TURNS}))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbagent"),
                nbformat.v4.new_code_cell("%%agent --script loop.json\nPlot revenue by region from data/sales.csv")]
    nb.cells[0].id, nb.cells[1].id = "load", "ask"
    path = tmp_path / "sales.ipynb"
    nbformat.write(nb, path)

    done = nbagent_run(path, "all")
    # its first cell raised: the run ends completed_with_errors, which `nbagent run` does not call ok
    assert done.returncode == 1 and "completed_with_errors" in done.stdout, done.stdout + done.stderr
    assert "run_cell: raised KeyError" in done.stdout
    first, = results(tmp_path, "run_cell")
    assert first["error"].startswith("KeyError") and "Region" in first["traceback"]
    fixed, = results(tmp_path, "replace_cell")
    assert fixed["cell_id"] == first["cell_id"] and "error" not in fixed
    # the model got the figure as an image, in the request after the fix
    last = json.dumps(requests(tmp_path)[-1])
    assert "images_sent" in last, last[:2000]
    store = Store(store_path_for(path), readonly=True)
    answer = next(e.payload.content for rid in store.run_ids() for e in store.run_events(rid)
                  if e.type == "answer_ready")
    assert "I saw 1 image" in answer

    saved = nbformat.read(path, as_version=4)
    cell, = ran_cells(saved)
    assert cell.id == first["cell_id"] and FIX in cell.source and cell.source.startswith("# nbagent: ")
    assert [c.id for c in saved.cells[:2]] == ["load", "ask"] and saved.cells[2] is cell  # right below the request
    kinds = {o.output_type for o in cell.outputs}
    assert any("image/png" in o.get("data", {}) for o in cell.outputs), kinds
    assert any("North" in o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    meta = cell.metadata["nbagent"]
    assert len(meta["source_sha256"]) == 64 and int(meta["source_sha256"], 16) >= 0
    assert meta["run_id"] and meta["call_id"] and meta["approval_event_id"]
    assert isinstance(cell.execution_count, int)
    counts = [c.execution_count for c in saved.cells if c.cell_type == "code"]
    assert counts == sorted(counts) and len(set(counts)) == len(counts), counts  # the kernel's counts, in order

    # again, under the recorded approvals: the same cell, once, run again
    again = nbagent_run(path, "recorded", "--allow-tool-errors")  # (the first cell raises again, as recorded)
    assert again.returncode == 0, again.stdout + again.stderr
    saved = nbformat.read(path, as_version=4)
    cell, = ran_cells(saved)
    assert FIX in cell.source and any("image/png" in o.get("data", {}) for o in cell.outputs)
    assert len(results(tmp_path, "replace_cell")) == 2

    # a person edits the agent's cell: `--approve none` fails it with one line, and keeps the edit
    cell.source = cell.source.replace("Revenue by region", "Revenue, by region (mine)")
    nbformat.write(saved, path)
    edited = nbagent_run(path, "none")
    assert edited.returncode == 1
    saved = nbformat.read(path, as_version=4)
    mine = [c for c in saved.cells if "Revenue, by region (mine)" in c.source]
    assert len(mine) == 1
    (err,) = [o for o in mine[0].outputs if o.output_type == "error"]
    assert "not run: the agent wrote and ran this cell" in err.evalue and "a person changed it" in err.evalue
    assert "\n" not in err.evalue
