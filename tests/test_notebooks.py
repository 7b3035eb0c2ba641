"""The notebooks in notebooks/ run offline with `nbagent run`, and say what they are meant to say."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
RUN_MIME = "application/vnd.nbagent.run+json"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("notebooks") / "notebooks"
    shutil.copytree(NOTEBOOKS, dest, ignore=shutil.ignore_patterns("*.nbagent", "report.md", "summary.md",
                                                                   "old.txt", ".env"))
    return dest


def execute(folder: Path, name: str, approve: str, status: int = 0, *extra: str
            ) -> tuple[subprocess.CompletedProcess[str], Any]:
    exe = Path(sys.executable).with_name("nbagent")
    result = subprocess.run([str(exe), "run", name, "--approve", approve, *extra], cwd=folder, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == status, result.stdout + result.stderr
    return result, nbformat.read(folder / name, as_version=4)


def as_told(folder: Path, name: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Run the notebook exactly as its own text says (its "`nbagent run NAME ...` runs it and exits N"), from its
    folder, and check it exits as the text promises."""
    import re
    import shlex

    text = "\n".join(c.source for c in nbformat.read(NOTEBOOKS / name, as_version=4).cells if c.cell_type == "markdown")
    found = re.findall(rf"`(nbagent run {re.escape(name)}[^`]*)` runs it and exits (\d)", text)
    assert len(found) == 1, f"{name} does not say how to run it headless, and with what exit status"
    (command, status), = found
    argv = [str(Path(sys.executable).with_name("nbagent")), *shlex.split(command)[1:]]
    result = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == int(status), result.stdout + result.stderr
    return result, nbformat.read(folder / name, as_version=4)


def streams(nb: Any) -> str:
    return "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o["output_type"] == "stream")


def records(nb: Any) -> list[dict[str, Any]]:
    return [o["data"][RUN_MIME] for c in nb.cells for o in c.get("outputs", []) if RUN_MIME in o.get("data", {})]


def test_every_notebook_but_real_models_is_tested() -> None:
    names = {p.name for p in NOTEBOOKS.glob("*.ipynb")}
    assert names == {"quickstart.ipynb", "autonomy.ipynb", "file-scope.ipynb", "kernel-tools.ipynb",
                     "your-own-tools.ipynb", "replay.ipynb", "real-models.ipynb", "mcp.ipynb",
                     "grants-and-undo.ipynb", "analysis-loop.ipynb"}


@pytest.mark.kernel
def test_quickstart(folder: Path) -> None:
    result, nb = execute(folder, "quickstart.ipynb", "low")
    assert "North** sold the most" in result.stdout and result.stdout.strip().endswith(
        "executed notebook written to " + str(folder / "quickstart.ipynb"))
    read, write = records(nb)
    assert read["status"] == "completed"
    assert [s.get("tool") for s in read["steps"] if s["kind"] == "tool"] == ["read_file"]
    assert write["decisions"][0]["kind"] == "approved" and write["decisions"][0]["by"] == "policy:low"
    assert (folder / "report.md").read_text().startswith("# Top regions by revenue")
    out = streams(nb)
    assert "1. North: 120" in out and "every chain intact" in out and "exit status 0" in out


def test_autonomy_levels_side_by_side(folder: Path) -> None:
    _, nb = as_told(folder, "autonomy.ipynb")  # every proposed write denied, on purpose (exit 1 without the flag)
    outcomes = [o["text"].split() for c in nb.cells for o in c.get("outputs", [])
                if o["output_type"] == "stream" and "read_file" in o["text"]]
    assert outcomes == [
        ["read_file", "rejected", "create_file", "rejected", "delete_file", "rejected"],  # L0
        ["read_file", "ok", "create_file", "rejected", "delete_file", "rejected"],  # L1
        ["read_file", "ok", "create_file", "ok", "delete_file", "rejected"],  # L2
        ["read_file", "ok", "create_file", "ok", "delete_file", "ok"],  # L3
    ]
    assert [r["autonomy"] for r in records(nb)] == ["L0", "L1", "L2", "L3"]


@pytest.mark.kernel
def test_file_scope_denials(folder: Path) -> None:
    # the notebook shows refused calls: its run ends completed_with_errors, which `nbagent run` does not call ok
    result, nb = execute(folder, "file-scope.ipynb", "low", status=1)
    (record,) = records(nb)
    assert record["status"] == "completed_with_errors"
    assert " completed_with_errors " in result.stdout and "--allow-tool-errors" in result.stdout
    out = streams(nb)
    for target, rule in (("'../README.md'", "path_traversal"), ("'.env'", "scope.excluded"),
                         ("'/etc/passwd'", "scope.outside"), ("'..'", "path_traversal")):
        assert any(line.startswith(target) and rule in line for line in out.splitlines()), (target, out)
    assert "sk-not-a-real-key" not in (folder / "file-scope.nbagent" / "events.jsonl").read_text()
    assert "root:x:0" not in (folder / "file-scope.nbagent" / "events.jsonl").read_text()
    # the person who expects refusals says so, as the notebook's text tells: exit 0, the verdict says what was allowed
    allowed, _ = as_told(folder, "file-scope.ipynb")
    assert "ok, with tool errors allowed" in allowed.stdout


def test_kernel_tools_change_the_dataframe(folder: Path) -> None:
    _, nb = as_told(folder, "kernel-tools.ipynb")
    (record,) = records(nb)
    tools = [s.get("tool") for s in record["steps"] if s["kind"] == "tool"]
    assert tools == ["inspect_variable", "run_cell"] and record["plans"][0]["max_risk"] == "WRITE_HIGH_RISK"
    ran = [c for c in nb.cells if (c.metadata.get("nbagent") or {}).get("ran")]
    assert len(ran) == 1 and "df['share']" in ran[0].source  # the agent's cell, written into the notebook
    last = nb.cells[-1].outputs[0]["data"]["text/plain"]
    assert "share" in last and "0.338" in last


@pytest.mark.kernel
def test_your_own_tools(folder: Path) -> None:
    _, nb = execute(folder, "your-own-tools.ipynb", "low")
    (record,) = records(nb)
    results = [s["result_preview"] for s in record["steps"] if s.get("tool") == "growth"]
    assert results == ["20.0", "58.3", "-5.9", "9.1"]
    assert "'description': 'Revenue growth of a region since last year, in percent.'" in str(nb.cells[3].outputs)
    assert "growth" in streams(nb) and "READ_ONLY" in streams(nb)


@pytest.mark.kernel
def test_replay_offline_and_verify(folder: Path) -> None:
    _, nb = execute(folder, "replay.ipynb", "low")
    original, replayed = records(nb)
    assert original["model"] == "nbagent/scripted" and replayed["model"] == "nbagent/replay"
    assert replayed["answer"] == original["answer"] and replayed["status"] == "completed"
    assert "every chain intact" in streams(nb) and "exit status 0" in streams(nb)


@pytest.mark.kernel
def test_mcp_server_offline(folder: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("mcp_server_time") is None:
        pytest.skip("mcp-server-time is not installed: pip install -e '.[test]' installs it")
    _, nb = execute(folder, "mcp.ipynb", "all")
    converted, clock = records(nb)
    assert converted["status"] == "completed" and "**23:30** in Tokyo" in converted["answer"]
    assert [s.get("tool") for s in converted["steps"] if s["kind"] == "tool"] == ["mcp__time__convert_time"]
    assert not converted["decisions"]  # read-only: ran at L1 without asking
    assert clock["status"] == "completed" and clock["decisions"][0]["by"] == "policy:all"
    out = streams(nb)
    assert "[MCP server time; readOnlyHint: true]" in out and "[MCP server clock; \"risk\" in" in out
    assert "tool_call_started mcp__time__convert_time READ_ONLY" in out
    assert "tool_call_started mcp__clock__get_current_time WRITE_HIGH_RISK" in out


@pytest.mark.kernel
def test_grants_and_undo(folder: Path) -> None:
    """A decision "for this run" answers the next write of the same file; then undo removes what the run made."""
    result, nb = execute(folder, "grants-and-undo.ipynb", "none")
    journal, undone = records(nb)[-1], None
    assert journal["status"] == "completed" and journal["totals"]["tool_calls"] == 3
    granted = [s for s in journal["steps"] if s.get("grant_id")]
    assert len(granted) == 1 and granted[0]["detail"].startswith("allowed by grant ")
    assert "ended with its run" in streams(nb) and "removed journal.md" in streams(nb)
    assert not (folder / "journal.md").exists()
    undone = [line for line in result.stdout.splitlines() if "undo run" in line]
    assert undone and "completed" in undone[0]


@pytest.mark.kernel
def test_analysis_loop(folder: Path) -> None:
    """run_cell fails on a wrong column, replace_cell fixes that cell and plots; the agent's variables stay."""
    _, nb = execute(folder, "analysis-loop.ipynb", "all", 0, "--allow-tool-errors")
    (record,) = records(nb)
    # the first cell raised: the record says so, and the run ends with errors (the fix does not unsay it)
    assert record["status"] == "completed_with_errors" and "**North** has the most revenue (120)" in record["answer"]
    tools = [s for s in record["steps"] if s["kind"] == "tool"]
    assert [s["tool"] for s in tools] == ["run_cell", "replace_cell"]
    assert tools[0]["status"] == "failed" and tools[0]["outcome"].startswith("raised KeyError")
    assert tools[1]["status"] == "ok" and tools[1]["outcome"].startswith("replaced and ran [")
    last = nb.cells[-1].outputs[0]["data"]["text/plain"]
    assert "North" in last and "120" in last and "South" in last
    ran = [c for c in nb.cells if (c.metadata.get("nbagent") or {}).get("ran")]
    for c in ran:  # the agent's cell, once `nbagent run` writes it: the fixed code, with its plot
        assert "['revenue']" in c.source and any("image/png" in o.get("data", {}) for o in c.outputs)
