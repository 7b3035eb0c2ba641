"""Neither nbagent nor the model library is loaded from the working folder: a module there that would stand in for
one of their installed packages stops the load (or the `%%agent` cell), in one line, before anything is imported.

Why: a kernel puts its working folder on `sys.path` (as `''`, before site-packages), so a `litellm.py`, an
`openai/` package or an `httpx.py` in a notebook's folder (a cloned repository, a downloaded example) is what
`import litellm` runs. A person's own `import litellm` would run it too, but nbagent imports the library by itself:
in the background after `%load_ext` when a model is configured, or for an `%%agent` cell. Code that nobody chose
to run must not run because nbagent was loaded. The same holds for nbagent's own dependencies (pydantic, tinydb,
nh3, wcmatch, markdown-it...), which a kernel imports at its first `%%agent` cell: `check("nbagent")` runs before
each cell's work (nbagent/ipython/host.py) and before anything is imported ahead of one (nbagent/ipython/loading.py).

What counts: the import names of litellm and of every distribution it requires (its requirement closure, markers
evaluated, no extras), found in a working folder as a module (`NAME.py`, `.pyc`, an extension module) or a regular
package (`NAME/__init__.py`), and not imported yet (an imported one is the module in use already). A working
folder is a `sys.path` entry that is `''` or the current folder. The folder is listed first; the closure is
computed only when the folder holds a module at all, which a notebook folder rarely does.

Not covered: a module litellm imports without requiring it (an optional speed-up it tries and does without), and
`sys.path` entries other than the working folder (PYTHONPATH, `.pth` files), which the person set up.
"""

from __future__ import annotations

import functools
import os
import sys
from importlib import machinery, metadata
from pathlib import Path

__all__ = ["ShadowedLibrary", "check"]

ROOT = "litellm"
_SUFFIXES = tuple(machinery.all_suffixes())  # .py, .pyc, extension modules


class ShadowedLibrary(ImportError):
    """A module in the working folder would be imported in place of an installed package of the model library."""


def working_folders() -> list[Path]:
    here = os.getcwd()
    found: list[Path] = []
    for entry in sys.path:
        if entry == "" or (entry and os.path.realpath(entry) == os.path.realpath(here)):
            folder = Path(entry or here)
            if folder not in found:
                found.append(folder)
    return found


def _modules_in(folder: Path) -> dict[str, Path]:
    """Top-level names importable from `folder` itself: modules and regular packages (not namespace folders,
    which an installed package of the same name always wins over)."""
    out: dict[str, Path] = {}
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return out
    for entry in entries:
        name = entry.name
        try:
            if entry.is_dir():
                if any((Path(entry.path) / f"__init__{s}").exists() for s in _SUFFIXES):
                    out.setdefault(name, Path(entry.path))
                continue
        except OSError:
            continue
        for suffix in _SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                out.setdefault(name[: -len(suffix)], Path(entry.path))
                break
    return out


def _closure(root: str, without: tuple[str, ...] = ()) -> list[metadata.Distribution]:
    """The installed distributions `root` requires, directly or not (markers evaluated, no extras), not going
    into those named in `without`."""
    from packaging.requirements import InvalidRequirement, Requirement  # ipykernel's dependency
    from packaging.utils import canonicalize_name

    seen: dict[str, metadata.Distribution] = {}
    todo, done = [root], {canonicalize_name(name) for name in without}
    while todo:
        name = canonicalize_name(todo.pop())
        if name in done:
            continue
        done.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[name] = dist
        for text in dist.requires or ():
            try:
                req = Requirement(text)
                if req.marker is None or req.marker.evaluate({"extra": ""}):
                    todo.append(req.name)
            except (InvalidRequirement, ValueError):
                continue
    return list(seen.values())


def _import_names(dist: metadata.Distribution) -> set[str]:
    text = dist.read_text("top_level.txt")
    if text:
        return {line.strip() for line in text.splitlines() if line.strip()}
    names: set[str] = set()
    for file in dist.files or ():
        parts = file.parts
        if not parts or parts[0] in ("..", "__pycache__") or parts[0].endswith((".dist-info", ".egg-info", ".pth")):
            continue
        head = parts[0]
        if len(parts) > 1:
            names.add(head)
        else:
            for suffix in _SUFFIXES:
                if head.endswith(suffix):
                    names.add(head[: -len(suffix)].split(".")[0])
                    break
    return names


@functools.lru_cache(maxsize=4)
def wanted(root: str) -> frozenset[str]:
    """The import names of `root` and of every distribution it requires, but those _GUARDED_APART (~0.2 s for
    nbagent's ~100: computed once per process; a package installed later can only add names, which the check would
    then miss, never refuse wrongly)."""
    names = {root}
    for dist in _closure(root, _GUARDED_APART.get(root, ())):
        names |= _import_names(dist)
    return frozenset(names)


# What the kernel imports of nbagent's dependencies leaves out the model library's own: the model process imports
# it (never from the working folder), and where it is imported in the kernel, `check(ROOT)` guards it there
# (llm.import_litellm). So a `tiktoken.py` beside the notebook stops nothing that would not run it.
_GUARDED_APART = {"nbagent": (ROOT,)}

# what is refused, in the one line, by what the check protects
_WHAT = {ROOT: "not loading the model library", "nbagent": "not running the agent"}


def check(root: str = ROOT) -> None:
    """Raise ShadowedLibrary when a working folder holds a module that `import root` would take in place of an
    installed one; else return (cheaply: one listing of each working folder)."""
    local: dict[str, Path] = {}
    for folder in working_folders():
        for name, path in _modules_in(folder).items():
            if name not in sys.modules and name not in sys.stdlib_module_names:
                local.setdefault(name, path)
    if not local:
        return
    clash = sorted(set(local) & wanted(root))
    if clash:
        shown = ", ".join(str(local[name]) for name in clash[:3]) + (" …" if len(clash) > 3 else "")
        who = "the model library needs" if root == ROOT else f"{root} needs"
        plural = len(clash) > 1
        raise ShadowedLibrary(
            f"nbagent: {_WHAT.get(root, 'not loading ' + root)}: {shown} in the working folder would be imported in "
            f"place of the installed package{'s' if plural else ''} {', '.join(repr(n) for n in clash)}, which "
            f"{who}. Rename or move it (or start the kernel in another folder), then run "
            "the cell again.")
