"""How `mcp-server-git` (PyPI) reads its `repo_path`, mirrored: which repository, which git folder, which tree.

Its tools open `git.Repo(repo_path)` (GitPython): the path is `~`- and `$VAR`-expanded with the server's own
environment, made absolute from the server's working folder and normalised by its words (`a/link/..` is `a`); the
repository is `PATH/.git` (a folder, or a file saying `gitdir: ELSEWHERE`), else PATH itself when it is a git
folder (its working tree is then the folder above, or its `core.worktree`). Its git commands run in that tree and
read `core.worktree` too. So a call reaches the working tree, the git folder and the folders those name, and
every one of them must be inside the notebook's folder; `git_add`'s `files` are relative to the working tree.

What a checkout, a commit (which runs the repository's hooks), an add or a new branch writes cannot be seen from
its arguments: those tools' effect is unknown (rules.py makes them WRITE_HIGH_RISK unless your own configuration
sets their risk). The tools that only read are known to read, unless the repository says otherwise: git runs
commands a repository's own config names (`core.fsmonitor` at every status, a `filter.<x>.clean` for the files its
`.gitattributes` route there, `diff.external`, a textconv) and its hooks (`post-index-change` when a status rewrites
the index), in the repository and in each submodule it enters. A tarball's `.git/` brings those along, so a call on
such a repository runs code the repository chose (`commands`): WRITE_HIGH_RISK whatever else says otherwise.
"""

from __future__ import annotations

import os
import posixpath
import re
import subprocess
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
    others: list[str] = []
    git_dir, tree = _git_dir(path)
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


# git-config keys whose value is a command that a tool of mcp-server-git makes git run (git-config(1)): the index
# refresh of every status or diff (core.fsmonitor, unless a boolean: git's own daemon), the files a status or diff
# reads (clean and process filters), a diff's external and textconv programs, what a checkout writes (smudge) or
# merges (a stash applied: merge drivers). Not the pager or the editor (git runs none without a terminal) nor a
# remote's helpers (no tool of the server fetches or pushes).
_COMMAND_KEY = re.compile(r"core\.fsmonitor|diff\.external|diff\..+\.(?:command|textconv)|"
                          r"filter\..+\.(?:clean|smudge|process)|merge\..+\.driver")
_BOOLEAN = frozenset({"", "true", "false", "yes", "no", "on", "off", "1", "0"})
# the hooks git may run for a command that only reads: a status that refreshed the index writes it back
READ_HOOKS = ("post-index-change", "reference-transaction")
_REPOSITORY_SCOPES = ("local", "worktree")  # the repository's own config (and what it includes), not the person's
_SUBMODULES = 32  # repositories looked into for one call (the repository and its submodules, nested)


def _git(env: Mapping[str, str], *args: str) -> str | None:
    """git's output for these arguments, or None where git cannot read the repository (then the server's git
    cannot either, and runs nothing of it). The kernel's own git, found on the kernel's PATH, with the server's
    HOME only: never a program or a setting the entry's environment names (a `PATH=./bin` would run the
    repository's `git` as nbagent decides)."""
    run_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": env.get("HOME") or os.path.expanduser("~"),
               "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    try:
        # (from the root: a `.` on the PATH never finds a `git` of the notebook's folder)
        done = subprocess.run(["git", *args], capture_output=True, env=run_env, timeout=20, stdin=subprocess.DEVNULL,
                              cwd=os.sep)
    except (OSError, ValueError):
        return None
    except subprocess.TimeoutExpired as exc:
        raise Refused("git took too long to read the repository's config") from exc
    return done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None


def _git_dir(path: str) -> tuple[str | None, str]:
    """(the git folder GitPython opens for `path`, the working tree), as `reach` finds them."""
    dotgit = posixpath.join(path, ".git")
    if os.path.isdir(dotgit) and _is_git_dir(dotgit):
        return dotgit, path
    if os.path.isfile(dotgit):
        return _gitfile(dotgit), path
    if _is_git_dir(path):
        return path, posixpath.dirname(path)
    return None, path


def commands(path: str, env: Mapping[str, str], only_reads: bool) -> str | None:
    """Why a call on the repository at `path` runs code the repository chose (its own config names a command git
    runs, or it holds a hook git runs), in one line; None when it names none. Read by git itself (`git config
    --show-scope --includes`: includes and conditional includes as git follows them), for the repository and each
    populated submodule a status enters."""
    todo, seen = [path], 0
    while todo and seen < _SUBMODULES:
        repo = todo.pop()
        seen += 1
        git_dir, tree = _git_dir(repo)
        if git_dir is None:
            continue
        listed = _git(env, f"--git-dir={git_dir}", "config", "--list", "--show-scope", "--show-origin", "--includes",
                      "-z")
        if listed is None:
            continue
        fields = listed.split("\0")
        hooks_path = None
        for scope, origin, entry in zip(fields[0::3], fields[1::3], fields[2::3], strict=False):
            key, _, value = entry.partition("\n")
            key = key.lower()
            if scope not in _REPOSITORY_SCOPES:
                continue
            if key == "core.hookspath":
                hooks_path = value
            elif _COMMAND_KEY.fullmatch(key) and not (key == "core.fsmonitor" and value.lower() in _BOOLEAN):
                where = origin.removeprefix("file:")
                return (f"git would run a command the repository's config names: {key} = {_clip(value)} (in "
                        f"{posixpath.join(tree, where) if not posixpath.isabs(where) else where})")
        common = git_dir
        try:
            with open(posixpath.join(git_dir, "commondir"), encoding="utf-8", errors="replace") as f:
                common = posixpath.normpath(posixpath.join(git_dir, f.read(4096).strip()))
        except OSError:
            pass
        if hooks_path is not None and (hooks_path == "~" or hooks_path.startswith("~/")):
            hooks_path = (env.get("HOME") or os.path.expanduser("~")) + hooks_path[1:]
        hooks = posixpath.join(tree, hooks_path) if hooks_path is not None else posixpath.join(common, "hooks")
        try:
            names = list(READ_HOOKS) if only_reads else sorted(n for n in os.listdir(hooks)
                                                               if not n.endswith(".sample"))
        except OSError:
            names = []
        for name in names:
            hook = posixpath.join(hooks, name)
            if os.path.isfile(hook) and os.access(hook, os.X_OK):
                return f"git would run the repository's hook {hook}"
        staged = _git(env, f"--git-dir={git_dir}", f"--work-tree={tree}", "ls-files", "--stage", "-z")
        for line in (staged or "").split("\0"):
            if line.startswith("160000 ") and "\t" in line:  # a submodule: a status looks into it if it is there
                todo.append(posixpath.join(tree, line.split("\t", 1)[1]))
    if todo:
        return f"the repository has more than {_SUBMODULES} submodules, whose configs were not all read"
    return None


def _clip(text: str, width: int = 160) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"
