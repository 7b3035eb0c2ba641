"""`nbagent run`: a notebook executed headlessly leaves static records in every %%agent cell and a summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat

from nbagent.store import Store

RUN_MIME = "application/vnd.nbagent.run+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def notebook(folder: Path, cells: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    path = folder / "analysis.ipynb"
    nbformat.write(nb, path)
    return path


def script(folder: Path, name: str, *turns: dict) -> None:
    (folder / name).write_text(json.dumps({"turns": list(turns)}))


def nbagent(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("nbagent")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, cwd=cwd, timeout=300, check=False)


def test_run_writes_static_records_and_summaries(tmp_path: Path) -> None:
    (tmp_path / "sales.csv").write_text("region,revenue\nNorth,10\nSouth,7\n")
    script(tmp_path, "read.json", {"tool_calls": [{"name": "read_file", "arguments": {"path": "sales.csv"}}]},
           {"content": "North sold most."})
    script(tmp_path, "write.json", {"tool_calls": [{"name": "create_file",
                                                    "arguments": {"path": "report.md", "content": "# North\n"}}]},
           {"content": "Wrote report.md."})
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent --script read.json\nWhich region sold most?",
                               "%%agent --script write.json\nWrite report.md", "print('plain cell')"])
    result = nbagent("run", str(path), "--approve", "all", "-o", "out.ipynb", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 3 and "completed" in lines[0] and "North sold most." in lines[0]
    assert "Wrote report.md." in lines[1] and lines[2].startswith("ok: 2 run(s)")
    assert (tmp_path / "report.md").read_text() == "# North\n"

    executed = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    agent_cells = [c for c in executed.cells if c.source.startswith("%%agent")]
    store = Store(tmp_path / "analysis.nbagent", readonly=True)
    for cell in agent_cells:
        data = [o for o in cell.outputs if o.output_type in ("display_data", "execute_result")]
        assert len(data) == 1, cell.outputs
        bundle = data[0]["data"]
        assert WIDGET_MIME not in bundle and "text/html" in bundle and RUN_MIME in bundle
        record = bundle[RUN_MIME]
        assert record["cell_id"] == cell.id  # the runner sent the cell id, as JupyterLab does
        assert store.run_state(record["run_id"]).status.value == "completed"
        assert "nbagent" in bundle["text/html"] and record["answer"] in bundle["text/html"].replace("<p>", "")
    assert not [o for c in executed.cells for o in c.outputs if WIDGET_MIME in o.get("data", {})]


def test_run_fails_when_a_run_fails_or_a_cell_errors(tmp_path: Path) -> None:
    script(tmp_path, "short.json", {"tool_calls": [{"name": "read_file", "arguments": {"path": "x"}}]})
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent --script short.json\nkeep going"])
    result = nbagent("run", str(path), cwd=tmp_path)
    assert result.returncode == 1 and "failed" in result.stdout and "FAILED: 1 run(s)" in result.stdout
    path = notebook(tmp_path, ["1 / 0"])
    result = nbagent("run", str(path), cwd=tmp_path)
    assert result.returncode == 1 and "ZeroDivisionError" in result.stderr


def test_denied_by_default_headless_policy(tmp_path: Path) -> None:
    script(tmp_path, "write.json", {"tool_calls": [{"name": "create_file",
                                                    "arguments": {"path": "r.md", "content": "x"}}]},
           {"content": "Not written."})
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent --script write.json\nwrite r.md"])
    result = nbagent("run", str(path), cwd=tmp_path)
    assert result.returncode == 0 and not (tmp_path / "r.md").exists()
    state = Store(tmp_path / "analysis.nbagent", readonly=True)
    run = state.list_runs()[-1]
    assert state.run_state(run.id).decisions[0].by == "policy:none"


def test_missing_notebook_is_a_clear_error(tmp_path: Path) -> None:
    result = nbagent("run", "nope.ipynb", cwd=tmp_path)
    assert result.returncode == 2 and "nope.ipynb: no such notebook" in result.stderr
