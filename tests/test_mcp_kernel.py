"""MCP servers in a real kernel, through `nbagent run`: mcp.json beside the notebook, `--mcp FILE`, `%agent tools`,
broken servers that never hang the kernel, and a replay of a run that called an MCP tool (docs/mcp.md)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from nbagent.store import Store, store_path_for

pytestmark = pytest.mark.kernel

RUN_MIME = "application/vnd.nbagent.run+json"
BROKEN = str(Path(__file__).parent / "fixtures" / "mcp_broken_server.py")


def notebook(folder: Path, cells: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    path = folder / "analysis.ipynb"
    nbformat.write(nb, path)
    return path


def script(folder: Path, name: str, *turns: dict) -> None:
    (folder / name).write_text(json.dumps({"turns": list(turns)}))


def nbagent_run(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("nbagent")
    # the subprocess timeout is a guard (a hang fails the test), not a timing assertion
    return subprocess.run([str(exe), "run", str(path), *args], capture_output=True, text=True, cwd=path.parent,
                          timeout=400, check=False)


def outputs(cell: dict) -> tuple[str, list[dict]]:
    text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o["output_type"] == "stream")
    records = [o["data"][RUN_MIME] for o in cell.get("outputs", []) if RUN_MIME in o.get("data", {})]
    return text, records


def test_a_real_mcp_server_end_to_end_through_nbagent_run(tmp_path: Path) -> None:
    """mcp.json beside the notebook is read by the kernel `nbagent run` starts; the tool's result is in the record
    and the log; a replay of that run (%%agent --replay) gets the same tools and calls the server again."""
    if importlib.util.find_spec("mcp_server_time") is None:
        pytest.skip("mcp-server-time is not installed: pip install -e '.[test]' installs it")
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"time": {
        "command": "python", "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}}}))
    args = {"source_timezone": "UTC", "time": "14:30", "target_timezone": "Asia/Tokyo"}
    script(tmp_path, "time.json", {"tool_calls": [{"name": "mcp__time__convert_time", "arguments": args}]},
           {"content": "14:30 UTC is 23:30 in Tokyo."})
    path = notebook(tmp_path, [
        "%load_ext nbagent",
        "%agent trust time\n%agent tools",  # a server from a file starts once a person trusted it (docs/mcp.md)
        "%%agent --script time.json\nWhat time is 14:30 UTC in Tokyo?",
        "from nbagent.ipython.entry import current\nrecorded = current().store.list_runs()[-1].id",
        "%%agent --replay $recorded\nWhat time is 14:30 UTC in Tokyo?",
        "print('kernel alive')",
    ])
    result = nbagent_run(path, "--approve", "none")  # nothing to approve: the tool is read-only, L1 runs it
    assert result.returncode == 0, result.stdout + result.stderr
    nb = nbformat.read(path, as_version=4)
    listing, _ = outputs(nb.cells[1])
    row = next(line for line in listing.splitlines() if line.startswith("mcp__time__convert_time"))
    assert row.split()[1] == "READ_ONLY" and "[MCP server time; readOnlyHint: true]" in row
    _, (record,) = outputs(nb.cells[2])
    assert record["status"] == "completed" and record["answer"] == "14:30 UTC is 23:30 in Tokyo."
    step = next(s for s in record["steps"] if s.get("tool") == "mcp__time__convert_time")
    assert "23:30" in json.dumps(step)
    _, (replayed,) = outputs(nb.cells[4])
    assert replayed["status"] == "completed" and replayed["answer"] == "14:30 UTC is 23:30 in Tokyo."
    assert outputs(nb.cells[5])[0] == "kernel alive\n"
    store = Store(store_path_for(path), readonly=True)
    runs = store.list_runs()
    assert [r.model for r in runs] == ["nbagent/scripted", "nbagent/replay"]
    for run in runs:
        done = [e.payload for e in store.run_events(run.id) if e.type == "tool_call_completed"]
        assert [p.tool for p in done] == ["mcp__time__convert_time"]
        assert done[0].result["target"]["datetime"].endswith("T23:30:00+09:00")
        started = next(e.payload for e in store.run_events(run.id) if e.type == "tool_call_started")
        assert started.risk == "READ_ONLY" and started.arguments == args and started.approval_event_id is None


def test_broken_servers_never_hang_the_kernel_and_bad_input_is_one_line(tmp_path: Path) -> None:
    def server(mode: str) -> dict:
        return {"command": sys.executable, "args": [BROKEN, mode], "timeout": 2}

    (tmp_path / "broken.json").write_text(json.dumps({"mcpServers": {
        "crash": server("crash"), "hang": server("hang"), "garbage": server("garbage"), "ok": server("ok"),
        "nostart": server("start-crash")}}))
    (tmp_path / "notjson.json").write_text('{"mcpServers": {"x": }}')
    calls = [{"tool_calls": [{"name": f"mcp__{m}__boom", "arguments": {}}]} for m in ("crash", "hang", "garbage")]
    script(tmp_path, "broken-run.json", *calls,
           {"tool_calls": [{"name": "mcp__ok__fine", "arguments": {"text": "still here"}}]},
           {"content": "Three servers failed; ok answered."})
    script(tmp_path, "plain.json", {"content": "No MCP tools, and that is fine."})
    path = notebook(tmp_path, [
        "%load_ext nbagent",
        "%%agent --mcp broken.json --autonomy L3 --script broken-run.json\nTry every server.",
        "%%agent --mcp notjson.json --script plain.json\nAnything?",
        "print('kernel alive')",
    ])
    result = nbagent_run(path, "--approve", "all", "--allow-tool-errors")
    assert result.returncode == 0, result.stdout + result.stderr
    nb = nbformat.read(path, as_version=4)
    text, (record,) = outputs(nb.cells[1])
    assert record["status"] == "completed_with_errors" and record["answer"] == "Three servers failed; ok answered."
    problem = [line for line in text.splitlines() if "did not start" in line]
    assert len(problem) == 1 and problem[0].startswith("nbagent: MCP server 'nostart'")
    assert "start-crash" in problem[0] and "cannot start (configuration missing)" in problem[0]
    store = Store(store_path_for(path), readonly=True)
    first = store.list_runs()[0]
    failed = {e.payload.tool: e.payload.error for e in store.run_events(first.id) if e.type == "tool_call_failed"}
    assert set(failed) == {"mcp__crash__boom", "mcp__hang__boom", "mcp__garbage__boom"}
    assert "no answer within 2 s" in failed["mcp__hang__boom"]
    done = [e.payload for e in store.run_events(first.id) if e.type == "tool_call_completed"]
    assert [(p.tool, p.result) for p in done] == [("mcp__ok__fine", "fine: still here")]
    text, (plain,) = outputs(nb.cells[2])
    assert plain["status"] == "completed"
    line = next(x for x in text.splitlines() if "notjson.json" in x)
    assert line == f"nbagent: MCP config {tmp_path / 'notjson.json'}: not valid JSON: Expecting value at line 1, " \
                   "column 22"
    assert outputs(nb.cells[3])[0] == "kernel alive\n"
