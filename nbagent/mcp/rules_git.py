"""How `mcp-server-git` (PyPI) reads its `repo_path`, mirrored: which repository, which git folder, which tree.

Its tools open `git.Repo(repo_path)` (GitPython): the path is `~`- and `$VAR`-expanded with the server's own
environment, made absolute from the server's working folder and normalised by its words (`a/link/..` is `a`); the
repository is `PATH/.git` (a folder, or a file saying `gitdir: ELSEWHERE`), else PATH itself when it is a git
folder (its working tree is then the folder above, or its `core.worktree`). Its git commands run in that tree and
read `core.worktree` too. So a call reaches the working tree, the git folder and the folders those name, and
every one of them must be inside the notebook's folder; `git_add`'s `files` are relative to the working tree.

What a checkout, a commit (which runs the repository's hooks), an add or a new branch writes cannot be seen from
its arguments: those tools' effect is unknown (rules.py makes them WRITE_HIGH_RISK unless your own configuration
sets their risk). The tools that only read are known to read.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Mapping, Sequence

READS = frozenset({"git_status", "git_diff_unstaged", "git_diff_staged", "git_diff", "git_log", "git_show",
                   "git_branch"})
_SERVER = re.compile(r"mcp[-_]server[-_]git(?:[=@<>~!].*)?", re.IGNORECASE)


class Refused(ValueError):
    """The repository a call names reaches outside what nbagent can judge (one line, said to the model)."""


def is_server(command: str, args: Sequence[str]) -> bool:
    """Whether this command line runs mcp-server-git: its console script, `python -m mcp_server_git`, or a
    launcher's (`uvx mcp-server-git`, `uv run mcp-server-git`, `pipx run mcp-server-git`)."""
    name = posixpath.basename(command.replace("\\", "/"))
    if _SERVER.fullmatch(name.removesuffix(".exe")):
        return True
    words = [w for w in args if not w.startswith("-")]
    if "-m" in args:
        i = list(args).index("-m")
        return i + 1 < len(args) and args[i + 1] == "mcp_server_git"
    return name in ("uvx", "uv", "pipx") and any(_SERVER.fullmatch(w) for w in words[:3])


def expand(repo_path: str, cwd: str, env: Mapping[str, str]) -> str:
    """GitPython's `expand_path`: `~` and `$VAR` expanded with the server's environment, absolute from its working
    folder, normalised by words."""
    home = env.get("HOME") or os.path.expanduser("~")
    p = home + repo_path[1:] if repo_path == "~" or repo_path.startswith("~/") else repo_path
    p = _expandvars(p, env)
    return posixpath.normpath(posixpath.join(cwd, p))


def _expandvars(text: str, env: Mapping[str, str]) -> str:
    """`os.path.expandvars` with another environment: `$NAME` and `${NAME}` when NAME is set, else left as is."""
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return env.get(name, m.group(0))
    return re.sub(r"\$(?:(\w+)|\{([^}]*)\})", one, text)


def _is_git_dir(d: str) -> bool:
    return (os.path.isdir(posixpath.join(d, "objects")) and os.path.isdir(posixpath.join(d, "refs"))
            and os.path.exists(posixpath.join(d, "HEAD")))


def _gitfile(dotgit: str) -> str | None:
    """The folder a `.git` file names (`gitdir: PATH`, relative to the file's folder)."""
    try:
        with open(dotgit, encoding="utf-8", errors="replace") as f:
            first = f.read(4096).split("\n", 1)[0]
    except OSError:
        return None
    if not first.startswith("gitdir:"):
        return None
    target = first[len("gitdir:"):].strip()
    return posixpath.normpath(posixpath.join(posixpath.dirname(dotgit), target))


def _config_worktree(git_dir: str) -> str | None:
    """`core.worktree` of a git folder's config (relative to the git folder), if it sets one."""
    try:
        with open(posixpath.join(git_dir, "config"), encoding="utf-8", errors="replace") as f:
            text = f.read(1_000_000)
    except OSError:
        return None
    section = ""
    found = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line[1:].split("]", 1)[0].strip().lower()
        elif section == "core" and "=" in line:
            key, value = (s.strip() for s in line.split("=", 1))
            if key.lower() == "worktree":
                found = value.strip('"')
    return None if found is None else posixpath.normpath(posixpath.join(git_dir, found))


def reach(path: str, env: Mapping[str, str]) -> tuple[str, list[str]]:
    """(the working tree the server's git commands run in, every other folder the repository at `path` reaches:
    its git folder (its objects and refs, the object folders it borrows), a common folder, a `core.worktree`)."""
    dotgit = posixpath.join(path, ".git")
    others: list[str] = []
    tree = path
    git_dir: str | None = None
    if os.path.isdir(dotgit) and _is_git_dir(dotgit):
        git_dir = dotgit
    elif os.path.isfile(dotgit):
        git_dir = _gitfile(dotgit)
    elif _is_git_dir(path):
        git_dir, tree = path, posixpath.dirname(path)
    if git_dir is not None:
        # the git folder, and what in it may lead elsewhere (a link, objects borrowed from another repository)
        others += [git_dir, posixpath.join(git_dir, "objects"), posixpath.join(git_dir, "refs")]
        try:
            with open(posixpath.join(git_dir, "objects", "info", "alternates"), encoding="utf-8",
                      errors="replace") as f:
                others += [posixpath.join(git_dir, "objects", line.strip()) for line in f.read(65536).splitlines()
                           if line.strip() and not line.startswith("#")]
        except OSError:
            pass
        for name in ("commondir", "gitdir"):
            named = posixpath.join(git_dir, name)
            try:
                with open(named, encoding="utf-8", errors="replace") as f:
                    text = f.read(4096).strip()
            except OSError:
                continue
            if text:
                others.append(posixpath.normpath(posixpath.join(git_dir, text)))
        worktree = env.get("GIT_WORK_TREE") or _config_worktree(git_dir)
        if worktree:
            tree = posixpath.normpath(posixpath.join(git_dir, worktree))
    for name in ("GIT_DIR", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY"):
        if env.get(name):
            others.append(env[name])
    return tree, others
