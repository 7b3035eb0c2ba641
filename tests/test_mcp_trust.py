"""A notebook's MCP servers from files start only after a person trusted that exact entry (issue 23, docs/mcp.md).

The server is tests/fixtures/mcp_marker_server.py: it appends a line to a marker file in the notebook's folder when
it starts, so each test sees whether (and how often) its command ran. Real kernels, through `nbagent run` (each run
is a new kernel: the server starts again if it is trusted) and through a kernel driven as JupyterLab drives it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from kernel_harness import Kernel

from nbagent.store import Store, store_path_for

MARKER_SERVER = str(Path(__file__).parent / "fixtures" / "mcp_marker_server.py")
RUN_MIME = "application/vnd.nbagent.run+json"


def entry(*words: str, marker: str = "started.txt") -> dict[str, Any]:
    return {"command": sys.executable, "args": [MARKER_SERVER, marker, *words], "timeout": 20}


def config(folder: Path, *words: str, name: str = "mcp.json") -> None:
    (folder / name).write_text(json.dumps({"mcpServers": {"marker": entry(*words)}}))


def starts(folder: Path, marker: str = "started.txt") -> list[str]:
    """One line per start of the server, each its words (v1, v2...)."""
    path = folder / marker
    return path.read_text().splitlines() if path.exists() else []


def script(folder: Path, name: str, *turns: dict) -> None:
    (folder / name).write_text(json.dumps({"turns": list(turns)}))


CALL = {"tool_calls": [{"name": "mcp__marker__fine", "arguments": {"text": "hi"}}]}


def notebook(folder: Path, cells: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    path = folder / "analysis.ipynb"
    nbformat.write(nb, path)
    return path


def nbagent_run(path: Path, approve: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("nbagent")
    # the timeout is a guard against a hang, not a timing assertion
    return subprocess.run([str(exe), "run", str(path), "--approve", approve, "--allow-tool-errors"],
                          capture_output=True, text=True, cwd=path.parent, timeout=400, check=False)


def shown(cell: Any) -> list[str]:
    """The lines a cell shows: its streams and the plain text of its displays (not run records)."""
    out: list[str] = []
    for o in cell.get("outputs", []):
        if o["output_type"] == "stream":
            out += o["text"].splitlines()
        elif o["output_type"] in ("display_data", "execute_result") and RUN_MIME not in o["data"]:
            out += str(o["data"].get("text/plain", "")).splitlines()
    return out


def trusts(path: Path) -> list[Any]:
    store = Store(store_path_for(path), readonly=True)
    events = store.query_events(types="mcp_server_trusted")
    assert all(e.run_id is None for e in events)  # in the session's own chain, as grants are
    return [e.payload for e in events]


def tool_results(path: Path) -> list[Any]:
    store = Store(store_path_for(path), readonly=True)
    return [e.payload.result for run in store.run_ids() for e in store.run_events(run)
            if e.type == "tool_call_completed" and e.payload.tool == "mcp__marker__fine"]


@pytest.mark.kernel
def test_approve_none_and_low_never_start_a_server_from_mcp_json(tmp_path: Path) -> None:
    """Was: the first %%agent cell started every command of an mcp.json beside the notebook (a cloned repository's),
    at any autonomy and under any policy."""
    config(tmp_path, "v1")
    script(tmp_path, "s.json", CALL, {"content": "No marker tool here."})
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent --autonomy L0 --script s.json\nhello"])
    for approve in ("none", "low"):
        result = nbagent_run(path, approve)
        assert result.returncode == 0, result.stdout + result.stderr
        assert starts(tmp_path) == [], f"--approve {approve} started the server"
        (line,) = [x for x in shown(nbformat.read(path, as_version=4).cells[1]) if "MCP server" in x]
        assert line.startswith(f"nbagent: MCP server 'marker' ({tmp_path / 'mcp.json'}) was not started: it would "
                               f"run `{sys.executable} {MARKER_SERVER} started.txt v1`, and no one has trusted this "
                               f"entry (--approve {approve} does not: starting a server runs a command")
        assert line.endswith("To trust it: %agent trust marker (or --all); headless: nbagent run --approve all")
    assert trusts(path) == [] and tool_results(path) == []


@pytest.mark.kernel
def test_approve_all_trusts_it_and_only_that_entry_stays_trusted(tmp_path: Path) -> None:
    """`--approve all` trusts (recorded by policy:all); later runs start it under any policy; an edited entry is not
    started again (`none`, `recorded`) until trusted again."""
    config(tmp_path, "v1")
    script(tmp_path, "s.json", CALL, {"content": "Called it."})
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent --script s.json\nhello"])

    assert nbagent_run(path, "all").returncode == 0
    assert starts(tmp_path) == ["v1"]
    (trust,) = trusts(path)
    assert (trust.server, trust.source, trust.by) == ("marker", str(tmp_path / "mcp.json"), "policy:all")
    assert trust.command == f"{sys.executable} {MARKER_SERVER} started.txt v1" and len(trust.digest) == 64
    assert tool_results(path) == ["fine: hi"]

    result = nbagent_run(path, "none")  # a new kernel: the log's trust is in force whatever the policy
    assert result.returncode == 0, result.stdout + result.stderr
    assert starts(tmp_path) == ["v1", "v1"] and tool_results(path) == ["fine: hi"] * 2

    config(tmp_path, "v2")  # one more argument's worth of change: another entry
    for approve in ("none", "recorded"):
        result = nbagent_run(path, approve)
        assert result.returncode == 0, result.stdout + result.stderr
        assert starts(tmp_path) == ["v1", "v1"], f"--approve {approve} started the edited entry"
        (line,) = [x for x in shown(nbformat.read(path, as_version=4).cells[1]) if "MCP server" in x]
        assert "started.txt v2`, and its entry changed since it was trusted" in line
    assert len(trusts(path)) == 1

    assert nbagent_run(path, "all").returncode == 0
    assert starts(tmp_path) == ["v1", "v1", "v2"]
    assert [t.by for t in trusts(path)] == ["policy:all", "policy:all"]
    assert trusts(path)[0].digest != trusts(path)[1].digest


@pytest.mark.kernel
def test_a_trust_that_came_with_the_log_is_not_this_users_and_starts_nothing(tmp_path: Path) -> None:
    """A repository can ship its notebook's log (`NAME.nbagent/`) with a well-chained `mcp_server_trusted` for its own
    mcp.json, or anyone can append one: without this user's seal it answers nothing."""
    from nbagent import mcp
    from nbagent.events.model import McpServerTrusted
    from nbagent.ipython import trust

    config(tmp_path, "v1")
    script(tmp_path, "s.json", CALL, {"content": "No marker tool here."})
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent --script s.json\nhello"])
    loaded = mcp.notebook_config(tmp_path, None)
    (shipped,) = mcp.needs_trust(loaded)
    store = Store(store_path_for(path))
    session = store.session("default", notebook=path.name)
    for forged_seal in (None, "0" * 64, trust.seal("marker", "/elsewhere/mcp.json", shipped.digest)):
        store.append(McpServerTrusted(server="marker", source=shipped.source, digest=shipped.digest,
                                      command=shipped.command, by="%agent trust", seal=forged_seal),
                     session_id=session.id)
    store.close()
    result = nbagent_run(path, "none")
    assert result.returncode == 0, result.stdout + result.stderr
    assert starts(tmp_path) == [], "a trust this user never gave started the server"
    (line,) = [x for x in shown(nbformat.read(path, as_version=4).cells[1]) if "MCP server" in x]
    assert "no one has trusted this entry" in line


@pytest.mark.kernel
def test_agent_trust_in_a_kernel_then_the_cell_starts_it_and_inline_json_needs_no_trust(tmp_path: Path) -> None:
    """As in JupyterLab: the untrusted server is one line shown as a display (not stderr) and the run goes on
    without it; `%agent trust NAME` records the trust and says so; the next %%agent cell starts it. An inline
    `--mcp '{...}'` is the person's own words: it starts without the step."""
    config(tmp_path, "v1")
    script(tmp_path, "plain.json", {"content": "Nothing to call."})
    script(tmp_path, "call.json", CALL, {"content": "Called it."})
    inline = json.dumps({"mcpServers": {"own": entry("inline", marker="inline.txt")}})
    script(tmp_path, "own.json", {"tool_calls": [{"name": "mcp__own__fine", "arguments": {"text": "x"}}]},
           {"content": "Called my own."})
    k = Kernel(tmp_path)
    try:
        assert k.run("%load_ext nbagent", cell_id="c1").ok
        first = k.run("%%agent --script plain.json\nhello", cell_id="c2")
        assert first.ok and first.records[-1]["status"] == "completed", first.stderr
        notes = [text for o in first.outputs if "MCP server" in (text := o.get("data", {}).get("text/plain", ""))]
        assert len(notes) == 1 and "'marker'" in notes[0] and "%agent trust marker" in notes[0]
        assert "MCP server" not in first.stderr and "MCP server" not in first.stdout
        assert starts(tmp_path) == []

        listing = k.run("%agent mcp", cell_id="c3")
        assert "not trusted: %agent trust marker" in listing.stdout and starts(tmp_path) == []
        trusted = k.run("%agent trust marker", cell_id="c4")
        assert trusted.ok and trusted.stdout.startswith(f"trusted MCP server 'marker' ({tmp_path / 'mcp.json'}): ")
        assert starts(tmp_path) == []  # trusting starts nothing: the next run does
        assert "marker           trusted  [" in k.run("%agent mcp", cell_id="c5").stdout
        again = k.run("%agent trust marker", cell_id="c6")
        assert "is trusted already" in again.stdout
        unknown = k.run("%agent trust nosuch", cell_id="c7")
        assert not unknown.ok and "no MCP server 'nosuch'" in unknown.reply["content"]["evalue"]  # type: ignore[index]

        second = k.run("%%agent --script call.json\ncall it", cell_id="c8")
        assert second.ok and second.records[-1]["status"] == "completed", second.stderr
        assert starts(tmp_path) == ["v1"]
        assert not [o for o in second.outputs if "MCP server" in o.get("data", {}).get("text/plain", "")]  # trusted

        own = k.run(f"%%agent --mcp '{inline}' --script own.json\ncall mine", cell_id="c9")
        assert own.ok and own.records[-1]["status"] == "completed", own.stderr
        assert starts(tmp_path, "inline.txt") == ["inline"]
    finally:
        k.close()
    (trust,) = trusts(tmp_path / "test.ipynb")
    assert (trust.server, trust.by) == ("marker", "%agent trust")
    store = Store(tmp_path / "test.nbagent", readonly=True)
    done = [e.payload.tool for r in store.run_ids() for e in store.run_events(r) if e.type == "tool_call_completed"]
    assert done == ["mcp__marker__fine", "mcp__own__fine"]


# ---------------------------------------------------------------------------------------------- the files it runs


def launcher(folder: Path, word: str) -> None:
    """tools/serve.sh: the project's launcher of the marker server (leaving `word` in the marker file)."""
    (folder / "tools").mkdir(exist_ok=True)
    (folder / "tools" / "serve.sh").write_text(f"exec '{sys.executable}' '{MARKER_SERVER}' started.txt {word}\n")


def sh_config(folder: Path) -> None:
    (folder / "mcp.json").write_text(json.dumps({"mcpServers": {"marker": {"command": "sh", "args": ["tools/serve.sh"],
                                                                           "timeout": 20}}}))


@pytest.mark.kernel
def test_a_trust_covers_the_script_the_entry_runs(tmp_path: Path) -> None:
    """Attack h7: the trust covered `sh tools/serve.sh` but not tools/serve.sh, so a rewritten script (the agent's
    low-risk write, a collaborator's pull) started at the next run with the old trust. Now its content is part of
    the trust: an edited script is not started until trusted again, and the line says why."""
    sh_config(tmp_path)
    launcher(tmp_path, "v1")
    script(tmp_path, "s.json", CALL, {"content": "Called it."})
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent --script s.json\nhello"])
    assert nbagent_run(path, "all").returncode == 0
    assert starts(tmp_path) == ["v1"]
    (first,) = trusts(path)
    assert nbagent_run(path, "none").returncode == 0  # the same script: still trusted
    assert starts(tmp_path) == ["v1", "v1"]

    launcher(tmp_path, "v2")  # the entry is the same JSON; the file it runs is not
    for approve in ("none", "recorded"):
        result = nbagent_run(path, approve)
        assert result.returncode == 0, result.stdout + result.stderr
        assert starts(tmp_path) == ["v1", "v1"], f"--approve {approve} started the edited script"
        (line,) = [x for x in shown(nbformat.read(path, as_version=4).cells[1]) if "MCP server" in x]
        assert "would run `sh tools/serve.sh`, and a file it runs changed since it was trusted (tools/serve.sh)" in line
    assert nbagent_run(path, "all").returncode == 0
    assert starts(tmp_path) == ["v1", "v1", "v2"]
    assert [t.digest.split("+")[0] for t in trusts(path)] == [first.digest.split("+")[0]] * 2  # the same entry


@pytest.mark.kernel
def test_writing_a_file_an_entry_runs_is_high_risk(tmp_path: Path) -> None:
    """The other half of h7: the agent's `create_file tools/serve.sh` was WRITE_LOW_RISK (no rule knows the name),
    so `--approve low` wrote the script the next start runs. The host names the files its servers' commands run
    as code: writing one is WRITE_HIGH_RISK, whether the server is trusted yet or not."""
    sh_config(tmp_path)  # the launcher is not there yet (not built, or .gitignored)
    payload = "touch AGENT_SCRIPT_RAN\n"
    script(tmp_path, "s.json", {"tool_calls": [{"name": "create_file",
                                                "arguments": {"path": "tools/serve.sh", "content": payload}}]},
           {"content": "Done."})
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent --autonomy L2 --script s.json\nwrite the launcher"])
    result = nbagent_run(path, "low")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (tmp_path / "tools" / "serve.sh").exists()
    store = Store(store_path_for(path), readonly=True)
    steps = [s for r in store.run_ids() for e in store.run_events(r) if e.type == "plan_proposed"
             for s in e.payload.steps]
    (step,) = [s for s in steps if s.tool == "create_file"]
    assert step.risk == "WRITE_HIGH_RISK"
    assert "serve.sh is code this notebook's settings run later" in (step.risk_reason or "")


def test_the_digest_reads_what_the_entry_runs_inside_the_folder_only(tmp_path: Path, monkeypatch: Any) -> None:
    """What the digest covers, directly: the files of the notebook's folder the command line runs (resolved from its
    cwd: an interpreter's script, code or configuration by name, `--opt=value`, `-m module`), present or not; not
    files outside, not folders, not data files it names (a database it writes would undo the trust at every run);
    a FIFO never blocks it; a file larger than the bound counts by size and time of change."""
    import os

    from nbagent import mcp

    root, outside = tmp_path / "nb", tmp_path / "outside"
    (root / "srv" / "pkg").mkdir(parents=True)
    outside.mkdir()
    (outside / "far.sh").write_text("far")
    cfg = mcp.ServerConfig(command="sh", args=["run.sh", "--config=conf.toml", str(outside / "far.sh"), "-m", "pkg",
                                               ".", "--db", "data.db", "log.txt"], cwd="srv")
    assert [p.relative_to(root).as_posix() for p in mcp.entry_files(cfg, root)] == [
        "srv/run.sh", "srv/conf.toml", "srv/pkg.py", "srv/pkg/__init__.py", "srv/pkg/__main__.py"]
    bare = mcp.entry_digest(cfg, root)
    assert bare == mcp.entry_digest(cfg) and "+" not in bare  # nothing there yet: the entry's JSON alone
    (root / "srv" / "run.sh").write_text("one")
    with_script = mcp.entry_digest(cfg, root)
    assert mcp.entry_part(with_script) == bare and with_script != bare
    (outside / "far.sh").write_text("changed")
    assert mcp.entry_digest(cfg, root) == with_script  # outside the folder: not the agent's to write
    (root / "srv" / "data.db").write_text("rows")
    (root / "srv" / "log.txt").write_text("started")
    assert mcp.entry_digest(cfg, root) == with_script  # data the server writes
    (root / "srv" / "pkg" / "__main__.py").write_text("main")
    (root / "srv" / "run.sh").write_text("two")
    os.mkfifo(root / "srv" / "conf.toml")
    changed = mcp.entry_digest(cfg, root)
    assert changed != with_script and mcp.entry_part(changed) == bare
    monkeypatch.setattr(mcp.trust, "MAX_HASHED", 2)  # a file larger than this counts by its size and time of change
    os.utime(root / "srv" / "run.sh", ns=(10**18, 10**18))
    big = mcp.entry_digest(cfg, root)
    (root / "srv" / "run.sh").write_text("owt")
    os.utime(root / "srv" / "run.sh", ns=(10**18, 10**18))
    assert mcp.entry_digest(cfg, root) == big
    os.utime(root / "srv" / "run.sh", ns=(10**18, 10**18 + 1))
    assert mcp.entry_digest(cfg, root) != big
    loaded = mcp.Loaded(folder=str(root))
    mcp.parse({"mcpServers": {"s": cfg.model_dump()}}, "test", loaded)
    assert mcp.code_files(loaded) == [str(root / n) for n in ("srv/run.sh", "srv/conf.toml", "srv/pkg.py",
                                                              "srv/pkg/__init__.py", "srv/pkg/__main__.py")]


def test_a_secret_named_value_holding_a_command_is_shown_to_the_person_who_trusts(tmp_path: Path) -> None:
    # Was (attack b12): env {"API_TOKEN": "touch HIDDEN_RAN;"} was remembered as a secret, so the trust line and the
    # recorded trust showed `[REDACTED]` wherever that text appeared, hiding part of the command that then ran.
    from nbagent import mcp
    from nbagent.secrets.redactor import Redactor

    cfg = mcp.ServerConfig(command="sh", args=["-c", "echo hi; touch HIDDEN_RAN; exec srv"],
                           env={"API_TOKEN": "touch HIDDEN_RAN;", "DB_PASSWORD": "s3cr3t-Pa55word"})
    shown = Redactor().text(mcp.what_it_runs(cfg))
    assert shown.count("touch HIDDEN_RAN;") == 2 and "s3cr3t-Pa55word" not in shown  # a token-shaped one still goes
