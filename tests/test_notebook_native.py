"""Notebook-native abilities in a real kernel: variables as context, %agent fix, model detection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kernel_harness import Kernel, script

from nbagent.models.detect import candidates, detect
from nbagent.store import Store


def first_request(k: Kernel) -> dict:
    store = Store(k.folder / "test.nbagent", readonly=True)
    run = store.list_runs()[-1]
    return next(e for e in store.run_events(run.id) if e.type == "llm_called").payload.request


@pytest.mark.kernel
def test_variables_in_the_request_reach_the_model_summarised(kernel: Kernel) -> None:
    setup = kernel.run(
        "import pandas as pd\n"
        "df = pd.DataFrame({'region': ['North', 'East'] * 50_000, 'revenue': range(100_000)})\n"
        "params = {'alpha': 0.05, 'tails': 2, 'notes': 'x' * 5000}", cell_id="c1")
    assert setup.ok, setup.stderr
    script(kernel.folder / "s.json", {"content": "Looked."})
    cell = kernel.run("%%agent --script s.json\nDescribe {df} and check @params; email me at a@b.org {{literally}}",
                      cell_id="c2")
    assert cell.ok and not cell.stderr.strip(), cell.stderr
    messages = first_request(kernel)["messages"]
    context, prompt = messages[0]["content"], messages[1]["content"]
    assert prompt == "Describe `df` and check `params`; email me at a@b.org {literally}"
    df = json.loads(context.split("`df`: ", 1)[1].split("\n\n")[0])
    assert df["shape"] == [100000, 2] and df["dtypes"]["revenue"] == "int64"
    assert df["dtypes"]["region"] in ("object", "str")  # pandas 3 names strings "str"
    assert "North" in df["head"] and len(context) < 6000  # a summary, never the 100,000 rows
    params = json.loads(context.split("`params`: ", 1)[1])
    assert params["items"]["'alpha'"] == "0.05" and params["len"] == 3
    assert "…" in params["items"]["'notes'"]  # the long string is cut, and says so


@pytest.mark.kernel
def test_unknown_variable_is_an_error_before_any_model_call(kernel: Kernel) -> None:
    script(kernel.folder / "s.json", {"content": "never"})
    cell = kernel.run("%%agent --script s.json\nSummarise {nonexistent}", cell_id="c1")
    # the cell fails (so Run All stops here), naming the variable and what to do, in one line
    assert not cell.ok and cell.reply["content"]["ename"] == "UnknownVariable"  # type: ignore[index]
    (error,) = [o["error"] for o in cell.outputs if "error" in o]
    assert "{nonexistent} is not a variable of this notebook; define it first" in error and "{{nonexistent}}" in error
    assert len(cell.reply["content"]["traceback"]) == 1  # type: ignore[index]
    assert not (kernel.folder / "test.nbagent").exists() or not Store(kernel.folder / "test.nbagent").run_ids()


@pytest.mark.kernel
def test_agent_fix_after_a_zero_division_error(kernel: Kernel) -> None:
    failing = kernel.run("total = 10\ncount = 0\nmean = total / count", cell_id="c1")
    assert not failing.ok
    script(kernel.folder / "fix.json", {"content": "count is 0, so the division fails; guard it."})
    cell = kernel.run("%agent config script=fix.json\n%agent fix keep it short", cell_id="c2")
    assert cell.ok, cell.stderr
    request = first_request(kernel)
    context, prompt = request["messages"][0]["content"], request["messages"][1]["content"]
    assert prompt.startswith("The cell below failed with ZeroDivisionError: division by zero.")
    assert prompt.endswith("keep it short")
    assert "mean = total / count" in context and "ZeroDivisionError" in context and "Traceback" in context


@pytest.mark.kernel
def test_agent_fix_without_an_error_says_so(kernel: Kernel) -> None:
    cell = kernel.run("%agent fix", cell_id="c1")
    assert not cell.ok and "no cell has failed" in cell.reply["content"]["evalue"]  # type: ignore[index]


def test_model_detection_order() -> None:
    env = {"ANTHROPIC_API_KEY": "k", "GEMINI_API_KEY": "g"}
    assert detect(env, probe_ollama=False).model == "anthropic/claude-3-5-haiku-latest"
    assert [c.why for c in candidates({"OPENAI_API_KEY": "x", **env}, probe_ollama=False)] == [
        "OPENAI_API_KEY is set", "ANTHROPIC_API_KEY is set", "GEMINI_API_KEY is set"]
    assert detect({}, probe_ollama=False) is None


@pytest.mark.kernel
def test_models_magic_and_the_no_model_error(kernel: Kernel) -> None:
    out = kernel.run("%agent models", cell_id="c1")
    assert "no model: pass --model" in out.stdout and "--script turns.json" in out.stdout
    kernel.run("%agent config model=openai/gpt-4o-mini", cell_id="c2")
    assert "model: openai/gpt-4o-mini (from %agent config)" in kernel.run("%agent models", cell_id="c3").stdout
    cell = kernel.run("import os\nos.environ['ANTHROPIC_API_KEY'] = 'sk-ant-test'\n%agent config model=",
                      cell_id="c4")
    assert cell.ok
    out = kernel.run("%agent models", cell_id="c5").stdout
    assert "detected: anthropic/claude-3-5-haiku-latest (ANTHROPIC_API_KEY is set)" in out


@pytest.mark.kernel
def test_inserted_cell_appears_in_the_executed_notebook(tmp_path: Path) -> None:
    import subprocess
    import sys

    import nbformat

    script(tmp_path / "s.json",
           {"content": "Here is a cell that plots it.",
            "tool_calls": [{"name": "insert_code_cell",
                            "arguments": {"code": "df.plot(x='region', y='revenue')", "explanation": "a bar chart"}}]},
           {"content": "I put the code in a new cell below."})
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbagent"),
                nbformat.v4.new_code_cell("%%agent --script s.json\nplot revenue by region"),
                nbformat.v4.new_markdown_cell("the end")]
    nbformat.write(nb, tmp_path / "plot.ipynb")
    exe = Path(sys.executable).with_name("nbagent")
    # the cell is code that runs later (WRITE_HIGH_RISK): `--approve low` would deny it (tests/test_agent_cells.py)
    result = subprocess.run([str(exe), "run", "plot.ipynb", "--approve", "all"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    executed = nbformat.read(tmp_path / "plot.ipynb", as_version=4)
    assert [c.cell_type for c in executed.cells] == ["code", "code", "code", "markdown"]
    inserted = executed.cells[2]
    run_id = Store(tmp_path / "plot.nbagent", readonly=True).run_ids()[-1]
    assert inserted.source == f"# nbagent: proposed by run {run_id}: a bar chart\ndf.plot(x='region', y='revenue')\n"
    assert {k: inserted.metadata["nbagent"][k] for k in ("run_id", "index", "call_id")} == {
        "run_id": run_id, "index": 1, "call_id": "nb1_0"}
    assert inserted.metadata["nbagent"]["approval_event_id"]  # provenance: tests/test_agent_cells.py
    assert inserted.outputs == [] and inserted.execution_count is None  # proposed, not executed
