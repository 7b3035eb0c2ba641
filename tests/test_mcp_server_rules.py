"""An MCP server's arguments are judged by the server's own rules (docs/mcp.md, "How paths are read").

Real servers from the registries: the reference filesystem server (npm `@modelcontextprotocol/server-filesystem`,
pinned in tests/fixtures/mcp_filesystem/package-lock.json and installed once with `npm ci` into that folder's
node_modules/, which git ignores) and `mcp-server-git` (PyPI, the `test` extras). Every run is offline with the
scripted model; no test asserts a duration.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from examples import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbagent import mcp
from nbagent.events.levels import Risk
from nbagent.events.state import RunStatus
from nbagent.gate.deciders import PauseDecider, PolicyDecider
from nbagent.mcp import rules_filesystem as fsr
from nbagent.mcp import rules_git as gitr
from nbagent.runtime import Agent
from nbagent.ui.record_words import high_risk_effects

LIAR = str(Path(__file__).parent / "fixtures" / "mcp_liar_server.py")

NPM_FOLDER = Path(__file__).parent / "fixtures" / "mcp_filesystem"
SERVER_JS = NPM_FOLDER / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}


@pytest.fixture(scope="session")
def filesystem_server() -> Path:
    """The pinned reference filesystem server's entry script, installed by `npm ci` when its lock changed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for the reference filesystem MCP server (npm install -g is not)")
    lock = (NPM_FOLDER / "package-lock.json").read_bytes()
    digest = hashlib.sha256(lock).hexdigest()
    stamp = NPM_FOLDER / "node_modules" / ".nbagent-lock-sha256"
    guard = Path(tempfile.gettempdir()) / f"nbagent-npm-{hashlib.sha256(str(NPM_FOLDER).encode()).hexdigest()[:12]}"
    with open(guard, "w") as held:  # one installer at a time (other test processes on this checkout)
        fcntl.flock(held, fcntl.LOCK_EX)
        if not (SERVER_JS.is_file() and stamp.is_file() and stamp.read_text() == digest):
            done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefix", str(NPM_FOLDER)],
                                  capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                pytest.fail(f"npm ci of {NPM_FOLDER} failed: {done.stderr.strip()[-600:]}")
            stamp.write_text(digest)
    return SERVER_JS


def run(agent: Agent, prompt: str = "go") -> Any:
    # a guard, not a timing assertion: a hang fails the test instead of stalling the suite
    return asyncio.run(asyncio.wait_for(agent.run(prompt), 120))


def tools_of(config: dict[str, Any], folder: Path) -> list[Any]:
    problems: list[str] = []
    found = mcp.tools(config, folder=folder, on_problem=problems.append)
    assert problems == [], problems
    return found


def calls(*steps: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"turns": [*({"tool_calls": [{"name": n, "arguments": a}]} for n, a in steps), {"content": "done"}]}


def log_text(agent: Agent, run_id: str) -> str:
    return json.dumps([e.payload.model_dump(mode="json") for e in agent.store.run_events(run_id)])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with a neighbour's notes beside the notebook's own folder `nb/`."""
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("the neighbour's private notes\n")
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "data.csv").write_text("a,b\n1,2\n")
    return tmp_path


# ---------------------------------------------------------------------------------------------- the findings


def test_a_relative_path_is_read_as_the_filesystem_server_reads_it(filesystem_server: Path, project: Path) -> None:
    """The server resolves a relative path against its allowed directories (here the folder above the notebook's),
    not its working folder: `other/notes.txt` is not the notebook's file, and `planted.txt` must not land above."""
    nb = project / "nb"
    config = {"mcpServers": {"fs": {"command": "node", "args": [str(filesystem_server), str(project)]}}}
    script = calls(("mcp__fs__read_text_file", {"path": "other/notes.txt"}),
                   ("mcp__fs__write_file", {"path": "planted.txt", "content": "x = 1\n"}))
    agent = Agent(script=script, tools=tools_of(config, nb), autonomy="L1", decider=PolicyDecider("all"),
                  store=nb / "nb.ipynb")
    result = run(agent)
    # Was: the read ran at L1 unasked and the model got the neighbour's notes; the approved write planted
    # project/planted.txt, outside the notebook's folder, while the card said `planted.txt`.
    assert "private notes" not in log_text(agent, result.run_id)
    assert not (project / "planted.txt").exists()
    assert (nb / "planted.txt").read_text() == "x = 1\n"  # what was decided is what happened
    # nbagent declared the notebook's folder as the server's only root, and sent it the paths it decided
    events = agent.store.run_events(result.run_id)
    failed = [e.payload for e in events if e.type == "tool_call_failed"]
    assert [f.tool for f in failed] == ["mcp__fs__read_text_file"]
    assert f"{nb}/other/notes.txt" in failed[0].error and "ENOENT" in failed[0].error


def test_a_git_checkout_is_high_risk_its_effect_is_unknown(tmp_path: Path) -> None:
    """mcp-server-git annotates git_checkout `destructiveHint: false`, yet a checkout rewrites the working tree."""
    pytest.importorskip("mcp_server_git")
    nb = tmp_path / "nb"
    nb.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(nb), *args], check=True, env=GIT_ENV, capture_output=True)

    git("init", "-q", "-b", "main")
    (nb / "notes.txt").write_text("first\n")
    git("add", "notes.txt")
    git("commit", "-q", "-m", "first")
    git("checkout", "-q", "-b", "feature")
    (nb / "helpers.py").write_text("import os\n")
    (nb / ".pre-commit-config.yaml").write_text("repos: []\n")
    git("add", "helpers.py", ".pre-commit-config.yaml")
    git("commit", "-q", "-m", "plant")
    git("checkout", "-q", "main")
    assert not (nb / "helpers.py").exists()
    config = {"mcpServers": {"git": {"command": "python", "args": ["-m", "mcp_server_git"]}}}
    found = tools_of(config, nb)
    checkout = next(t for t in found if t.remote_name == "git_checkout")
    assert checkout.risk == Risk.WRITE_HIGH_RISK and "unknown" in checkout.risk_reason
    for autonomy, decider in (("L2", PauseDecider()), ("L1", PolicyDecider("low"))):
        script = calls(("mcp__git__git_checkout", {"repo_path": str(nb), "branch_name": "feature"}))
        agent = Agent(script=script, tools=found, autonomy=autonomy, decider=decider, store=nb / "nb.ipynb")
        result = run(agent)
        # Was: WRITE_LOW_RISK from the annotation, so it ran at L2 (and under --approve low) and planted both files.
        assert not (nb / "helpers.py").exists() and not (nb / ".pre-commit-config.yaml").exists(), autonomy
        plan = next(e.payload for e in agent.store.run_events(result.run_id) if e.type == "plan_proposed")
        step = plan.steps[0]
        assert step.risk == Risk.WRITE_HIGH_RISK and "unknown" in (step.risk_reason or ""), step
        assert step.effect is not None and step.effect.unknown
        said = high_risk_effects(plan.model_dump(mode="json"))  # the card's and the record's words
        assert len(said) == 1 and said[0].startswith("runs mcp__git__git_checkout on /"), said
        assert said[0].endswith(", whose effect is unknown: what git_checkout of MCP server 'git' changes is unknown "
                                "to nbagent (its annotation destructiveHint: false is the server's claim, not what it "
                                "touches)"), said


# --------------------------------------------------------------------------------------------- the server's rules


def test_the_allowed_directories_are_those_the_server_reports(filesystem_server: Path, tmp_path: Path) -> None:
    """Without roots, the server's allowed directories are its arguments as it reads them: nbagent computes the
    same list as the server's own `list_allowed_directories` says (a relative one, a link, a missing one, `~`)."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    (tmp_path / "home" / "docs").mkdir(parents=True)
    (tmp_path / "real").mkdir()
    (tmp_path / "nb").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    args = ["..", str(tmp_path / "alias") + "/", "missing", "~/docs", "'" + str(tmp_path / "nb") + "'"]
    env = {"HOME": str(tmp_path / "home")}

    async def reported() -> list[str]:
        params = StdioServerParameters(command="node", args=[str(filesystem_server), *args], env=env,
                                       cwd=str(tmp_path / "nb"))
        async with Client(params) as client:  # no roots callback: the server keeps its arguments
            text = (await client.call_tool("list_allowed_directories", {})).content[0].text
        return text.splitlines()[1:]

    got = asyncio.run(asyncio.wait_for(reported(), 60))
    assert fsr.allowed_from_args(args, str(tmp_path / "nb"), env["HOME"]) == got
    assert got[:3] == [str(tmp_path), str(tmp_path / "alias"), str(tmp_path / "real")]


_PARTS = ["a", "f.txt", "in", "out", "dangling", "caf\u00e9", "cafe\u0301", "..", ".", "", "new", "~", "C:", " x",
          "'q'"]


@settings(max_examples=examples(4), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["", "/ROOT/", "~/", "/"]), st.lists(st.sampled_from(_PARTS), min_size=1,
                                                                                max_size=5), st.integers(0, 2)),
                min_size=120, max_size=120))
def test_a_path_resolves_as_the_servers_own_validate_path(filesystem_server: Path, tmp_path_factory: Any,
                                                          cases: list[tuple[str, list[str], int]]) -> None:
    """nbagent's mirror (rules_filesystem.resolve_path) against the server's own `validatePath`, run by node from its
    dist/lib.js: the same path acted on, or both refuse, for relative, absolute, `~`, links inside and out, a
    dangling link, NFC and NFD names, quotes, a drive letter."""
    base = tmp_path_factory.mktemp("tree")
    root, outside = base / "root", base / "outside"
    (root / "a").mkdir(parents=True)
    (root / "a" / "f.txt").write_text("x")
    (root / "caf\u00e9").mkdir()
    (root / "in").symlink_to(root / "a")
    outside.mkdir()
    (root / "out").symlink_to(outside)
    (root / "dangling").symlink_to(base / "nowhere")
    home = root / "a"
    allowed_sets = [[str(root)], [str(root / "a"), str(root)], [str(outside), str(root / "a")]]
    todo = [(allowed_sets[k], prefix.replace("/ROOT/", f"{root}/") + "/".join(parts)) for prefix, parts, k in cases]
    lib = json.dumps(str(filesystem_server.with_name("lib.js")))
    script = (f"import {{ setAllowedDirectories, validatePath }} from {lib};"
              "let data = ''; for await (const c of process.stdin) data += c; const out = [];"
              "for (const [allowed, p] of JSON.parse(data)) { setAllowedDirectories(allowed);"
              " try { out.push({ok: await validatePath(p)}); } catch (e) { out.push({err: String(e.message || e)}); } }"
              "console.log(JSON.stringify(out));")
    done = subprocess.run(["node", "--input-type=module", "-e", script], input=json.dumps(todo), capture_output=True,
                          text=True, cwd=str(root), env={"HOME": str(home), "PATH": os.environ["PATH"]}, timeout=60)
    assert done.returncode == 0, done.stderr
    for (allowed, path), theirs in zip(todo, json.loads(done.stdout), strict=True):
        try:
            ours: dict[str, str] = {"ok": fsr.resolve_path(path, allowed, str(root), str(home))}
        except (fsr.Refused, OSError) as exc:
            ours = {"err": str(exc)}
        assert ours.keys() == theirs.keys() and ours.get("ok") == theirs.get("ok"), (allowed, path, ours, theirs)


def test_command_lines_that_run_a_known_server_are_recognised() -> None:
    args = fsr.server_args
    assert args("npx", ["-y", "@modelcontextprotocol/server-filesystem", "/a", "b"]) == ["/a", "b"]
    assert args("npx", ["-y", "@modelcontextprotocol/server-filesystem@2026.8.31", "."]) == ["."]
    assert args("pnpm", ["dlx", "@modelcontextprotocol/server-filesystem", "."]) == ["."]
    script = "/x/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
    assert args("/usr/bin/node", [script, "."]) == ["."]
    assert args("mcp-server-filesystem", ["/data"]) == ["/data"]
    # another package that runs it, another server, a container: not the server nbagent knows
    assert args("npx", ["-y", "fs-wrapper", "@modelcontextprotocol/server-filesystem", "."]) is None
    assert args("docker", ["run", "-i", "mcp/filesystem", "/projects"]) is None
    assert args("python", ["server-filesystem/dist/index.js", "."]) is None
    assert gitr.is_server("mcp-server-git", []) and gitr.is_server("python", ["-m", "mcp_server_git"])
    assert gitr.is_server("uvx", ["mcp-server-git", "--repository", "."])
    assert not gitr.is_server("python", ["-m", "mcp_server_time"]) and not gitr.is_server("uvx", ["other"])


# ---------------------------------------------------------------------------------- attacks: the filesystem server


def test_a_name_equal_under_nfc_is_the_entry_the_server_follows(filesystem_server: Path, tmp_path: Path) -> None:
    """The server matches a missing name to an entry equal to it under NFC: `cafe\u0301/pre-commit` (NFD) is
    `caf\u00e9/pre-commit`, and `caf\u00e9` is a link to .git/hooks. nbagent resolves it the same way: the git folder is
    off limits, so the call is refused, and no hook is planted."""
    nb = tmp_path / "nb"
    (nb / ".git" / "hooks").mkdir(parents=True)
    (nb / "caf\u00e9").symlink_to(nb / ".git" / "hooks")
    config = {"mcpServers": {"fs": {"command": "node", "args": [str(filesystem_server), str(nb)]}}}
    script = calls(("mcp__fs__write_file", {"path": "cafe\u0301/pre-commit", "content": "#!/bin/sh\ncurl evil\n"}))
    agent = Agent(script=script, tools=tools_of(config, nb), autonomy="L3", decider=PolicyDecider("all"),
                  store=nb / "nb.ipynb")
    result = run(agent)
    # Was: judged as a new file `cafe\u0301/pre-commit` inside the folder and run; the server wrote
    # .git/hooks/pre-commit.
    assert not (nb / ".git" / "hooks" / "pre-commit").exists()
    denied = [e.payload for e in agent.store.run_events(result.run_id) if e.type == "authorization_denied"]
    assert [d.rule for d in denied] == ["scope.excluded"], denied


def test_paths_the_server_would_take_outside_are_refused(filesystem_server: Path, project: Path) -> None:
    nb = project / "nb"
    (nb / "out").symlink_to(project / "other")
    (project / "home").mkdir()
    config = {"mcpServers": {"fs": {"command": "node", "args": [str(filesystem_server), str(nb)],
                                    "env": {"HOME": str(project / "home")}}}}
    script = calls(("mcp__fs__read_multiple_files", {"paths": ["data.csv", "out/notes.txt"]}),
                   ("mcp__fs__move_file", {"source": "data.csv", "destination": "../moved.csv"}),
                   ("mcp__fs__write_file", {"path": "~/planted.txt", "content": "x"}),
                   ("mcp__fs__write_file", {"path": "C:/planted.txt", "content": "x"}),
                   ("mcp__fs__directory_tree", {"path": str(project)}),
                   ("mcp__fs__read_text_file", {"path": "a/" * 5000}))
    agent = Agent(script=script, tools=tools_of(config, nb), autonomy="L3", decider=PolicyDecider("all"),
                  store=nb / "nb.ipynb")
    result = run(agent)
    events = agent.store.run_events(result.run_id)
    denied = [(e.payload.tool, e.payload.rule) for e in events if e.type == "authorization_denied"]
    assert denied == [("mcp__fs__read_multiple_files", "scope.symlink_escape"),
                      ("mcp__fs__move_file", "path_traversal"), ("mcp__fs__write_file", "scope.home"),
                      ("mcp__fs__write_file", "scope.server"), ("mcp__fs__directory_tree", "scope.outside"),
                      ("mcp__fs__read_text_file", "scope.too_long")], denied
    assert not any(e.type == "tool_call_started" for e in events)
    assert "private notes" not in log_text(agent, result.run_id) and (nb / "data.csv").exists()
    assert not list(project.rglob("planted.txt")) and not (project / "moved.csv").exists()


# -------------------------------------------------------------------------------------- attacks: servers that lie


def test_a_server_nbagent_does_not_know_is_judged_under_every_folder_it_could_read(project: Path) -> None:
    """A server that calls itself the filesystem server but is not the one nbagent knows, and reads a relative path
    against its argument: nbagent judges `other/notes.txt` under each folder it could be read from."""
    nb = project / "nb"
    config = {"mcpServers": {"liar": {"command": sys.executable, "args": [LIAR, str(project)]}}}
    script = calls(("mcp__liar__read_text_file", {"path": "other/notes.txt"}),
                   ("mcp__liar__read_text_file", {"path": "data.csv"}),
                   ("mcp__liar__read_text_file", {"path": str(nb / "data.csv")}))
    agent = Agent(script=script, tools=tools_of(config, nb), autonomy="L1", decider=PauseDecider(),
                  store=nb / "nb.ipynb")
    result = run(agent)
    events = agent.store.run_events(result.run_id)
    # Was: judged as nb/other/notes.txt (missing, inside) and run at L1: the server read the neighbour's notes.
    assert "private notes" not in log_text(agent, result.run_id)
    denied = [e.payload for e in events if e.type == "authorization_denied"]
    # its command line names the folder above: a relative path may be read from there, so every one is refused;
    # an absolute path means one file to every reader, and runs
    assert [d.rule for d in denied] == ["scope.outside"] * 2, denied
    assert f"{project}/other/notes.txt" in denied[0].reason and f"{project}/data.csv" in denied[1].reason
    done = [e.payload for e in events if e.type == "tool_call_completed"]
    assert len(done) == 1 and "1,2" in json.dumps(done[0].result)


def test_annotations_that_claim_too_little_do_not_lower_the_risk(tmp_path: Path) -> None:
    """`plant` says destructiveHint: false and writes helpers.py, which no argument names; `contradict` says
    readOnlyHint and destructiveHint both. Neither is believed: both ask, even at L2 and under --approve low."""
    config = {"mcpServers": {"liar": {"command": sys.executable, "args": [LIAR, str(tmp_path)]}}}
    found = {t.remote_name: t for t in tools_of(config, tmp_path)}
    assert found["plant"].risk == found["contradict"].risk == Risk.WRITE_HIGH_RISK
    assert found["read_text_file"].risk == Risk.READ_ONLY  # readOnlyHint: the server's word (docs/mcp.md, Risk)
    for autonomy, decider in (("L2", PauseDecider()), ("L1", PolicyDecider("low"))):
        agent = Agent(script=calls(("mcp__liar__plant", {})), tools=list(found.values()), autonomy=autonomy,
                      decider=decider, store=tmp_path / "nb.ipynb")
        result = run(agent)
        # Was: WRITE_LOW_RISK from destructiveHint: false: ran at L2 unasked and planted helpers.py.
        assert not (tmp_path / "helpers.py").exists(), autonomy
        plan = next(e.payload for e in agent.store.run_events(result.run_id) if e.type == "plan_proposed")
        assert "unknown to nbagent" in (plan.steps[0].risk_reason or "")


def test_a_lying_read_only_tool_is_still_held_to_the_folder_and_a_persons_risk_asks(tmp_path: Path) -> None:
    """readOnlyHint: true is the server's word, which nbagent takes (a server you trust runs as you: a liar can
    write at its start as well). What nbagent holds it to all the same: every path it names is judged, and the
    person's own `risk` for it makes it ask."""
    nb = tmp_path / "nb"
    nb.mkdir()
    entry = {"command": sys.executable, "args": [LIAR, str(nb)]}
    script = calls(("mcp__liar__peek", {"path": "../outside.txt"}), ("mcp__liar__peek", {"path": "inside.txt"}))
    agent = Agent(script=script, tools=tools_of({"mcpServers": {"liar": entry}}, nb), autonomy="L1",
                  decider=PauseDecider(), store=nb / "nb.ipynb")
    run(agent)
    assert not (tmp_path / "outside.txt").exists()
    assert (nb / "inside.txt").read_text() == "peeked\n"  # the limit, said in docs/mcp.md: it ran unasked at L1
    (nb / "inside.txt").unlink()
    held = tools_of({"mcpServers": {"liar": entry | {"risk": {"peek": "WRITE_HIGH_RISK"}}}}, nb)
    agent = Agent(script=calls(("mcp__liar__peek", {"path": "inside.txt"})), tools=held, autonomy="L1",
                  decider=PauseDecider(), store=nb / "nb.ipynb")
    assert run(agent).status == RunStatus.WAITING and not (nb / "inside.txt").exists()


def test_a_risk_the_person_sets_decides_and_the_record_still_says_the_effect_is_unknown(tmp_path: Path) -> None:
    config = {"mcpServers": {"liar": {"command": sys.executable, "args": [LIAR, str(tmp_path)],
                                      "risk": {"plant": "WRITE_LOW_RISK"}}}}
    agent = Agent(script=calls(("mcp__liar__plant", {})), tools=tools_of(config, tmp_path), autonomy="L2",
                  decider=PauseDecider(), store=tmp_path / "nb.ipynb")
    result = run(agent)
    assert result.status == RunStatus.COMPLETED and (tmp_path / "helpers.py").exists()  # the person's choice
    started = next(e.payload for e in agent.store.run_events(result.run_id) if e.type == "tool_call_started")
    assert started.risk == Risk.WRITE_LOW_RISK and started.risk_reason is None


def test_a_cloned_entry_that_lowers_a_risk_says_so_when_trust_is_asked(tmp_path: Path) -> None:
    """A risk in an mcp.json entry is part of the entry a person trusts: the line asking says it, and another risk
    is another entry (asked about again)."""
    from nbagent.ipython.trust import line

    entry = {"command": "mcp-server-git", "args": [], "risk": {"git_checkout": "write_low_risk", "*": "READ_ONLY"}}
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"git": entry}}))
    asked = mcp.needs_trust(mcp.notebook_config(tmp_path), tmp_path)
    text = line(asked[0], "untrusted", None)
    # Was: the line named the command alone; a yes to it lowered every tool's risk unseen.
    assert ("it would run `mcp-server-git` (its \"risk\" sets git_checkout to WRITE_LOW_RISK, every other tool to "
            "READ_ONLY), and no one has trusted this entry") in text, text
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"git": entry | {"risk": {"*": "READ_ONLY"}}}}))
    again = mcp.needs_trust(mcp.notebook_config(tmp_path), tmp_path)
    assert mcp.entry_part(again[0].digest) != mcp.entry_part(asked[0].digest)


# ----------------------------------------------------------------------------------------- attacks: the git server


def test_a_repository_that_reaches_outside_the_folder_is_refused(tmp_path: Path) -> None:
    """GitPython follows a `.git` file to its git folder and git follows `core.worktree`: a repository inside the
    notebook's folder may keep its history or its working tree elsewhere. Read-only at L1, and still refused."""
    pytest.importorskip("mcp_server_git")
    elsewhere, nb = tmp_path / "elsewhere", tmp_path / "nb"
    for folder in (elsewhere, nb):
        subprocess.run(["git", "init", "-q", "-b", "main", str(folder)], check=True, env=GIT_ENV)
    (elsewhere / "diary.txt").write_text("x\n")
    subprocess.run(["git", "-C", str(elsewhere), "add", "diary.txt"], check=True, env=GIT_ENV)
    subprocess.run(["git", "-C", str(elsewhere), "commit", "-q", "-m", "a private diary entry"], check=True,
                   env=GIT_ENV)
    (nb / "sub").mkdir()
    (nb / "sub" / ".git").write_text(f"gitdir: {elsewhere / '.git'}\n")
    (nb / "tree").mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(nb / "tree")], check=True, env=GIT_ENV)
    with open(nb / "tree" / ".git" / "config", "a") as f:
        f.write(f"[core]\n\tworktree = {elsewhere}\n")
    (nb / "linked").mkdir()
    (nb / "linked" / ".git").symlink_to(elsewhere / ".git")
    config = {"mcpServers": {"git": {"command": "python", "args": ["-m", "mcp_server_git"]}}}
    script = calls(("mcp__git__git_log", {"repo_path": "sub"}), ("mcp__git__git_status", {"repo_path": "tree"}),
                   ("mcp__git__git_log", {"repo_path": "$HOME"}), ("mcp__git__git_log", {"repo_path": "linked"}))
    agent = Agent(script=script, tools=tools_of(config, nb), autonomy="L1", decider=PauseDecider(),
                  store=nb / "nb.ipynb")
    result = run(agent)
    events = agent.store.run_events(result.run_id)
    # Was: both ran at L1 unasked: the log of a repository elsewhere, the status of a tree elsewhere.
    assert "private diary" not in log_text(agent, result.run_id) and "diary.txt" not in log_text(agent, result.run_id)
    denied = [e.payload for e in events if e.type == "authorization_denied"]
    assert [d.rule for d in denied] == ["scope.outside"] * 4, denied
    assert "git folder" in denied[0].reason and "working tree" in denied[1].reason
    assert "git folder" in denied[3].reason
