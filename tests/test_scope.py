"""The file scope under attack: a corpus of hostile paths against every file tool, and a property test.

Every hostile path must be refused with a reason, by the runtime's check before the tool runs and by the
tool itself when called directly; no byte of a file outside the folder may appear in a result or in the log.
"""

from __future__ import annotations

import asyncio
import json
import os
import string
from pathlib import Path
from typing import Any

import pytest
from examples import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbagent.gate.policy import Budget
from nbagent.runtime import Agent
from nbagent.scope.rules import Scope, ScopeDenied, ScopeGuard
from nbagent.tools.base import ToolError
from nbagent.tools.files import FileTools

CANARY = "CANARY-OUTSIDE-7f3a9c"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A notebook folder full of traps, next to an outside folder holding a canary."""
    base = tmp_path_factory.mktemp("world")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{CANARY} outside file\n")
    (outside / "nested").mkdir()
    (outside / "nested" / "deep.txt").write_text(f"{CANARY} deep\n")
    root = base / "notebook"
    root.mkdir()
    (root / "analysis.ipynb").write_text("{}")
    (root / "data.csv").write_text("region,revenue\nNorth,10\n")
    (root / "sub").mkdir()
    (root / "sub" / "notes.txt").write_text("inside notes\n")
    for folder, name, text in [(".git", "config", "[core]"), (".ssh", "id", "KEY"), (".aws", "credentials", "K"),
                               (".jupyter", "jupyter_server_config.py", "c"),
                               ("analysis.nbagent", "events.jsonl", "{}"), ("sub/.git", "HEAD", "ref")]:
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / name).write_text(text)
    for name in (".env", ".env.local", "id_rsa", "key.pem", "server.key", "credentials.json", ".netrc",
                 "my_secret.txt"):
        (root / name).write_text(f"{name} contents")
    os.symlink(outside / "secret.txt", root / "link_file_out")
    os.symlink(outside, root / "link_dir_out")
    os.symlink("/etc", root / "link_etc")
    os.symlink(root / "loop_b", root / "loop_a")
    os.symlink(root / "loop_a", root / "loop_b")
    os.symlink("self_loop", root / "self_loop")
    os.symlink(".git/config", root / "link_to_git")
    os.symlink("/dev/zero", root / "dev_link")
    os.symlink("../outside/secret.txt", root / "sub" / "relative_out")
    os.link(outside / "secret.txt", root / "hardlink_out")
    os.mkfifo(root / "pipe")
    return {"base": base, "root": root, "outside": outside}


def hostile(w: dict[str, Path]) -> list[Any]:
    out = str(w["outside"])
    cases: list[Any] = []
    # .. chains, plain and disguised
    cases += ["../" * n + "etc/passwd" for n in range(1, 11)]
    cases += ["..", "../", "../outside/secret.txt", "./../outside/secret.txt", "sub/../../outside/secret.txt",
              "sub/./../../outside", "data.csv/../../outside/secret.txt", "sub/../sub/../../outside/secret.txt",
              "./././../outside", "sub/../..", "../notebook/../outside/secret.txt", "sub//../../outside/secret.txt",
              "../outside/nested/deep.txt", "sub/../../outside/nested/../secret.txt", "....//....//etc/passwd"[:0]
              or "../../../../../../../../../../../../etc/shadow"]
    # absolute paths
    cases += ["/etc/passwd", "/etc/shadow", "/etc", "/", "//etc/passwd", "/./etc/passwd", "/proc/self/environ",
              "/proc/self/cmdline", "/root/.ssh/id_rsa", "/tmp", f"{out}/secret.txt", out,
              f"{w['root']}/../outside/secret.txt", f"{w['root']}/sub/../../outside/secret.txt",
              f"{w['root']}/link_file_out", "/var/log/syslog"]
    # home
    cases += ["~", "~/", "~/.ssh/id_rsa", "~root/.bashrc", "~/.bash_history", "~user/x"]
    # symbolic links out, in loops, to excluded or special files
    cases += ["link_file_out", "link_dir_out", "link_dir_out/secret.txt", "link_dir_out/nested/deep.txt",
              "link_dir_out/../outside/secret.txt", "link_etc/passwd", "link_etc", "loop_a", "loop_b", "loop_a/x",
              "self_loop", "self_loop/x", "link_to_git", "dev_link", "sub/relative_out", "./link_file_out",
              "sub/../link_file_out"]
    # a hard link to an outside file
    cases += ["hardlink_out", "./hardlink_out", "sub/../hardlink_out"]
    # unicode look-alikes, invisible characters and normalisation tricks
    cases += ["\uff0e\uff0e/outside/secret.txt", "\u2024\u2024/outside/secret.txt", "..\uff0foutside\uff0fsecret.txt",
              "..\u2215outside\u2215secret.txt", "\u2044etc\u2044passwd", "\u2025/outside/secret.txt",
              "..\u200b/outside/secret.txt", "\u202e../outside", "\ufeff../outside", "data\u200d.csv",
              ".\uff45nv", ".\uff47it/config", "\uff49d_rsa", "key.\uff50em", "\uff5e/.ssh/id_rsa",
              "\u3002\u3002/outside", "..\ufe52/outside", "sub\u2216..\u2216..", "..\u0338/outside", ".\u0337./outside"]
    # NUL and control characters
    cases += ["data.csv\x00.txt", "\x00", "../\x00", "a\x00/../../x", "data.csv\n", "\ttab", "\x1b[31mred",
              "a\rb", "sub\x7f"]
    # very long names
    cases += ["a" * 256, "a/" * 2100, ("x" * 255 + "/") * 20, "é" * 200, "../" * 1500 + "etc/passwd"]
    # devices and FIFOs
    cases += ["pipe", "./pipe", "/dev/zero", "/dev/random", "/dev/null", "/dev/stdin", "/proc/self/mem"]
    # excluded: the store, version control, secrets
    cases += [".git/config", ".git", ".git/", "sub/.git/HEAD", ".env", ".env.local", "id_rsa", "key.pem",
              "server.key", ".ssh/id", ".ssh", ".aws/credentials", ".jupyter/jupyter_server_config.py",
              "analysis.nbagent/events.jsonl", "analysis.nbagent", "credentials.json", ".netrc", "my_secret.txt",
              "sub/../.env", "./.git/config"]
    # case tricks
    cases += [".GIT/config", ".Git/CONFIG", ".ENV", ".Env.Local", "ID_RSA", "Key.PEM", "SERVER.KEY", ".SSH/id",
              "ANALYSIS.NBAGENT/events.jsonl", "Analysis.Nbagent", ".AWS/credentials", "Credentials.JSON",
              "MY_SECRET.TXT", ".NETRC"]
    # backslashes and non-strings
    cases += ["..\\outside\\secret.txt", "sub\\..\\..\\outside", "\\etc\\passwd", "", " ", None, 5, ["a"], {"p": 1}]
    return cases


TOOLS = ["list_files", "read_file", "search_content", "get_file_metadata", "create_file", "write_file",
         "delete_file"]


def args_for(tool: str, path: Any) -> dict[str, Any]:
    if tool == "search_content":
        return {"pattern": "CANARY", "path": path}
    if tool in ("create_file", "write_file"):
        return {"path": path, "content": "overwritten by the agent"}
    return {"path": path}


def snapshot(folder: Path) -> dict[str, bytes]:
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and not p.is_symlink() and not p.is_fifo():
            out[str(p)] = p.read_bytes()
    return out


def test_corpus_is_big_enough(world: dict[str, Path]) -> None:
    assert len(hostile(world)) >= 150


@pytest.mark.parametrize("tool", TOOLS)
def test_every_hostile_path_is_denied_by_every_tool_called_directly(tool: str, world: dict[str, Path]) -> None:
    ft = FileTools(Scope(root=world["root"], base=world["root"]))
    fn = getattr(ft, tool)
    before = snapshot(world["base"])
    for path in hostile(world):
        with pytest.raises(ToolError) as exc:
            fn(**args_for(tool, path))
            pytest.fail(f"{tool}({path!r}) was allowed")
        assert str(exc.value), f"{tool}({path!r}) was denied without a reason"
        assert CANARY not in str(exc.value)
    assert snapshot(world["base"]) == before  # nothing written, nothing deleted, inside or out


@pytest.mark.parametrize("tool", TOOLS)
def test_every_hostile_path_is_denied_through_the_runtime(tool: str, world: dict[str, Path],
                                                          tmp_path: Path) -> None:
    """The same corpus as tool calls from a model at L3 (nothing asks first): each one an event with a reason."""
    ft = FileTools(Scope(root=world["root"], base=world["root"]))
    corpus = hostile(world)
    calls = [{"id": f"c{i}", "name": tool, "arguments": json.dumps(args_for(tool, p))} for i, p in enumerate(corpus)]

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        return {"tool_calls": calls} if messages[-1]["role"] == "user" else "done"

    before = snapshot(world["base"])
    agent = Agent(function=model, tools=ft.tools(), autonomy="L3", store=tmp_path / "nb.ipynb",
                  budget=Budget(max_tool_calls_per_turn=1000, max_steps=None))
    result = asyncio.run(agent.run("touch everything"))
    events = agent.store.run_events(result.run_id)
    by_call: dict[str, list[Any]] = {}
    for e in events:
        call_id = getattr(e.payload, "call_id", None)
        if call_id:
            by_call.setdefault(call_id, []).append(e)
    for i, path in enumerate(corpus):
        kinds = [e.type for e in by_call.get(f"nb1_{i}", [])]
        assert "tool_call_completed" not in kinds, f"{tool}({path!r}) ran: {kinds}"
        denial = next(e for e in by_call[f"nb1_{i}"] if e.type in ("authorization_denied", "tool_call_failed"))
        reason = getattr(denial.payload, "reason", None) or getattr(denial.payload, "error", "")
        assert reason, f"{tool}({path!r}) denied without a reason"
    log_bytes = b"".join(p.read_bytes() for p in agent.store.path.iterdir() if p.is_file())
    assert CANARY.encode() not in log_bytes and b"root:x:0" not in log_bytes
    assert CANARY not in json.dumps(agent.store.run_state(result.run_id).messages)
    assert snapshot(world["base"]) == before


def test_ordinary_paths_still_work(world: dict[str, Path]) -> None:
    ft = FileTools(Scope(root=world["root"], base=world["root"]))
    assert ft.read_file("data.csv")["content"].startswith("region")
    assert ft.read_file(str(world["root"] / "sub" / "notes.txt"))["content"] == "inside notes\n"
    assert ft.read_file("sub/../data.csv")["path"] == "data.csv"
    listing = [e["path"] for e in ft.list_files(".", depth=2)["entries"]]
    assert "data.csv" in listing and "sub/notes.txt" in listing
    assert not [p for p in listing if "git" in p.lower() or "secret" in p or "link" in p or "nbagent" in p]
    assert ft.search_content("CANARY")["matches"] == []


def test_root_above_the_notebook_folder_needs_an_explicit_setting(world: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="outside the notebook's folder"):
        ScopeGuard(Scope(root=world["base"], base=world["root"]))
    ScopeGuard(Scope(root=world["base"], base=world["root"], allow_outside_base=True))
    ScopeGuard(Scope(root=world["root"] / "sub", base=world["root"]))  # a subfolder is fine


def test_operations_include_and_file_types_are_switchable(world: dict[str, Path]) -> None:
    ro = FileTools(Scope(root=world["root"], operations={"read", "list"}))
    with pytest.raises(ScopeDenied, match="create is switched off"):
        ro.create_file("new.txt", "x")
    only_sub = FileTools(Scope(root=world["root"], include=["sub/**"]))
    with pytest.raises(ScopeDenied) as exc:
        only_sub.read_file("data.csv")
    assert exc.value.rule == "include"
    assert only_sub.read_file("sub/notes.txt")["content"]
    csv_only = FileTools(Scope(root=world["root"], file_types=[".csv"]))
    with pytest.raises(ScopeDenied, match=r"only \.csv files"):
        csv_only.read_file("sub/notes.txt")
    extra = FileTools(Scope(root=world["root"], exclude=["sub/"]))
    with pytest.raises(ScopeDenied) as exc:
        extra.read_file("sub/notes.txt")
    assert exc.value.rule == "excluded"


# ---------------------------------------------------------------------------------------------- property


SEGMENTS = ["a", "b", "..", ".", "", "link_out", "link_in", "loop", ".git", "x.pem", "data.csv", "deep"]


@pytest.fixture(scope="module")
def maze(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("maze")
    root = base / "root"
    for d in ("a", "b", "a/b", "b/a", "a/deep", ".git"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (base / "outside").mkdir()
    for link_dir in (root, root / "a", root / "b"):
        os.symlink(base / "outside", link_dir / "link_out")
        os.symlink(root / "a", link_dir / "link_in")
        os.symlink("loop", link_dir / "loop")
    return root


def oracle(root: Path, path: str) -> bool:
    """Independent statement of the rule: realpath inside the root, and no excluded name on either path.

    Empty segments are dropped first: POSIX reads `a//b` as `a/b`, but CPython's realpath returns `/b` for
    `loop//b` when `loop` is a symlink loop (a quirk of its loop handling, not of the file system)."""
    path = ("/" if path.startswith("/") else "") + ("/".join(s for s in path.split("/") if s) or ".")
    real = os.path.realpath(os.path.join(root, path))
    inside = real == str(root) or real.startswith(str(root) + "/")
    lexical = os.path.normpath(os.path.join(root, path))
    lexical_inside = lexical == str(root) or lexical.startswith(str(root) + "/")
    names = Path(os.path.relpath(real, root)).parts + Path(os.path.relpath(lexical, root)).parts
    excluded = any(n == ".git" or n.endswith(".pem") for n in names)
    return inside and lexical_inside and not excluded


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=7))
def test_guard_allows_a_path_iff_its_realpath_is_inside_and_not_excluded(maze: Path, segments: list[str]) -> None:
    path = "/".join(segments)
    guard = ScopeGuard(Scope(root=maze))
    if not path.strip():
        return
    try:
        guard.contain(path)
        allowed = True
    except ScopeDenied:
        allowed = False
    assert allowed == oracle(Path(os.path.realpath(maze)), path), path


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=string.ascii_letters + "._-/ " + "\u2024\uff0e\u200b\x00~\\", min_size=1, max_size=30))
def test_guard_never_lets_arbitrary_text_out(maze: Path, text: str) -> None:
    guard = ScopeGuard(Scope(root=maze))
    try:
        _, real, _ = guard.contain(text)
    except ScopeDenied as exc:
        assert exc.reason
        return
    assert real == str(maze.resolve()) or real.startswith(str(maze.resolve()) + "/")
