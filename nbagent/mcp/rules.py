"""An MCP server's arguments judged by the server's own rules: what a call of one of its tools touches, and its risk.

A server reads its arguments its own way: the reference filesystem server reads a relative path against its
allowed directories, mcp-server-git expands `~` and `$VAR` in `repo_path` and follows `.git` files. So before
anything decides, `Rule.read_paths` resolves a call's paths as its server will, and the file scope judges what the
server will touch:

- a server nbagent knows (`kind_of`: the reference filesystem server, mcp-server-git, recognised by the command
  that starts it) has its paths resolved exactly as it resolves them (rules_filesystem.py, rules_git.py), and the call
  is sent with the paths nbagent decided, absolute, so it acts on exactly that (`Rule.bind`);
- any other server's relative path is judged under every folder it could be read from (the server's working
  folder, the notebook's folder, every folder its command line names): the strictest reading; a path that one of
  them takes outside the notebook's folder is refused.

Risk (`Rule.risk`): the person's own configuration (`risk` in the entry they trusted, or in the JSON or dict they
gave) decides first. Otherwise a tool nbagent knows has the risk of what nbagent knows it does. Otherwise
`readOnlyHint: true` (and not also `destructiveHint: true`) is READ_ONLY; any other tool changes what nbagent
cannot see, whatever its annotations claim, and is WRITE_HIGH_RISK with `Effect.unknown` saying so.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbagent.events.effect import Op, Target
from nbagent.events.levels import Risk
from nbagent.gate.effects import current_effect, resolve_target
from nbagent.mcp import rules_filesystem as fsr
from nbagent.mcp import rules_git as gitr
from nbagent.mcp.config import ServerConfig
from nbagent.mcp.server_files import server_cwd

if TYPE_CHECKING:
    from nbagent.scope.rules import ScopeGuard
    from nbagent.tools.base import Tool

# what each tool of the reference filesystem server does to which argument (its dist/index.js), and its risk
_FS_READ: dict[str, tuple[str, Op]] = {
    "read_file": ("path", "read"), "read_text_file": ("path", "read"), "read_media_file": ("path", "read"),
    "get_file_info": ("path", "read"), "read_multiple_files": ("paths", "read"), "list_directory": ("path", "list"),
    "list_directory_with_sizes": ("path", "list"), "directory_tree": ("path", "list"),
    "search_files": ("path", "list")}
_FS_WRITE: dict[str, tuple[tuple[tuple[str, Op], ...], Risk]] = {
    "write_file": ((("path", "write"),), Risk.WRITE_HIGH_RISK),
    "edit_file": ((("path", "write"),), Risk.WRITE_HIGH_RISK),
    "create_directory": ((("path", "create"),), Risk.WRITE_LOW_RISK),
    "move_file": ((("source", "delete"), ("destination", "create")), Risk.WRITE_HIGH_RISK)}


def kind_of(config: ServerConfig) -> str:
    """Which known server an entry starts ("filesystem", "git"), or "" for one nbagent does not know."""
    if not config.command:
        return ""
    if fsr.server_args(config.command, config.args) is not None:
        return "filesystem"
    return "git" if gitr.is_server(config.command, config.args) else ""


class Rule:
    """How one configured server reads its tools' arguments (its kind, its folders, its environment)."""

    def __init__(self, name: str, config: ServerConfig, folder: Path | None, roots_asked: Any = None) -> None:
        self.name, self.config, self.kind = name, config, kind_of(config)
        self.folder = str(folder) if folder is not None else None
        self.cwd = str(server_cwd(config, folder) or os.getcwd())
        # the server's environment as the MCP SDK builds it: the kernel's HOME (and a few others), then the entry's
        self.env = {"HOME": os.environ.get("HOME") or os.path.expanduser("~"), **config.env}
        self._roots_asked = roots_asked  # () -> bool: whether the server asked for nbagent's roots
        self.bases = self._bases()

    # ------------------------------------------------------------------ risk

    def risk(self, remote: str, annotations: Any, source: str) -> tuple[Risk, str, str | None, bool]:
        """(risk, why, unknown, set by the person) of one tool: `unknown` says why nbagent cannot see what it
        changes (None when it only reads, or nbagent knows what it does)."""
        override = self.config.risk.get(remote, self.config.risk.get(f"mcp__{self.name}__{remote}",
                                                                     self.config.risk.get("*")))
        known = self._known(remote)
        read_only, claim = annotation_claim(annotations)
        unknown = None
        if known is None and not read_only:
            unknown = (f"what {remote} of MCP server {self.name!r} changes is unknown to nbagent"
                       + (f" (its annotation {claim} is the server's claim, not what it touches)" if claim else ""))
        if override is not None:
            return override, f"\"risk\" in {source}", unknown, True
        if known is not None:
            return known[0], known[1], None, False
        if read_only:
            return Risk.READ_ONLY, claim, None, False
        return Risk.WRITE_HIGH_RISK, "effect unknown" + (f" ({claim})" if claim else ""), unknown, False

    def _known(self, remote: str) -> tuple[Risk, str] | None:
        if self.kind == "filesystem":
            if remote in _FS_READ or remote == "list_allowed_directories":
                return Risk.READ_ONLY, "only reads: nbagent knows this tool of the reference filesystem server"
            if remote in _FS_WRITE:
                return _FS_WRITE[remote][1], "nbagent knows what this tool of the reference filesystem server writes"
        if self.kind == "git" and remote in gitr.READS:
            return Risk.READ_ONLY, "only reads the repository: nbagent knows this tool of mcp-server-git"
        return None

    def runs_code(self, remote: str, arguments: dict[str, Any]) -> str | None:
        """Why this call runs code its target chose, whatever the tool is known or set to do (mcp-server-git on a
        repository whose config names a command git runs, or that holds a hook): effects.Effect.unknown."""
        path = arguments.get("repo_path")
        if self.kind != "git" or not isinstance(path, str) or not path.strip() or len(path) > _LONGEST:
            return None
        try:
            return gitr.commands(gitr.expand(path, self.cwd, self.env), self.env, remote in gitr.READS)
        except (gitr.Refused, OSError, ValueError) as exc:
            return f"whether the repository names commands git runs cannot be told: {_clip(str(exc), 200)}"

    # ------------------------------------------------------------------ paths

    def read_paths(self, tool: Tool, remote: str, guard: ScopeGuard, arguments: dict[str, Any]) -> list[Target]:
        """What a call touches, its paths resolved as this server resolves them."""
        if self.kind == "filesystem" and (remote in _FS_READ or remote in _FS_WRITE):
            return self._filesystem(remote, guard, arguments)
        if self.kind == "git" and isinstance(arguments.get("repo_path"), str):
            return self._git(tool, remote, guard, arguments)
        op: Op = "read" if tool.risk == Risk.READ_ONLY else "write"
        out: list[Target] = []
        for where, value in tool.paths(arguments):
            relative = isinstance(value, str) and value and not value.startswith(("/", "~"))
            for base in self.bases if relative else [None]:
                t = resolve_target(guard, op, value, where, base)
                if not any((o.arg, o.path, o.problem) == (t.arg, t.path, t.problem) for o in out):
                    out.append(t)
        return out

    def _bases(self) -> list[str | None]:
        """Where a server nbagent does not know may read a relative path from: its working folder, the notebook's
        (its root), and every folder its command line names."""
        if not self.config.command:
            return [None]
        bases: list[str | None] = [self.cwd, self.folder]
        for arg in self.config.args[:256]:
            for word in (arg, arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else ""):
                if word and "\0" not in word and not word.startswith("-"):
                    home = self.env["HOME"] + word[1:] if word == "~" or word.startswith("~/") else word
                    path = posixpath.join(self.cwd, home)
                    try:
                        if os.path.isdir(path):
                            bases.append(posixpath.normpath(path))
                    except (OSError, ValueError):
                        continue
        return list(dict.fromkeys(bases))

    def allowed(self) -> list[str]:
        """The filesystem server's allowed directories now: nbagent's root once it asked for it, else its
        arguments'."""
        if self.folder is not None and self._roots_asked is not None and self._roots_asked():
            return fsr.allowed_from_roots([self.folder])
        return fsr.allowed_from_args(fsr.server_args(self.config.command or "", self.config.args) or [],
                                     self.cwd, self.env["HOME"])

    def _filesystem(self, remote: str, guard: ScopeGuard, arguments: dict[str, Any]) -> list[Target]:
        specs = _FS_WRITE[remote][0] if remote in _FS_WRITE else (_FS_READ[remote],)
        allowed = self.allowed()
        out: list[Target] = []
        for key, op in specs:
            value = arguments.get(key)
            values = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
            for i, v in values:
                if not isinstance(v, str):
                    continue
                where = key if i is None else f"{key}[{i}]"
                if len(v) > _LONGEST:  # the scope refuses it: not walked name by name first
                    out.append(resolve_target(guard, op, v, where))
                    continue
                try:
                    absolute = fsr.resolve_path(v, allowed, self.cwd, self.env["HOME"])
                except (fsr.Refused, OSError, ValueError) as exc:
                    own = resolve_target(guard, op, v, where)  # nbagent's own rule first, when it refuses too
                    out.append(own if own.problem is not None else Target(
                        op=op, written=_clip(v), arg=where, rule="server",
                        problem=f"MCP server {self.name!r} refuses it: {_clip(str(exc), 300)}"))
                    continue
                t = resolve_target(guard, "create" if op == "write" and not os.path.lexists(absolute) else op,
                                   absolute, where)
                t.written = v if t.problem is None else _clip(v)
                if t.path:
                    t.sent = str(guard.root / t.path) if t.path != "." else str(guard.root)
                out.append(t)
        return out

    def _git(self, tool: Tool, remote: str, guard: ScopeGuard, arguments: dict[str, Any]) -> list[Target]:
        op: Op = "read" if tool.risk == Risk.READ_ONLY else "write"
        written = arguments["repo_path"]
        if not written.strip() or len(written) > _LONGEST:
            return [resolve_target(guard, op, written, "repo_path")]  # empty or too long: the scope refuses it
        path = gitr.expand(written, self.cwd, self.env)
        t = resolve_target(guard, op, path, "repo_path")
        t.written = written if t.problem is None else _clip(written)
        t.sent = path if t.problem is None else None
        out = [t]
        if t.problem is not None:
            return out
        tree, others = gitr.reach(path, self.env)
        root = str(guard.root)
        for other in [tree, *others]:
            other = posixpath.normpath(posixpath.join(self.cwd, other))
            real = os.path.realpath(other)
            if real != root and not real.startswith(root.rstrip("/") + "/"):
                what = "working tree" if other == posixpath.normpath(posixpath.join(self.cwd, tree)) else "git folder"
                out.append(Target(op=op, written=_clip(written), arg="repo_path", rule="outside",
                                  problem=f"the repository's {what} {other} is outside the notebook's folder"))
        files = arguments.get("files") if remote == "git_add" else None
        for i, f in enumerate(files if isinstance(files, list) else []):
            if isinstance(f, str):
                ft = resolve_target(guard, "read", posixpath.join(tree, f) if f else f, f"files[{i}]")
                ft.written = f if ft.problem is None else _clip(f)
                out.append(ft)
        return out

    # ------------------------------------------------------------------ the call

    def bind(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments sent to a known server: each path replaced by the absolute path that was decided (the
        running call's effect), so the server acts on exactly that; a server nbagent does not know gets them as
        the model wrote them."""
        effect = current_effect()
        if effect is None or self.kind == "":
            return arguments
        sent = dict(arguments)
        for t in effect.targets:
            if t.sent is None:
                continue
            key, _, index = t.arg.partition("[")
            if index and isinstance(sent.get(key), list):
                items = list(sent[key])
                i = int(index.rstrip("]"))
                if i < len(items) and items[i] == t.written:
                    items[i] = t.sent
                sent[key] = items
            elif sent.get(key) == t.written:
                sent[key] = t.sent
        return sent


_LONGEST = 4096  # characters of a path mirrored; a longer one is left to the scope, which refuses it (4096 bytes)


def annotation_claim(annotations: Any) -> tuple[bool, str]:
    """(read-only by its annotations, the claim in words): `readOnlyHint: true` without `destructiveHint: true`
    (a server's rules and `annotation_risk` read a tool's annotations alike)."""

    def hint(*names: str) -> Any:
        for n in names:
            value = annotations.get(n) if isinstance(annotations, dict) else getattr(annotations, n, None)
            if value is not None:
                return value
        return None

    if annotations is None:
        return False, ""
    read_only, destructive = hint("read_only_hint", "readOnlyHint"), hint("destructive_hint", "destructiveHint")
    if read_only is True:
        return destructive is not True, ("readOnlyHint: true" if destructive is not True
                                         else "readOnlyHint: true with destructiveHint: true, which contradict")
    return False, "destructiveHint: false" if destructive is False else ""


def _clip(text: str, width: int = 300) -> str:
    return text if len(text) <= width else f"{text[:width]}… ({len(text):,} characters)"
