"""A repository that arrives with its `.git/` (a tarball, a zip of a project) chooses commands git runs: a
read-only tool of `mcp-server-git` must not run them unasked (docs/mcp.md, "Risk").

The real `mcp-server-git` and the real git. Each repository below names a command in its own config (or holds a
hook, or a submodule whose config names one) that writes a marker file if it ever runs. At L1 a read-only call
runs without asking; these calls run code the repository chose, so each is WRITE_HIGH_RISK, the card says why,
and denied, nothing runs. The person's own `risk` for the server's tools does not lower it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nbagent import mcp
from nbagent.events.levels import Risk
from nbagent.gate.deciders import PolicyDecider
from nbagent.mcp import rules_git as gitr
from nbagent.runtime import Agent
from nbagent.ui.record_words import high_risk_effects

pytest.importorskip("mcp_server_git")

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, env=GIT_ENV, capture_output=True)


def repository(path: Path, config: str = "", attributes: str = "") -> Path:
    """A repository with one committed file, its stat then changed (so a status refreshes the index and reads the
    file again, through its filters), `config` appended to its `.git/config`."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "a.txt").write_text("one\n")
    if attributes:
        (path / ".gitattributes").write_text(attributes)
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "first")
    (path / "a.txt").write_text("two\n")  # same size, new contents: a status and a diff read it
    stat = (path / "a.txt").stat()
    os.utime(path / "a.txt", (stat.st_atime + 30, stat.st_mtime + 30))
    if config:
        with open(path / ".git" / "config", "a") as f:
            f.write(config)
    return path


def marker(ran: Path, name: str) -> str:
    return f"touch {ran / name}; false"


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, tuple[str, str]]]:
    """The notebook's folder with one repository per way of naming a command; {name: (tool, what the card
    names)}."""
    base = tmp_path_factory.mktemp("gitattack")
    nb, ran = base / "nb", base / "ran"
    ran.mkdir()
    nb.mkdir()
    cases: dict[str, tuple[str, str]] = {}
    repository(nb / "fsmonitor", f'[core]\n\tfsmonitor = "{marker(ran, "fsmonitor")}"\n')
    cases["fsmonitor"] = ("git_status", "core.fsmonitor")
    repository(nb / "clean", f'[filter "x"]\n\tclean = "{marker(ran, "clean")}"\n', "*.txt filter=x\n")
    cases["clean"] = ("git_status", "filter.x.clean")
    repository(nb / "external", f'[diff]\n\texternal = "{marker(ran, "external")}"\n')
    cases["external"] = ("git_diff_unstaged", "diff.external")
    repository(nb / "textconv", f'[diff "y"]\n\ttextconv = "{marker(ran, "textconv")}"\n', "*.txt diff=y\n")
    cases["textconv"] = ("git_diff_unstaged", "diff.y.textconv")
    # the command in a file the config includes (a tracked file of the tree), and under a conditional include
    repository(nb / "included", "[include]\n\tpath = ../shared.cfg\n")
    (nb / "included" / "shared.cfg").write_text(f'[core]\n\tfsmonitor = "{marker(ran, "included")}"\n')
    cases["included"] = ("git_status", "core.fsmonitor")
    repository(nb / "conditional", '[includeIf "gitdir:**"]\n\tpath = ../cond.cfg\n')
    (nb / "conditional" / "cond.cfg").write_text(f'[CORE]\n\tFSMonitor = "{marker(ran, "conditional")}"\n')
    cases["conditional"] = ("git_status", "core.fsmonitor")
    # a hook git runs when a status writes back the index it refreshed
    repository(nb / "hook")
    hook = nb / "hook" / ".git" / "hooks" / "post-index-change"
    hook.write_text(f"#!/bin/sh\n{marker(ran, 'hook')}\n")
    hook.chmod(0o755)
    cases["hook"] = ("git_status", "post-index-change")
    # a submodule whose own config names the command: a status enters it
    inner = repository(base / "inner")
    git(inner, "checkout", "-q", "--", ".")
    outer = repository(nb / "outer")
    git(outer, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(inner), "sub")
    git(outer, "commit", "-q", "-m", "sub")
    with open(outer / ".git" / "modules" / "sub" / "config", "a") as f:
        f.write(f'[core]\n\tfsmonitor = "{marker(ran, "submodule")}"\n')
    (outer / "sub" / "a.txt").write_text("six\n")
    cases["outer"] = ("git_status", "core.fsmonitor")
    # a repository whose config names nothing
    repository(nb / "plain")
    return nb, ran, cases


def calls(*steps: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"turns": [*({"tool_calls": [{"name": n, "arguments": a}]} for n, a in steps), {"content": "done"}]}


def tools_of(nb: Path, **entry: Any) -> list[Any]:
    problems: list[str] = []
    config = {"mcpServers": {"git": {"command": sys.executable, "args": ["-m", "mcp_server_git"], **entry}}}
    found = mcp.tools(config, folder=nb, on_problem=problems.append)
    assert problems == [], problems
    return found


def test_a_read_only_git_tool_never_runs_a_command_the_repository_chose(
        planted: tuple[Path, Path, dict[str, tuple[str, str]]]) -> None:
    nb, ran, cases = planted
    found = tools_of(nb)
    script = calls(*((f"mcp__git__{tool}", {"repo_path": str(nb / name)}) for name, (tool, _) in cases.items()))
    agent = Agent(script=script, tools=found, autonomy="L1", decider=PolicyDecider("none"), store=nb / "nb.ipynb")
    result = asyncio.run(asyncio.wait_for(agent.run("go"), 120))
    # Was: each ran at L1 without asking (READ_ONLY, as nbagent knows these tools): git ran the repository's
    # fsmonitor, clean filter, external diff, textconv, included config, hook, the submodule's fsmonitor.
    assert sorted(p.name for p in ran.iterdir()) == []
    events = agent.store.run_events(result.run_id)
    plans = [e.payload for e in events if e.type == "plan_proposed"]
    assert len(plans) == len(cases)
    for (name, (tool, named)), plan in zip(cases.items(), plans, strict=True):
        [step] = plan.steps
        assert step.tool == f"mcp__git__{tool}" and step.risk == Risk.WRITE_HIGH_RISK, (name, step)
        assert named in (step.risk_reason or "") and step.effect is not None and step.effect.unknown, (name, step)
        [said] = high_risk_effects(plan.model_dump(mode="json"))  # the card's and the record's words
        assert said.startswith(f"runs mcp__git__{tool} on ") and ", whose effect is unknown: git would run " in said
    assert [e.payload.rule for e in events if e.type == "authorization_denied"] == []  # refused by the person


def test_the_person_s_own_risk_does_not_lower_a_repository_s_command(
        planted: tuple[Path, Path, dict[str, tuple[str, str]]]) -> None:
    """An entry saying every tool of the server only reads (the person's word about the tools) still asks for a
    repository that names a command, and runs a plain repository's status at once."""
    nb, ran, _ = planted
    found = tools_of(nb, risk={"*": "READ_ONLY"})
    script = calls(("mcp__git__git_status", {"repo_path": str(nb / "plain")}),
                   ("mcp__git__git_status", {"repo_path": str(nb / "fsmonitor")}))
    agent = Agent(script=script, tools=found, autonomy="L1", decider=PolicyDecider("none"), store=nb / "own.ipynb")
    result = asyncio.run(asyncio.wait_for(agent.run("go"), 120))
    assert list(ran.iterdir()) == []
    events = agent.store.run_events(result.run_id)
    done = [e.payload for e in events if e.type == "tool_call_completed"]
    assert [d.tool for d in done] == ["mcp__git__git_status"] and "a.txt" in json.dumps(done[0].model_dump())
    [plan] = [e.payload for e in events if e.type == "plan_proposed"]
    assert plan.steps[0].risk == Risk.WRITE_HIGH_RISK and "core.fsmonitor" in (plan.steps[0].risk_reason or "")


def test_reading_the_repository_s_config_runs_nothing_and_a_plain_one_names_nothing(
        planted: tuple[Path, Path, dict[str, tuple[str, str]]]) -> None:
    """nbagent asks git itself for the config (includes as git follows them): that reading runs none of it."""
    nb, ran, cases = planted
    for name in cases:
        why = gitr.commands(str(nb / name), {"HOME": "/nonexistent"}, only_reads=True)
        assert why is not None and cases[name][1] in why, (name, why)
    assert gitr.commands(str(nb / "plain"), {"HOME": "/nonexistent"}, only_reads=True) is None
    assert gitr.commands(str(nb / "missing"), {"HOME": "/nonexistent"}, only_reads=True) is None
    assert list(ran.iterdir()) == []
    # a boolean core.fsmonitor is git's own daemon, not a command; a pre-commit hook is not run by a read
    repo = repository(nb.parent / "daemon", "[core]\n\tfsmonitor = false\n")
    (repo / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (repo / ".git" / "hooks" / "pre-commit").chmod(0o755)
    assert gitr.commands(str(repo), {"HOME": "/nonexistent"}, only_reads=True) is None
    why = gitr.commands(str(repo), {"HOME": "/nonexistent"}, only_reads=False)  # a commit runs it
    assert why is not None and why.endswith("hooks/pre-commit")
