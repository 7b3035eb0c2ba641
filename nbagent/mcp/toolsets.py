"""A server's tools as nbagent tools: names (`mcp__SERVER__TOOL`), risks (annotations or the config's
`risk` map), schemas, and the entry points that read a config and give the tools (`tools`, `toolset`,
`notebook_toolset`). Nothing here decides whether a call may run: the runtime's gate does.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from nbagent.events.levels import Risk
from nbagent.mcp.config import Loaded, MCPConfigError, read
from nbagent.mcp.server_files import entry_files
from nbagent.mcp.servers import Server, running_server
from nbagent.mcp.trust import Entry, needs_trust
from nbagent.tools.base import Tool

if TYPE_CHECKING:
    from nbagent.gate.effects import Target
    from nbagent.scope.rules import ScopeGuard

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what the model providers accept as a function name (fullmatch)
_NAME_PART = re.compile(r"[A-Za-z0-9_-]+")
PREFIX = "mcp__"


def annotation_risk(annotations: Any) -> tuple[Risk, str]:
    """(risk, why) from a tool's MCP annotations alone (an object with read_only_hint / destructive_hint, or a
    dict): READ_ONLY for `readOnlyHint: true` (not also `destructiveHint: true`), else WRITE_HIGH_RISK: what a tool
    that writes touches cannot be seen from its annotations, so `destructiveHint: false` lowers nothing (rules.py)."""
    from nbagent.mcp.rules import annotation_claim

    read_only, claim = annotation_claim(annotations)
    if read_only:
        return Risk.READ_ONLY, claim
    return Risk.WRITE_HIGH_RISK, f"effect unknown ({claim})" if claim else "effect unknown (no readOnlyHint)"


class MCPTool(Tool):
    """A server's tool: the server's JSON schema, its risk and paths by its server's rules (rules.py)."""

    server: str
    remote_name: str
    risk_reason: str
    code_files: list[str]
    effect_unknown: str | None  # why nbagent cannot see what it changes (effects.Effect.unknown), or None
    risk_set: bool  # the person's own configuration set its risk (an unknown effect then does not raise it)
    read_paths: Callable[[ScopeGuard, dict[str, Any]], list[Target]]  # its paths by its server's rules
    runs_code: Callable[[dict[str, Any]], str | None]  # why a call runs code its target chose (rules.Rule.runs_code)


def _make_tool(server: Server, listed: Any) -> MCPTool:
    remote = listed.name

    rule = server.rule()

    async def call(**arguments: Any) -> Any:
        # a known server gets the paths that were decided, absolute (rules.Rule.bind)
        return await server.call(remote, rule.bind(arguments))

    risk, why, unknown, risk_set = rule.risk(remote, getattr(listed, "annotations", None), server.source)
    schema = dict(getattr(listed, "input_schema", None) or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    schema.pop("$schema", None)
    # one line: a description with line breaks could print rows of its own in `%agent tools`
    description = " ".join((listed.description or getattr(listed, "title", None) or "").split())
    if len(description) > 2000:
        description = description[:2000] + "…"
    tool = MCPTool(call, name=f"{PREFIX}{server.name}__{remote}", description=description, risk=risk,
                   parameters=schema)
    tool.server, tool.remote_name, tool.risk_reason = server.name, remote, why
    tool.effect_unknown, tool.risk_set = unknown, risk_set
    # its paths as its server reads them (effects.resolve asks, with the runtime's file scope)
    tool.read_paths = lambda guard, arguments: rule.read_paths(tool, remote, guard, arguments)
    # code its target chose that a call would run (a repository's own git config or hooks: rules_git.commands)
    tool.runs_code = lambda arguments: rule.runs_code(remote, arguments)
    # the files of the folder its server runs (entry_files): a runtime may count writing them as code (code_paths)
    tool.code_files = [str(p) for p in entry_files(server.config, server.folder)]
    return tool


class Toolset(BaseModel):
    """The tools of the configured servers, and one line for each problem (the servers that failed, ...)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    tools: list[Any] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    untrusted: list[Entry] = Field(default_factory=list)  # servers from files left out: nobody trusted the entry


def toolset(loaded: Loaded, folder: Path | None = None, taken: Iterable[str] = ()) -> Toolset:
    """Start every enabled server (in parallel, each bounded by its timeout) and make its tools. `taken` names
    tools that exist already: an MCP tool of the same name is left out, with a line saying so.

    Args:
        loaded: the servers read (`read`, `notebook_config`), and the problems found reading them.
        folder: the notebook's folder: servers' relative `cwd` and the files they run are judged from it.
        taken: names of the tools an MCP tool may not take.
    """
    out = Toolset(problems=list(loaded.problems))
    try:
        from mcp import Client  # noqa: F401  (the client of mcp 2.x)
    except ImportError:
        from importlib.metadata import PackageNotFoundError, version

        try:
            have = f"mcp {version('mcp')} is installed"
        except PackageNotFoundError:
            have = "mcp is not installed"
        if loaded.servers:
            out.problems.append(f"MCP servers need the mcp package 2.3 or newer ({have}): pip install 'mcp>=2.3'")
        return out
    wanted: list[Server] = []
    for name, config in loaded.servers.items():
        if config.disabled:
            continue
        if not _NAME_PART.fullmatch(name) or "__" in name:
            out.problems.append(f"MCP server {name!r} ({loaded.sources.get(name)}): the name cannot be part of a "
                                "tool name (letters, digits, _ and - only, no \"__\"); its tools are left out")
            continue
        wanted.append(running_server(name, config, loaded.sources.get(name, "the MCP config"), folder))
    starts = [(s, s.start()) for s in wanted]
    for server, future in starts:
        try:
            server.wait_started(future, server.config.timeout + 15)
        except MCPConfigError as exc:
            out.problems.append(str(exc))
    seen: dict[str, str] = {n: "nbagent" for n in taken}
    for server, _ in starts:
        if server.state != "running":
            continue
        for listed in server.listed:
            remote = getattr(listed, "name", "")
            name = f"{PREFIX}{server.name}__{remote}"
            if not TOOL_NAME.fullmatch(name):
                out.problems.append(f"MCP server {server.name!r}: tool {remote!r} is left out: {name!r} is not a "
                                    "valid tool name (letters, digits, _ and -, at most 64 characters)")
                continue
            if name in seen:
                other = seen[name]
                out.problems.append(f"MCP tool name collision: {name!r} of server {server.name!r} is left out; "
                                    + ("a tool of nbagent or the notebook has that name" if other == "nbagent"
                                       else f"server {other!r} has a tool of that name"))
                continue
            seen[name] = server.name
            out.tools.append(_make_tool(server, listed))
        listed = {getattr(t, "name", None) for t in server.listed}
        long_form = {f"{PREFIX}{server.name}__{n}" for n in listed}
        for key in server.config.risk:
            if key != "*" and key not in listed and key not in long_form:
                out.problems.append(f"MCP server {server.name!r} ({server.source}): \"risk\" names {key!r}, which "
                                    "is not one of its tools")
    return out


def tools(*sources: str | Path | dict[str, Any], folder: str | Path | None = None,
          on_problem: Callable[[str], None] | None = None) -> list[Tool]:
    """The MCP tools of the given configs (files, inline JSON or dicts), for `Agent(tools=...)`:

        agent = Agent(model=..., tools=[*nbagent.mcp.tools("mcp.json"), my_tool])

    Each problem (a file that is not JSON, a server that does not start, a name collision) is one line given to
    `on_problem` (default: printed to stderr); the tools that could be made are returned either way. The servers
    start without the trust step a notebook asks for (`notebook_toolset`): naming a file here is the caller's own
    choice, so read a file that came with someone else's repository before passing it.

    Args:
        sources: configs read in order (a later entry replaces an earlier one of the same name): a file's path, a
            JSON text starting with `{`, or a dict, each `{"mcpServers": {...}}`.
        folder: where relative file names and a server's relative `cwd` are read from; default the current folder.
        on_problem: called with each problem line (redacted); default prints it to stderr.
    """
    base = Path(folder) if folder is not None else Path.cwd()
    loaded = Loaded()
    for s in sources:
        read(s, base, loaded)
    result = toolset(loaded, base)
    from nbagent.secrets.redactor import Redactor

    report = on_problem or (lambda line: print(f"nbagent: {line}", file=sys.stderr))
    redactor = Redactor()  # a line quotes what a server printed, which may be a secret (its config's, the env's)
    for line in result.problems:
        report(redactor.text(line))
    return list(result.tools)


def notebook_config(folder: Path, setting: str | None = None) -> Loaded:
    """What a notebook configures: `mcp.json` beside it, then the `mcp` setting (a file or inline JSON: the cell's
    `--mcp`, `%agent config mcp=`, `NbAgent.mcp`, `NBAGENT_MCP`), whose servers replace those of the same name.

    Args:
        folder: the notebook's folder, where `mcp.json` is looked for and relative names are read from.
        setting: the `mcp` setting (a file's name or inline JSON), or None.
    """
    loaded = Loaded(folder=str(folder))
    beside = folder / "mcp.json"
    if beside.exists():
        read(beside, folder, loaded)
    if setting:
        read(setting, folder, loaded, label="the mcp setting (inline JSON)")
    return loaded


def notebook_toolset(folder: Path, setting: str | None = None, taken: Iterable[str] = (),
                     trusted: Callable[[Entry], bool] | None = None) -> Toolset:
    """The tools of what a notebook configures (`notebook_config`). A server whose entry came from a file (a
    cloned repository's mcp.json) starts only when `trusted(entry)` says a person trusted that very entry; the
    others are left out, listed in `untrusted`, and nothing of theirs runs. Inline JSON is the person's own words.

    Args:
        folder, setting: as for `notebook_config`.
        taken: as for `toolset`.
        trusted: whether a person trusted this entry (nbagent/ipython/trust.py asks the log); None trusts all.
    """
    loaded = notebook_config(folder, setting)
    held = [e for e in needs_trust(loaded, folder) if trusted is None or not trusted(e)]
    for entry in held:
        del loaded.servers[entry.name]
    out = toolset(loaded, folder, taken) if loaded.servers or loaded.problems else Toolset()
    out.untrusted = held
    return out


__all__ = ["MCPTool", "Toolset", "annotation_risk", "notebook_config", "notebook_toolset", "tools", "toolset"]
