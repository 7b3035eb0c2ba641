"""Path arguments are found by schema, name (any spelling) and value, not only by a few names (nbagent/tools/base.py
`Tool.paths`), so an MCP server's `absolutePath`, `outputPath` or a `file:` URI under any key goes through the file
scope and a call naming somewhere outside the notebook's folder is refused before the server sees it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from nbagent import mcp
from nbagent.events.state import RunStatus
from nbagent.gate.deciders import PauseDecider
from nbagent.gate.policy import Authorizer
from nbagent.runtime import Agent
from nbagent.tools.base import Tool, local_path, named_paths, path_key, path_shaped, tool

# ---------------------------------------------------------------------------------------------- names


@pytest.mark.parametrize("key", [
    "path", "paths", "file", "filename", "file_path", "filePath", "FilePath", "file-path", "absolutePath",
    "outputPath", "inputFile", "repoPath", "repo_path", "repo-path", "workingDirectory", "working_directory", "cwd",
    "OutputDir", "output_dir", "outDir", "rootDir", "root", "folder", "targetFolder", "dir", "directories", "dirname",
    "logfile", "srcDir", "data_dir", "path2", "URLPath", "HTMLFile", "dest", "destination", "source", "src", "input",
    "output", "target", "inputs", "outputs",
    # run-together lowercase compounds (attack h6: none of these was found)
    "savepath", "outputdir", "configfile", "cachedir", "targetdir", "exportpath", "modelpath", "dbfile", "fname",
    "saveTo", "savedir", "logdir", "workdir", "location", "SAVEPATH", "save_as", "exportTo", "filelist", "pathspec",
    "projectroot", "outfilename", "savepath2", "downloadlocation"])
def test_keys_naming_a_path_in_any_spelling(key: str) -> None:
    assert path_key(key) is not None
    assert named_paths({key: "x.txt"}) == [(key, "x.txt")]


@pytest.mark.parametrize("key", [
    "query", "name", "text", "content", "code", "pattern", "regex", "fileContent", "file_content", "sourceCode",
    "source_code", "inputText", "outputFormat", "targetLanguage", "file_size", "profile", "xpath", "message", "url",
    # compounds that end with a content word, and words that merely end like a path word
    "filetype", "filesize", "fileid", "filecontent", "pathlength", "userProfile", "allocation", "geolocation",
    "oldest", "closest", "destroy", "direction", "dirty", "rooted", "login"])
def test_keys_that_do_not_name_a_path(key: str) -> None:
    assert path_key(key) is None
    assert named_paths({key: "x.txt"}) == []


def test_names_are_found_nested_and_in_lists_and_a_script_under_a_source_is_content() -> None:
    args = {"job": {"steps": [{"outputPath": "a.csv"}, {"inputFiles": ["b.csv", "c.csv"]}]},
            "options": {"working-directory": "sub"}, "source": "print(1)\nprint(2)\n", "dest": "out/x.csv",
            "path": {"x": "deep.md"}}
    assert named_paths(args) == [("job.steps[0].outputPath", "a.csv"), ("job.steps[1].inputFiles[0]", "b.csv"),
                                 ("job.steps[1].inputFiles[1]", "c.csv"), ("options.working-directory", "sub"),
                                 ("dest", "out/x.csv"), ("path.x", "deep.md")]


# ---------------------------------------------------------------------------------------------- values


@pytest.mark.parametrize("value", [
    "/", "/etc/passwd", "//etc/passwd", "/home/me/My Documents/notes.txt", "~", "~/.ssh/id_rsa", "~root/x",
    "file:///etc/passwd", "FILE:/etc/passwd", "C:\\Users\\me\\x.txt", "C:/Users/me/x.txt", "\\\\server\\share\\x",
    "../outside.txt", "a/../../b", "..", "sub\\..\\..\\x", " /etc/passwd ", "/etc/passwd\n",
    "$HOME/.ssh/id_rsa", "${XDG_CONFIG_HOME}/git/config", "${workspaceFolder}/x", "%USERPROFILE%\\x.txt",
    "%appdata%/x"])
def test_values_shaped_as_paths(value: str) -> None:
    assert path_shaped(value.strip())


@pytest.mark.parametrize("value", [
    "report.md", "data/sales.csv", "/^a.*b$/", "/\\d+/", "// a comment", "import os\nos.listdir('/')\n",
    "line one\n/etc/passwd", "https://example.org/a/b", "a.b...c", "from .. import x", "~5 minutes", "x / y", "",
    "$price", "$x/y$", "$HOME", "%d%", "50%/60%", "$5/month"])
def test_values_not_shaped_as_paths(value: str) -> None:
    assert not path_shaped(value)


def test_a_path_starting_with_an_environment_variable_is_checked_as_one_outside_the_folder() -> None:
    """A server that expands `$HOME` reads the user's home: whatever it expands to, it is judged outside."""
    assert [local_path(v) for v in ("$HOME/.ssh/id_rsa", "${VAR}/x", "%APPDATA%/x", "$home", "data/$HOME")] == \
        ["/$HOME/.ssh/id_rsa", "/${VAR}/x", "/%APPDATA%/x", "/$home", "data/$HOME"]
    t = _mcp_like({"properties": {}})
    assert t.paths({"note": "$HOME/.bashrc", "savepath": "$home", "text": "$price"}) == [
        ("savepath", "/$home"), ("note", "/$HOME/.bashrc")]


def _mcp_like(schema: dict[str, Any]) -> Tool:
    async def call(**arguments: Any) -> Any:
        return arguments

    return Tool(call, name="mcp__s__t", description="", parameters={"type": "object", **schema})


def test_every_rule_through_tool_paths() -> None:
    t = _mcp_like({"properties": {
        "where": {"type": "string", "format": "path"},
        "spec": {"$ref": "#/$defs/Spec"},
        "maybe": {"anyOf": [{"type": "string", "format": "path"}, {"type": "null"}]},
        "link": {"type": "string", "format": "uri"},
        "note": {"type": "string"}, "items": {"type": "array", "items": {"type": "string"}}},
        "$defs": {"Spec": {"type": "object", "properties": {"items": {"type": "array", "items": {
            "type": "string", "format": "path"}}}}}})
    args = {"where": ".env", "spec": {"items": ["a.txt", ".ssh/config"]}, "maybe": "m.txt",
            "link": "file:///etc/hosts", "note": "/etc/passwd", "items": ["ok", "../up.txt", "x\n/etc/passwd"],
            "outputPath": "file://localhost/tmp/x", "code": "s/a/b/g"}
    assert t.paths(args) == [("where", ".env"), ("spec.items[0]", "a.txt"), ("spec.items[1]", ".ssh/config"),
                             ("maybe", "m.txt"), ("link", "/etc/hosts"), ("outputPath", "/tmp/x"),
                             ("note", "/etc/passwd"), ("items[1]", "../up.txt")]


def test_a_python_tool_keeps_its_typed_paths_and_gains_the_value_rule() -> None:
    @tool(risk="READ_ONLY")
    def lookup(term: str, where: Path | None = None) -> str:
        """Look a term up."""
        return term

    assert lookup.paths({"term": "/etc/shadow", "where": "d.txt"}) == [("where", "d.txt"), ("term", "/etc/shadow")]
    assert lookup.paths({"term": "a/b testing", "where": None}) == []


def test_the_traversal_check_knows_path_names_in_any_spelling() -> None:
    a = Authorizer()
    for key in ("Path", "PATH", "file-name", "FileName", "CWD", "pattern_path"):
        denial = a.check_tool("t", {key: "../x"})
        assert denial is not None and denial.rule == "path_traversal", key
    assert a.check_tool("t", {"query": "../x"}) is None  # the scope judges the rest


# ---------------------------------------------------------------------------------------------- a real MCP server

SERVER = '''\
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("files")
READ = ToolAnnotations(readOnlyHint=True)


def local(ref: str) -> Path:
    return Path(ref[len("file://"):] if ref.startswith("file://") else ref).expanduser()


@server.tool(annotations=READ)
def read_text(absolutePath: str) -> str:
    """Read a text file."""
    return Path(absolutePath).read_text()


@server.tool(annotations=READ)
def fetch(ref: str) -> str:
    """Fetch a document by reference (a path or a file: URI)."""
    return local(ref).read_text()


@server.tool(annotations=READ)
def read_all(spec: dict[str, list[Path]]) -> str:
    """Read every file of the spec."""
    return "".join(p.read_text() for files in spec.values() for p in files)


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def save_text(outputPath: str, text: str) -> str:
    """Write a text file."""
    Path(outputPath).write_text(text)
    return "saved"


@server.tool(annotations=READ)
def grep(pattern: str, script: str) -> str:
    """Match a pattern; echo a script."""
    return f"{pattern} {len(script.splitlines())} lines"


server.run()
'''
OUTSIDE_TEXT = "outside-secret-content-7391"
DOTENV_TEXT = "dotenv-secret-content-5512"


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path, list[Any]]:
    """The notebook's folder (with a .env and a note), an outside folder with a secret file, and the server's tools."""
    root, outside = tmp_path / "nb", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(OUTSIDE_TEXT)
    (root / ".env").write_text(DOTENV_TEXT)
    (root / "note.txt").write_text("inside note")
    (tmp_path / "files_server.py").write_text(SERVER)
    problems: list[str] = []
    # the person's own risk for the server's write (an unknown server's write is WRITE_HIGH_RISK, effect unknown:
    # docs/mcp.md), so that the scope is what says no
    found = mcp.tools({"mcpServers": {"files": {"command": sys.executable, "args": [str(tmp_path / "files_server.py")],
                                                "timeout": 20, "risk": {"save_text": "WRITE_LOW_RISK"}}}},
                      folder=root, on_problem=problems.append)
    assert problems == [] and len(found) == 5, problems
    return root, outside, found


def _run(root: Path, found: list[Any], autonomy: str, calls: list[tuple[str, dict[str, Any]]]) -> tuple[Agent, Any]:
    script = {"turns": [*({"tool_calls": [{"name": f"mcp__files__{name}", "arguments": args}]} for name, args in calls),
                        {"content": "done"}]}
    agent = Agent(script=script, tools=found, autonomy=autonomy, decider=PauseDecider(), store=root / "nb.ipynb")
    result = asyncio.run(asyncio.wait_for(agent.run("go"), 120))  # a guard against a hang, not a timing assertion
    return agent, result


def _log(agent: Agent) -> str:
    return b"".join(p.read_bytes() for p in agent.store.path.rglob("*") if p.is_file()).decode("utf-8", "replace")


def test_reads_outside_the_folder_are_refused_at_l1_before_the_server_sees_them(folders: Any) -> None:
    root, outside, found = folders
    secret = str(outside / "secret.txt")
    calls = [("read_text", {"absolutePath": secret}), ("fetch", {"ref": "file://" + secret}),
             ("fetch", {"ref": "../outside/secret.txt"}), ("read_all", {"spec": {"docs": [".env"]}})]
    agent, result = _run(root, found, "L1", calls)
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS  # refusals are errors the model saw; nothing waits
    events = agent.store.run_events(result.run_id)
    denied = [e.payload for e in events if e.type == "authorization_denied"]
    assert [(d.tool, d.rule) for d in denied] == [("mcp__files__read_text", "scope.outside"),
                                                  ("mcp__files__fetch", "scope.outside"),
                                                  ("mcp__files__fetch", "scope.outside"),
                                                  ("mcp__files__read_all", "scope.excluded")]
    assert not any(e.type == "tool_call_started" for e in events)
    log = _log(agent)
    assert OUTSIDE_TEXT not in log and DOTENV_TEXT not in log


def test_a_write_outside_the_folder_is_refused_at_l2(folders: Any) -> None:
    root, outside, found = folders
    agent, result = _run(root, found, "L2", [("save_text", {"outputPath": str(outside / "planted.txt"),
                                                            "text": "planted"})])
    events = agent.store.run_events(result.run_id)
    assert [(e.payload.tool, e.payload.rule) for e in events if e.type == "authorization_denied"] == \
        [("mcp__files__save_text", "scope.outside")]
    assert not (outside / "planted.txt").exists()


def test_paths_inside_and_code_arguments_still_run(folders: Any) -> None:
    root, _, found = folders
    calls = [("read_text", {"absolutePath": str(root / "note.txt")}), ("save_text", {"outputPath": "out.txt",
                                                                                     "text": "a/b\n/etc/x\n"}),
             ("grep", {"pattern": "/^a.*b$/", "script": "import os\nos.listdir('/etc')\n"})]
    agent, result = _run(root, found, "L2", calls)
    assert result.status == RunStatus.COMPLETED, result.error
    events = agent.store.run_events(result.run_id)
    done = {e.payload.tool: e.payload.result for e in events if e.type == "tool_call_completed"}
    assert done == {"mcp__files__read_text": {"result": "inside note"}, "mcp__files__save_text": {"result": "saved"},
                    "mcp__files__grep": {"result": "/^a.*b$/ 2 lines"}}
    assert (root / "out.txt").read_text() == "a/b\n/etc/x\n"


# ---------------------------------------------------------------------------------------------- keys in any spelling,
# and a server's own working folder

DOCS_SERVER = '''\
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("docs")
WRITE = ToolAnnotations(readOnlyHint=False, destructiveHint=False)


@server.tool(annotations=WRITE)
def export(savepath: str, text: str) -> str:
    """Export text."""
    p = Path(savepath)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return "saved"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def read_doc(location: str) -> str:
    """Read a document."""
    return Path(location).read_text()


@server.tool(annotations=WRITE)
def save_text(outputPath: str, text: str) -> str:
    """Write a text file."""
    Path(outputPath).write_text(text)
    return "saved"


server.run()
'''


def _docs(tmp_path: Path, **entry: Any) -> tuple[Path, Path, list[Any]]:
    """The notebook's folder (a .env, a .git, a link `outlink` to a folder outside with a secret), and the docs
    server's tools (`entry`: more keys of its entry, e.g. its cwd)."""
    root, outside = tmp_path / "nb", tmp_path / "outside"
    (root / ".git" / "hooks").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text(OUTSIDE_TEXT)
    (root / ".env").write_text(DOTENV_TEXT)
    (root / "outlink").symlink_to(outside)
    (tmp_path / "docs_server.py").write_text(DOCS_SERVER)
    problems: list[str] = []
    risk = {"export": "WRITE_LOW_RISK", "save_text": "WRITE_LOW_RISK"}  # the person's (as in `folders` above)
    found = mcp.tools({"mcpServers": {"docs": {"command": sys.executable, "args": [str(tmp_path / "docs_server.py")],
                                               "timeout": 20, "risk": risk, **entry}}}, folder=root,
                      on_problem=problems.append)
    assert problems == [] and len(found) == 3, problems
    return root, outside, found


def _run_docs(root: Path, found: list[Any], calls: list[tuple[str, dict[str, Any]]], approve: str) -> tuple[Agent, Any]:
    from nbagent.gate.deciders import PolicyDecider

    script = {"turns": [*({"tool_calls": [{"name": f"mcp__docs__{name}", "arguments": args}]} for name, args in calls),
                        {"content": "done"}]}
    agent = Agent(script=script, tools=found, autonomy="L2", decider=PolicyDecider(approve), store=root / "nb.ipynb")
    return agent, asyncio.run(asyncio.wait_for(agent.run("go"), 120))  # a guard against a hang, not a timing assertion


def test_lowercase_compound_keys_go_through_the_scope_and_the_runs_later_rule(tmp_path: Path) -> None:
    """Attack h6: `savepath`, `location` were not path names, so `.git/hooks/pre-commit` was written, `.env` and a
    file behind a link leading outside were read, and `helper.py` (a module the kernel imports) was no target."""
    root, _, found = _docs(tmp_path)
    calls = [("export", {"savepath": "helper.py", "text": "print('helper ran')\n"}),
             ("export", {"savepath": ".git/hooks/pre-commit", "text": "#!/bin/sh\necho hook ran\n"}),
             ("read_doc", {"location": ".env"}),
             ("read_doc", {"location": "outlink/secret.txt"}),
             ("export", {"savepath": "notes/plain.txt", "text": "fine"})]
    agent, result = _run_docs(root, found, calls, "all")  # yes to every question: only the scope says no
    events = agent.store.run_events(result.run_id)
    denied = [(e.payload.tool, e.payload.rule) for e in events if e.type == "authorization_denied"]
    assert denied == [("mcp__docs__export", "scope.excluded"), ("mcp__docs__read_doc", "scope.excluded"),
                      ("mcp__docs__read_doc", "scope.symlink_escape")]
    started = {e.payload.arguments["savepath"]: e.payload for e in events if e.type == "tool_call_started"}
    assert list(started) == ["helper.py", "notes/plain.txt"]
    helper, plain = started["helper.py"], started["notes/plain.txt"]
    assert [(t.arg, t.path) for t in helper.effect.targets] == [("savepath", "helper.py")]
    assert helper.risk == "WRITE_HIGH_RISK" and "helper.py is a Python module" in (helper.risk_reason or "")
    assert [(t.arg, t.path) for t in plain.effect.targets] == [("savepath", "notes/plain.txt")]
    assert plain.risk == "WRITE_LOW_RISK"
    assert not (root / ".git" / "hooks" / "pre-commit").exists()
    log = _log(agent)
    assert OUTSIDE_TEXT not in log and DOTENV_TEXT not in log


def test_a_servers_paths_are_judged_from_its_own_working_folder(tmp_path: Path) -> None:
    """Attack h15: with `"cwd": "server"`, `out/x.txt` was judged as `<nb>/out/x.txt` while the server wrote
    `<nb>/server/out/x.txt`, through a link to a folder outside."""
    (tmp_path / "nb" / "server").mkdir(parents=True)
    (tmp_path / "nb" / "server" / "out").symlink_to(tmp_path / "outside")
    root, outside, found = _docs(tmp_path, cwd="server")
    calls = [("save_text", {"outputPath": "out/x.txt", "text": "planted"}),
             ("save_text", {"outputPath": "x.txt", "text": "fine"}),
             ("read_doc", {"location": "../.env"})]
    agent, result = _run_docs(root, found, calls, "none")
    events = agent.store.run_events(result.run_id)
    denied = [(e.payload.tool, e.payload.rule) for e in events if e.type == "authorization_denied"]
    assert denied[0] == ("mcp__docs__save_text", "scope.symlink_escape")
    assert ("mcp__docs__read_doc", "scope.excluded") in denied  # ../.env from server/ is the folder's .env
    assert not (outside / "x.txt").exists()
    (started,) = [e.payload for e in events if e.type == "tool_call_started"]
    # an unknown server's relative path is judged under every folder it could be read from (docs/mcp.md): its
    # working folder first, where it lands, then the notebook's folder
    assert [(t.written, t.path) for t in started.effect.targets] == [("x.txt", "server/x.txt"), ("x.txt", "x.txt")]
    assert started.target.startswith("x.txt → server/x.txt"), started.target  # the card names where it lands
    assert (root / "server" / "x.txt").read_text() == "fine" and not (root / "x.txt").exists()
