"""What makes a write code: the one registry of files something runs later, each with the reason shown.

A tool declares its own risk (`create_file` is WRITE_LOW_RISK: a new file changes nothing that exists). But some
files are code whatever tool writes them, because something runs them later without anyone looking again: the
kernel (a `pandas.py` in the notebook's folder comes first on `sys.path`), Python at start (`.pth`,
`sitecustomize`), IPython and Jupyter (startup scripts, configuration, a notebook's cells under Run All and
`nbagent run`), nbagent itself (an MCP configuration starts the commands it names), a shell (`.bashrc`,
`.profile`), git (`.gitconfig`'s `core.fsmonitor`, hooks), a desktop session (autostart entries), debuggers and
editors (`.pdbrc`, `.gdbinit`, `.exrc`). Writing any of them is WRITE_HIGH_RISK, and no grant covers it.

`runs_later(path, contents)` gives the reason (None for plain data). It looks at the path as written and as
resolved (effects.py asks for both), in Unicode compatibility form and case-folded, and at the text the call
writes: a file whose content defines MCP servers is an MCP configuration whatever its name, since any name can be
given to `--mcp`, `%agent config mcp=`, `NbAgent.mcp` or `NBAGENT_MCP` later. The answer depends only on the
call's own arguments and the kernel's settings (`sources`: the MCP files configured now, PYTHONSTARTUP), never on
the folder's contents, so it cannot be raced.
"""

from __future__ import annotations

import os
import posixpath
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["RULES", "Rule", "runs_later"]


@dataclass(frozen=True)
class Rule:
    """One kind of file that something runs later: what matches it and why it matters."""

    what: str  # the registry's own name for the kind (docs/approvals.md lists them)
    pattern: re.Pattern[str]  # matched against the normalised path (`a/b/c.py`), anchored at a path segment
    why: str  # `{name}` is the file's name, `{stem}` its module name, `{parent}` its folder


def _rule(what: str, pattern: str, why: str) -> Rule:
    return Rule(what, re.compile(r"(?:^|/)" + pattern + r"$"), why)


# A path matches a rule when the pattern matches its end at a segment boundary: `\.bashrc` matches `.bashrc` and
# `home/me/.bashrc`; `\.config/git/config` matches only that file. Order matters only for the reason shown.
RULES: tuple[Rule, ...] = (
    # Python's import path and start
    _rule("python", r"[^/]*\.pth", "{name} is a .pth file: Python runs its import lines when it starts"),
    _rule("python", r"(?:site|user)customize(?:\.[^/]*)?", "{name} is run by Python at every start"),
    _rule("python", r"__init__\.(?:py|pyw|pyc|pyo|pyd|so)",
          "{path} makes {parent!r} a Python package: `import {parent}` would run it"),
    _rule("python", r"[^/]+\.(?:py|pyw|pyc|pyo|pyd|so|pyz|egg-link)",
          "{name} is a Python module: `import {stem}` in the kernel would run it"),
    _rule("python", r"(?:[^/]+/)*(?:site|dist)-packages/.*",
          "{path} is inside Python's packages: imports load it"),
    _rule("python", r"\.?pythonrc(?:\.py)?|\.?pythonstartup|pip\.conf|pip\.ini|\.config/pip/.*",
          "{name} configures how Python starts or what pip installs"),
    # IPython and Jupyter
    _rule("jupyter", r"[^/]+\.ipy", "{name} is an IPython script: IPython runs it (a startup folder, `%run`)"),
    _rule("jupyter", r"[^/]+\.ipynb", "{name} is a notebook: its cells run when it is run (Run All, nbagent run)"),
    _rule("jupyter", r"(?:ipython(?:_kernel)?|jupyter(?:_[a-z]+)?)_config\.(?:py|json)|kernel\.json|custom\.js|"
                     r"page_config\.json|overrides\.json",
          "{name} is IPython/Jupyter configuration: Jupyter loads and runs it"),
    _rule("jupyter", r"(?:[^/]+/)*(?:\.ipython|\.jupyter|profile_[^/]*|nbconfig|labconfig|share/jupyter|"
                     r"etc/jupyter|etc/ipython|\.config/jupyter|\.config/ipython)/.*",
          "{path} is inside IPython/Jupyter's configuration: they load it"),
    # MCP configurations, by every name the common clients use (content and settings are checked too)
    _rule("mcp", r"\.?mcp(?:[._-][^/]*)?\.json[c5]?|[^/]*[._-]mcp\.json[c5]?|mcp_(?:config|settings)\.json|"
                 r"claude_desktop_config\.json|\.claude\.json|\.claude/settings(?:\.local)?\.json|"
                 r"\.(?:vscode|cursor|gemini|kiro|roo|amazonq)/(?:mcp|settings)\.json",
          "{name} configures MCP servers: a run that reads it starts the commands it names (docs/mcp.md)"),
    # shells and sessions
    _rule("shell", r"\.(?:profile|bashrc|bash_profile|bash_login|bash_logout|zshrc|zshenv|zprofile|zlogin|zlogout|"
                   r"cshrc|tcshrc|login|logout|kshrc|mkshrc|xprofile|xinitrc|xsession|xsessionrc|envrc|"
                   r"pam_environment)",
          "{name} is a shell or session startup file: it runs when a shell or a session starts"),
    _rule("shell", r"\.config/(?:fish|environment\.d)/.*|\.bashrc\.d/.*|\.profile\.d/.*",
          "{path} is shell startup configuration: it runs when a shell starts"),
    # git
    _rule("git", r"\.gitconfig|\.config/git/(?:config|attributes)|\.gitattributes|\.lfsconfig|"
                 r"\.pre-commit-config\.ya?ml",
          "{name} is git configuration: it can name commands git runs (core.fsmonitor, filters, hooks)"),
    _rule("git", r"(?:[^/]+/)*(?:\.git|\.githooks|\.husky)/.*",
          "{path} is git's own folder or hooks: git runs the hooks and reads the config"),
    # builds, installs and CI: what `pip install`, `make`, a container build or a CI runner executes
    _rule("build", r"requirements[^/]*\.(?:txt|in)|constraints[^/]*\.txt|pyproject\.toml|setup\.cfg|pipfile(?:\.lock)?|"
                   r"environment\.ya?ml|package\.json|makefile|gnumakefile|dockerfile[^/]*|containerfile|"
                   r"(?:docker-)?compose[^/]*\.ya?ml|tox\.ini|\.devcontainer\.json|\.rprofile|rprofile\.site|"
                   r"startup\.jl|\.gitlab-ci\.ya?ml|\.travis\.ya?ml|azure-pipelines\.ya?ml|bitbucket-pipelines\.ya?ml|"
                   r"jenkinsfile",
          "{name} names what an install, a build, R or Julia at start, or a CI runner executes"),
    _rule("build", r"(?:[^/]+/)*(?:\.github/(?:workflows|actions)|\.circleci|\.buildkite|\.devcontainer)/.*",
          "{path} is a CI or dev-container definition: a runner executes what it names"),
    # other agents' and editors' MCP settings
    _rule("mcp", r"\.codex/config\.toml|\.zed/settings\.json|opencode\.jsonc?|\.continue/.*|\.windsurf/.*",
          "{name} configures an agent's or an editor's MCP servers: it starts the commands it names"),
    # desktop sessions and services
    _rule("autostart", r"(?:[^/]+/)*(?:\.config/autostart|\.config/systemd/user|\.config/upstart|\.kde4?/Autostart|"
                       r"\.config/plasma-workspace/env|Library/LaunchAgents)/.*",
          "{path} is an autostart entry: the desktop session or the service manager runs it"),
    # debuggers, editors, IDE tasks
    _rule("tools", r"\.pdbrc(?:\.py)?|\.gdbinit|\.lldbinit|\.exrc|\.vimrc|\.nvimrc|\.emacs|\.config/nvim/.*|"
                   r"\.vscode/(?:tasks|launch)\.json",
          "{name} is read and run by a debugger or an editor when it starts in this folder"),
)

_MCP_CONTENT = re.compile(r"[\"']?mcpServers[\"']?\s*[:=]|\"servers\"\s*:\s*\{[^{}]*\{[^{}]*\"(?:command|url)\"",
                          re.IGNORECASE)


def _normal(path: str) -> str:
    """The name as a file system may treat it: NFKC, case-folded, `\\` as a separator, `.`/`..` resolved."""
    text = unicodedata.normalize("NFKC", path).replace("\\", "/").casefold()
    return posixpath.normpath(text).rstrip("/. ").lstrip("/") if text.strip() else ""


def _reason(rule: Rule, path: str, norm: str) -> str:
    shown = posixpath.normpath(path.replace("\\", "/")).rstrip("/. ")
    name = posixpath.basename(shown) or posixpath.basename(norm)
    parts = shown.split("/")
    return rule.why.format(name=name, stem=name.split(".")[0], parent=parts[-2] if len(parts) > 1 else "",
                           path=path)


def runs_later(path: str, contents: Iterable[str] = (), *, sources: Iterable[str] = ()) -> str | None:
    """Why writing `contents` to `path` makes something run later, or None for plain data.

    `sources`: files the kernel's settings name as MCP configurations or startup scripts (matched by path and
    by name, as written or resolved)."""
    if not isinstance(path, str) or not path.strip():
        return None
    norm = _normal(path)
    if not norm:
        return None
    name = posixpath.basename(norm)
    for source in sources:
        src = _normal(str(source))
        if src and (src == norm or norm.endswith("/" + src) or src.endswith("/" + norm)):
            return f"{name} is code this notebook's settings run later (an MCP configuration, a file an MCP " \
                   "server runs, a startup script)"
    startup = os.environ.get("PYTHONSTARTUP")
    if startup and posixpath.basename(_normal(startup)) == name:
        return f"{name} is this kernel's PYTHONSTARTUP file: Python runs it at start"
    for rule in RULES:
        if rule.pattern.search(norm):
            return _reason(rule, path, norm)
    for text in contents:
        if isinstance(text, str) and defines_mcp(text):
            return mcp_reason(name)
    return None


def mcp_reason(name: str) -> str:
    return f"{name} would define MCP servers (its text has \"mcpServers\"): a run given it as its MCP " \
           "configuration starts the commands it names"


MAX_JSON = 20_000_000  # JSON larger than this is not parsed to look for MCP servers: it is taken to define some


def defines_mcp(text: str) -> bool:
    """Text nbagent would read as an MCP configuration (mcp.parse: an object with "mcpServers" or "servers"), found
    by the words anywhere in it or, for JSON, by its keys once parsed (so `"\\u006dcpServers"` is caught too). A JSON
    object too large to parse here counts as one: the check fails closed."""
    if _MCP_CONTENT.search(text):
        return True
    head = text.lstrip()[:1]
    if head != "{":
        return False
    if len(text) > MAX_JSON:
        return True
    import json

    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and any(k in data for k in ("mcpServers", "servers"))
