"""`nbagent run`: a notebook executed headlessly leaves static records in every %%agent cell and a summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

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


def nbagent(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("nbagent")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, cwd=cwd, timeout=300, check=False,
                          env=env)


@pytest.mark.kernel
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


@pytest.mark.kernel
def test_run_fails_when_a_run_fails_or_a_cell_errors(tmp_path: Path) -> None:
    script(tmp_path, "short.json", {"tool_calls": [{"name": "read_file", "arguments": {"path": "x"}}]})
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent --script short.json\nkeep going"])
    result = nbagent("run", str(path), cwd=tmp_path)
    assert result.returncode == 1 and "failed" in result.stdout and "FAILED: 1 run(s)" in result.stdout
    path = notebook(tmp_path, ["1 / 0"])
    result = nbagent("run", str(path), cwd=tmp_path)
    assert result.returncode == 1 and "ZeroDivisionError" in result.stderr


@pytest.mark.kernel
def test_denied_by_default_headless_policy(tmp_path: Path) -> None:
    script(tmp_path, "write.json", {"tool_calls": [{"name": "create_file",
                                                    "arguments": {"path": "r.md", "content": "x"}}]},
           {"content": "Not written."})
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent --script write.json\nwrite r.md"])
    result = nbagent("run", str(path), cwd=tmp_path)
    assert not (tmp_path / "r.md").exists()
    state = Store(tmp_path / "analysis.nbagent", readonly=True)
    run = state.list_runs()[-1]
    assert state.run_state(run.id).decisions[0].by == "policy:none"
    # a denied plan ends completed_with_errors and fails the run (docs/cli.md): its answer may claim the write
    assert result.returncode == 1 and run.status.value == "completed_with_errors", result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("FAILED: 1 run(s), 1 completed_with_errors")


@pytest.mark.kernel
def test_missing_notebook_is_a_clear_error(tmp_path: Path) -> None:
    result = nbagent("run", "nope.ipynb", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == "nbagent: error: nope.ipynb: no such file; pass the path of a notebook (.ipynb)\n"


@pytest.mark.kernel
def test_a_text_file_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """`nbagent run notes.txt` printed nbformat's 40-line traceback and exited 1."""
    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "broken.ipynb").write_text("{not json\n")
    for name in ("notes.txt", "broken.ipynb"):
        result = nbagent("run", name, cwd=tmp_path)
        assert result.returncode == 2 and result.stdout == "", result.stderr
        assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"nbagent: error: {name}: not a notebook")


@pytest.mark.kernel
def test_unknown_variable_fails_the_cell_and_the_run(tmp_path: Path) -> None:
    script(tmp_path, "s.json", {"content": "never asked"})
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent --script s.json\nSummarise {nosuchvar}",
                               "print('not reached')"])
    result = nbagent("run", str(path), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "a cell failed: UnknownVariable: %%agent: {nosuchvar} is not a variable of this notebook" in result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("FAILED: 0 run(s)")
    executed = nbformat.read(path, as_version=4)
    assert executed.cells[2].outputs == []  # execution stopped at the failing cell


def tool_error_notebook(folder: Path) -> Path:
    """Two runs; the second's create_file finds report.md already there, and its scripted answer claims it wrote
    the file anyway (what README's quickstart did when run twice in one folder)."""
    (folder / "report.md").write_text("an older report\n")
    script(folder, "read.json", {"content": "Nothing to read."})
    script(folder, "write.json", {"tool_calls": [{"name": "create_file",
                                                  "arguments": {"path": "report.md", "content": "# new\n"}}]},
           {"content": "Wrote report.md."})
    return notebook(folder, ["%load_ext nbagent", "%%agent --script read.json\nanything?",
                             "%%agent --script write.json\nwrite report.md"])


@pytest.mark.kernel
def test_a_run_whose_tools_failed_is_not_reported_as_ok(tmp_path: Path) -> None:
    path = tool_error_notebook(tmp_path)
    result = nbagent("run", str(path), "--approve", "all", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    first, second, verdict = result.stdout.strip().splitlines()
    assert " completed " in first
    assert " completed_with_errors " in second and "1 tool error(s): create_file:" in second
    assert "already exists" in second and "answer: Wrote report.md." in second
    assert verdict.startswith("FAILED: 2 run(s), 1 completed_with_errors") and "--allow-tool-errors" in verdict
    assert (tmp_path / "report.md").read_text() == "an older report\n"


@pytest.mark.kernel
def test_allow_tool_errors_accepts_them_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from nbagent.cli.run import main_run

    path = tool_error_notebook(tmp_path)
    args = argparse.Namespace(notebook=str(path), output=None, approve="all", model=None, timeout=300,
                              allow_tool_errors=True)
    assert main_run(args) == 0
    verdict = capsys.readouterr().out.strip().splitlines()[-1]
    assert verdict.startswith("ok, with tool errors allowed: 2 run(s), 1 completed_with_errors")
    # the flag never hides a run that did not finish
    script(tmp_path, "short.json", {"tool_calls": [{"name": "read_file", "arguments": {"path": "x"}}]})
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent --script short.json\nkeep going"])
    assert main_run(argparse.Namespace(**{**vars(args), "notebook": str(path)})) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("FAILED: 1 run(s)")


@pytest.mark.kernel
def test_a_run_continued_in_a_later_cell_has_one_record_everywhere(tmp_path: Path) -> None:
    """The run waits in cell 2 (nobody can answer headless: the cell fails, tagged raises-exception), `%agent
    approve` continues it in cell 3: the executed notebook shows the final record in both cells."""
    script(tmp_path, "write.json", {"tool_calls": [{"name": "create_file",
                                                    "arguments": {"path": "report.md", "content": "# r\n"}}]},
           {"content": "Wrote report.md."})
    path = notebook(tmp_path, ["%load_ext nbagent", "%agent config approve=",  # no policy: ask (nobody can)
                               "%%agent --script write.json\nwrite report.md", "%agent approve"])
    nb = nbformat.read(path, as_version=4)
    nb.cells[2].metadata["tags"] = ["raises-exception"]
    nbformat.write(nb, path)
    result = nbagent("run", str(path), "-o", "out.ipynb", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    (line, verdict) = result.stdout.strip().splitlines()
    assert " completed " in line and verdict.startswith("ok: 1 run(s)")
    executed = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    started, continued = ([o for o in c.outputs if RUN_MIME in o.get("data", {})] for c in executed.cells[2:4])
    assert len(started) == len(continued) == 1
    assert started[0]["data"] == continued[0]["data"]
    assert started[0]["data"][RUN_MIME]["status"] == "completed"
    assert "HeadlessDecisionError" in str(executed.cells[2].outputs)  # why the first cell stopped stays shown
    note = next(o for o in executed.cells[3].outputs if "nbagent-continues" in o.get("data", {}).get("text/html", ""))
    run_id = started[0]["data"][RUN_MIME]["run_id"]
    assert note["data"]["text/plain"].startswith(f"↪ continues run {run_id} from cell [")


def test_latest_records_replaces_older_records_of_a_run() -> None:
    """What the runner does for outputs no display id links (made by an earlier kernel, say)."""
    from nbagent.cli.run import latest_records

    def out(run_id: str, revision: int, status: str) -> dict:
        return {"output_type": "display_data", "metadata": {},
                "data": {"text/plain": status, RUN_MIME: {"run_id": run_id, "revision": revision, "status": status}}}

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("a"), nbformat.v4.new_code_cell("b"), nbformat.v4.new_code_cell("c")]
    nb.cells[0].outputs = [nbformat.from_dict(out("R1", 9, "interrupted")), nbformat.from_dict(out("R2", 4, "done"))]
    nb.cells[1].outputs = [nbformat.from_dict(out("R1", 15, "completed"))]
    nb.cells[2].outputs = [nbformat.from_dict(out("R1", 12, "waiting"))]
    assert latest_records(nb) == 2
    assert [c.outputs[0]["data"][RUN_MIME]["status"] for c in nb.cells] == ["completed"] * 3
    assert nb.cells[0].outputs[0]["data"]["text/plain"] == "completed"
    assert nb.cells[0].outputs[1]["data"][RUN_MIME]["status"] == "done"  # another run: untouched
    assert latest_records(nb) == 0


# ------------------------------------------------------------------------------------------ what the lines say


# an error whose traceback is empty: nbclient's message then ends with the row of dashes after the cell's output
SILENT = "class Silent(Exception):\n    def _render_traceback_(self):\n        return []"


@pytest.mark.kernel
@pytest.mark.parametrize("cells,line", [
    (["%load_ext nbagent", "%%agent --bogus\nWhich region sold most?"],
     "a cell failed: UsageError: %%agent: unrecognized arguments: --bogus"),
    ([SILENT, "print('loading')\nraise Silent('no data yet')"],
     "a cell failed: Silent: no data yet"),
])
def test_a_cell_failed_quotes_the_errors_own_line(tmp_path: Path, cells: list[str], line: str) -> None:
    """The error's own line (`ename: evalue`, first line), not the last line of the traceback text: before, an
    argparse usage fragment (`               [--script SCRIPT] [--mcp FILE]`) or `------------------`."""
    path = notebook(tmp_path, cells)
    result = nbagent("run", str(path), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [line], result.stderr


def run_env() -> dict[str, str]:
    """No API key of any provider, no default model: what a newcomer's shell has."""
    import os

    keys = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_API_BASE")
    return {k: v for k, v in os.environ.items() if k not in keys and not k.startswith("NBAGENT_")}


@pytest.mark.kernel
def test_a_missing_api_key_fails_the_run_at_once_naming_the_variable(tmp_path: Path) -> None:
    """`--model openai/gpt-4o-mini` without OPENAI_API_KEY: "failed after 4 retries: InternalServerError" (12.8 s)
    before; now an authentication error, not retried, saying which variable to set. No network is needed: the
    provider's client refuses before any request."""
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent\nWhich region sold most?"])
    result = nbagent("run", str(path), "--model", "openai/gpt-4o-mini", cwd=tmp_path, env=run_env())
    assert result.returncode == 1, result.stdout + result.stderr
    run_line, verdict = result.stdout.strip().splitlines()
    assert " failed " in run_line and verdict.startswith("FAILED: 1 run(s)")
    assert run_line.endswith("model call to openai/gpt-4o-mini failed (not retried): AuthenticationError: no API "
                             "key: OPENAI_API_KEY is not set; set it where the kernel (or `nbagent run`) starts, or "
                             "pass Agent(api_key=...)"), run_line
    store = Store(tmp_path / "analysis.nbagent", readonly=True)
    (run_id,) = store.run_ids()
    error = [e for e in store.run_events(run_id) if e.type == "error"][-1].payload
    assert (error.error_type, error.retry_count) == ("AuthenticationError", 0)


@pytest.mark.kernel
def test_an_error_line_keeps_the_message_and_drops_litellms_wrapper(tmp_path: Path) -> None:
    """`…BadRequestError: litellm.BadRequestError: LLM Provider NOT p…` before: the class twice and litellm's
    prefix, cut before what is wrong. The summary line and the run's recorded error keep the message, which names
    the provider not recognised (nbagent/models/errors.py)."""
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent --model nosuchprovider/model\nWhich region?"])
    result = nbagent("run", str(path), cwd=tmp_path, env=run_env())
    assert result.returncode == 1, result.stdout + result.stderr
    run_line = result.stdout.strip().splitlines()[0]
    store = Store(tmp_path / "analysis.nbagent", readonly=True)
    (run_id,) = store.run_ids()
    recorded = store.run_state(run_id).error
    assert recorded is not None and recorded.startswith(
        "model call to nosuchprovider/model failed (not retried): BadRequestError: 'nosuchprovider' in "
        "nosuchprovider/model is")
    assert "litellm.BadRequestError" not in recorded and recorded.count("BadRequestError") == 1
    assert run_line.endswith(recorded), run_line  # the whole message, in the summary line too
