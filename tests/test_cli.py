"""The `nbagent` command: help, tables, timelines, and one-line errors for bad input that change nothing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from helpers import llm, new_run

from nbagent.cli.commands import build_parser, main
from nbagent.events import model as E
from nbagent.store import Store, StoreReadOnly

COMMANDS = ["runs", "show", "verify", "run", "grants", "revoke"]


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    (tmp_path / "analysis.ipynb").write_text("{}")
    store = Store(tmp_path / "analysis.ipynb")
    run = new_run(store, "Load sales.csv and find the top regions", cell_id="cell-1")
    call = store.append(llm(None, [("c1", "read_file", {"path": "sales.csv"})], tokens=(120, 30)), run_id=run)
    started = store.append(E.ToolCallStarted(call_id="c1", tool="read_file", arguments={"path": "sales.csv"},
                                             risk="READ_ONLY"), run_id=run, parent_event_id=call.id)
    store.append(E.ToolCallCompleted(call_id="c1", tool="read_file", duration_ms=2.5, result="region,revenue",
                                     preview="region,revenue"), run_id=run, parent_event_id=started.id)
    store.append(llm("North, East and West.", tokens=(200, 12)), run_id=run)
    store.append(E.AnswerReady(content="North, East and West."), run_id=run)
    store.append(E.Completed(), run_id=run)
    store.close()
    monkeypatch.chdir(tmp_path)
    return tmp_path, run


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_command_has_help(command: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [command, "--help"] if command else ["--help"]
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: nbagent") and (command or "runs") in out


def test_installed_entry_point_runs() -> None:
    exe = Path(sys.executable).with_name("nbagent")
    result = subprocess.run([str(exe), "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and "verify" in result.stdout


def test_runs_table(project, capsys) -> None:
    _, run = project
    code, out, _ = run_cli(capsys, "runs")
    assert code == 0
    header, row = out.strip().splitlines()
    assert header.split() == ["RUN", "SESSION", "CELL", "STATUS", "MODEL", "TOOL", "CALLS", "TOKENS", "COST",
                              "STARTED"]
    assert row.split()[:8] == [run[:12], "default", "cell-1", "completed", "scripted/test", "1", "362", "$0.0020"]


def test_runs_json_and_notebook_path(project, capsys) -> None:
    folder, run = project
    code, out, _ = run_cli(capsys, "runs", str(folder / "analysis.ipynb"), "--json")
    assert code == 0 and json.loads(out)["id"] == run and json.loads(out)["status"] == "completed"


def test_show_timeline_indents_by_cause(project, capsys) -> None:
    _, run = project
    code, out, _ = run_cli(capsys, "show", run[:14])
    assert code == 0
    assert f"run {run}  status completed" in out and "prompt: Load sales.csv" in out
    started = next(line for line in out.splitlines() if "tool_call_started" in line)
    completed = next(line for line in out.splitlines() if "tool_call_completed" in line)
    assert completed.index("tool_call") > started.index("tool_call")
    assert 'read_file(path="sales.csv") [READ_ONLY]' in out
    assert "1 tool call · 2 model calls · 362 tokens" in out and "answer: North, East and West." in out


def test_show_json_is_the_log_as_written(project, capsys) -> None:
    folder, run = project
    code, out, _ = run_cli(capsys, "show", run, "--json")
    events = json.loads(out)
    on_disk = [json.loads(line) for line in (folder / "analysis.nbagent" / "events.jsonl").read_text().splitlines()]
    assert code == 0 and events == [e for e in on_disk if e["run_id"] == run]


def test_verify_ok(project, capsys) -> None:
    code, out, _ = run_cli(capsys, "verify")
    assert code == 0 and out.startswith("ok: ")


# ---------------------------------------------------------------------------------------------- bad input


def assert_one_line_error(code: int, out: str, err: str, *fragments: str) -> None:
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("nbagent: error: ")
    for f in fragments:
        assert f in err, err


def test_unknown_run_id(project, capsys) -> None:
    folder, _ = project
    before = snapshot(folder)
    assert_one_line_error(*run_cli(capsys, "show", "01NOSUCHRUN"), "analysis.nbagent", "no such run",
                          "nbagent runs")
    assert snapshot(folder) == before


def test_store_written_by_a_newer_version(project, capsys) -> None:
    folder, _ = project
    meta = folder / "analysis.nbagent" / "meta.json"
    meta.write_text(json.dumps({"format": "nbagent-store", "version": 7}))
    before = snapshot(folder)
    for command in (["runs"], ["verify"], ["show", "01"]):
        assert_one_line_error(*run_cli(capsys, *command), str(meta), "newer nbagent", "pip install -U nbagent")
    assert snapshot(folder) == before


@pytest.mark.parametrize("make", ["text_file", "folder_without_meta", "garbage_meta", "missing", "bare_folder"])
def test_not_a_store(make: str, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    target = {
        "text_file": tmp_path / "notes.txt",
        "folder_without_meta": tmp_path / "x.nbagent",
        "garbage_meta": tmp_path / "y.nbagent",
        "missing": tmp_path / "nothing.ipynb",
        "bare_folder": tmp_path / "empty",
    }[make]
    if make == "text_file":
        target.write_text("hello")
    elif make == "folder_without_meta":
        target.mkdir()
        (target / "events.jsonl").write_text("")
    elif make == "garbage_meta":
        target.mkdir()
        (target / "meta.json").write_bytes(b"\x00\xff not json")
    elif make == "bare_folder":
        target.mkdir()
    before = snapshot(tmp_path)
    for command in ("runs", "verify"):
        assert_one_line_error(*run_cli(capsys, command, str(target)), str(target))
    assert snapshot(tmp_path) == before


def test_empty_folder_without_path(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert_one_line_error(*run_cli(capsys, "runs"), str(tmp_path), "no agent logs here")


@pytest.fixture
def readonly_disk(tmp_path: Path):
    """A real read-only file system: a tmpfs, filled, then remounted read-only (needs root, as CI has)."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_store_on_a_readonly_disk(readonly_disk: Path, capsys) -> None:
    store = Store(readonly_disk / "nb.ipynb")
    run = new_run(store)
    store.append(E.Completed(), run_id=run)
    store.close()
    os.remove(readonly_disk / "nb.nbagent" / "lock")
    subprocess.run(["mount", "-o", "remount,ro", str(readonly_disk)], check=True)
    before = snapshot(readonly_disk)

    # reading works: the CLI opens stores read-only and takes no lock
    assert run_cli(capsys, "runs", str(readonly_disk))[0] == 0
    assert run_cli(capsys, "show", run, str(readonly_disk))[0] == 0
    assert run_cli(capsys, "verify", str(readonly_disk))[0] == 0
    # writing says so in one line, naming the store and what to do
    with pytest.raises(StoreReadOnly) as exc:
        Store(readonly_disk / "nb.ipynb")
    message = str(exc.value)
    assert "\n" not in message and "nb.nbagent" in message and "Read-only file system" in message
    assert "writable" in message
    with pytest.raises(StoreReadOnly):
        Store(readonly_disk / f"new-{uuid.uuid4().hex}.ipynb")
    assert snapshot(readonly_disk) == before


def test_docs_list_every_event_type_and_command() -> None:
    from nbagent.events.model import PAYLOADS

    docs = Path(__file__).resolve().parents[1] / "docs"
    log_md = (docs / "log.md").read_text()
    assert [t for t in PAYLOADS if f"| `{t}` |" not in log_md] == []
    cli_md = (docs / "cli.md").read_text()
    for command in COMMANDS:
        sub = build_parser()._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
        assert f"## `nbagent {command}" in cli_md
        for action in sub._actions:
            for flag in action.option_strings:
                assert flag in ("-h", "--help") or flag in cli_md, f"{command} {flag} is not documented"


# ---------------------------------------------------------------------------------------------- nbagent run: bad input


def _notebook_json(version: int) -> str:
    if version == 3:
        return json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": []}]})
    return json.dumps({"nbformat": version, "nbformat_minor": 0, "metadata": {}, "cells": []})


RUN_BAD_INPUT = {  # name -> (file, content or None for a folder / nothing, what the line says)
    "text file": ("notes.txt", "hello\n", "not a notebook (an .ipynb file)"),
    "not JSON": ("broken.ipynb", "{not json\n", "not a notebook: its text is not JSON (line 1, column 2"),
    "JSON, not a notebook": ("list.ipynb", "[1, 2]", "not a notebook: JSON without an nbformat version"),
    "missing": ("missing.ipynb", None, "no such file"),
    "folder": ("folder.ipynb", "", "a folder, not a notebook"),
    "nbformat 3": ("old.ipynb", _notebook_json(3), "a notebook of nbformat 3; nbagent runs nbformat 4: convert it"),
    "nbformat 5": ("new.ipynb", _notebook_json(5), "a notebook of nbformat 5, newer than the nbformat 4"),
    "cells not objects": ("cells.ipynb", json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                                                     "cells": [1, 2]}), "not a notebook nbagent can read"),
}


@pytest.mark.parametrize("case", list(RUN_BAD_INPUT))
def test_run_refuses_what_is_not_a_notebook_in_one_line(case: str, tmp_path: Path, monkeypatch, capsys) -> None:
    """docs/cli.md: bad input is one line on stderr naming the file, exit 2, before any kernel starts; the file is
    left as it was (an nbformat 3 notebook was executed and written back as nbformat 4)."""
    monkeypatch.chdir(tmp_path)
    name, content, says = RUN_BAD_INPUT[case]
    if content == "":
        (tmp_path / name).mkdir()
    elif content is not None:
        (tmp_path / name).write_text(content)
    before = snapshot(tmp_path)
    assert_one_line_error(*run_cli(capsys, "run", name), f"nbagent: error: {name}: {says}")
    assert snapshot(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [name] if content is not None else [])


def test_run_refuses_an_output_in_a_folder_that_does_not_exist(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nb.ipynb").write_text(_notebook_json(4))
    assert_one_line_error(*run_cli(capsys, "run", "nb.ipynb", "-o", "nowhere/out.ipynb"),
                          "nowhere/out.ipynb: the output is in a folder that does not exist")


# ---------------------------------------------------------------------------------------------- who writes


def test_help_and_docs_say_the_same_about_which_commands_write(capsys) -> None:
    """--help and docs/cli.md say one thing (cli.WHO_WRITES): runs, show, verify and grants read; run, undo and
    revoke write. Before, --help said the commands "read and check the logs" and cli.md called undo "the one command
    that writes"."""
    from nbagent.cli.commands import READS, WHO_WRITES, WRITES

    assert set(READS) | set(WRITES) == set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    assert WHO_WRITES in " ".join(capsys.readouterr().out.split())
    cli_md = " ".join((Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text().split())
    assert WHO_WRITES in cli_md.replace("`", "")
    for wrong in ("one command that writes", "the only commands that write", "These commands only read"):
        assert wrong not in cli_md


def test_the_reading_commands_change_nothing(project, capsys) -> None:
    from nbagent.cli.commands import READS

    folder, run = project
    before = snapshot(folder)
    for command in READS:
        code, _, _ = run_cli(capsys, command, *([run] if command == "show" else []))
        assert code == 0, command
    assert snapshot(folder) == before
