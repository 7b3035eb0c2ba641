"""Neither nbagent nor the model library is loaded from the working folder: a module there that would stand in for
one of their installed packages stops the load (or the `%%agent` cell), in one line, before anything is imported.

Why: a kernel puts its working folder on `sys.path` (as `''`, before site-packages), so a `litellm.py`, an
`openai/` package or an `httpx.py` in a notebook's folder (a cloned repository, a downloaded example) is what
`import litellm` runs. A person's own `import litellm` would run it too, but nbagent imports the library by itself:
in the background after `%load_ext` when a model is configured, or for an `%%agent` cell. Code that nobody chose
to run must not run because nbagent was loaded. The same holds for nbagent's own dependencies (pydantic, tinydb,
nh3, wcmatch, markdown-it...), which a kernel imports at its first `%%agent` cell: `check("nbagent")` runs before
each cell's work (nbagent/ipython/entry.py) and before anything is imported ahead of one (nbagent/ipython/loading.py).

What counts: the import names of litellm and of every distribution it requires (its requirement closure, markers
evaluated, no extras), found in a working folder as a module (`NAME.py`, `.pyc`, an extension module), a regular
package (`NAME/__init__.py`), or a folder holding Python that joins an installed namespace package of that name, and
not imported yet (an imported module is the one in use already; a namespace package still takes submodules from the
folder). A working folder is a `sys.path` entry that is `''` or the current folder. The folder is listed first; the
closure is computed (once per process) only when the folder holds a module or a folder at all, and only entries of
those names are looked into.

Not covered: a module litellm imports without requiring it (an optional speed-up it tries and does without), and
`sys.path` entries other than the working folder (PYTHONPATH, `.pth` files), which the person set up.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
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


def _modules_in(folder: Path, names: Callable[[], frozenset[str]]) -> dict[str, Path]:
    """The top-level names among `names()` that `folder` itself would be imported for: modules, regular packages,
    and folders joining an installed namespace package (`opentelemetry`, `tiktoken_ext`: its path lists the working
    folder's portion first, so what is in there comes before the installed modules). A folder of another name is
    never looked into: the check stays one listing of the folder, however many folders it holds."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return {}
    found: list[tuple[str, str, bool]] = []  # (import name, path, a folder)
    for entry in entries:
        name = entry.name
        try:
            if entry.is_dir():
                if name.isidentifier():
                    found.append((name, entry.path, True))
                continue
        except OSError:
            continue
        for suffix in _SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                found.append((name[: -len(suffix)], entry.path, False))
                break
    if not found:
        return {}
    wanted_names = names()
    out: dict[str, Path] = {}
    for name, path, is_dir in found:
        if name not in wanted_names or name in out:
            continue
        if not is_dir or any(os.path.exists(os.path.join(path, f"__init__{s}")) for s in _SUFFIXES) or (
                _installed_namespace(name) and _holds_python(path)):
            out[name] = Path(path)
    return out


def _installed_namespace(name: str) -> bool:
    """Whether `import name` finds no module or regular package outside the working folders, only folders (a
    namespace package, which a folder of the working folder joins)."""
    here = {os.path.realpath(str(f)) for f in working_folders()}
    portions = False
    for entry in sys.path:
        if not entry or os.path.realpath(entry) in here:
            continue
        base = os.path.join(entry, name)
        if any(os.path.exists(base + s) or os.path.exists(os.path.join(base, f"__init__{s}")) for s in _SUFFIXES):
            return False
        portions = portions or os.path.isdir(base)
    return portions


def _holds_python(path: str) -> bool:
    """A module, or a folder that may hold one, directly inside `path` (a folder of data holds none)."""
    try:
        return any(e.is_dir() or e.name.endswith(_SUFFIXES) for e in os.scandir(path))
    except OSError:
        return False


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


def _regular(name: str) -> bool:
    """Whether the imported module `name` is a module or a regular package (not a namespace package)."""
    return getattr(sys.modules.get(name), "__file__", None) is not None


def check(root: str = ROOT) -> None:
    """Raise ShadowedLibrary when a working folder holds a module that `import root` would take in place of an
    installed one; else return (cheaply: one listing of each working folder)."""
    local: dict[str, Path] = {}
    for folder in working_folders():
        for name, path in _modules_in(folder, lambda: wanted(root)).items():
            # (an imported namespace package still takes its submodules from the folder's portion)
            if (name not in sys.modules or (path.is_dir() and not _regular(name))) and \
                    name not in sys.stdlib_module_names:
                local.setdefault(name, path)
    clash = sorted(local)
    if clash:
        shown = ", ".join(str(local[name]) for name in clash[:3]) + (" …" if len(clash) > 3 else "")
        who = "the model library needs" if root == ROOT else f"{root} needs"
        plural = len(clash) > 1
        raise ShadowedLibrary(
            f"nbagent: {_WHAT.get(root, 'not loading ' + root)}: {shown} in the working folder would be imported in "
            f"place of the installed package{'s' if plural else ''} {', '.join(repr(n) for n in clash)}, which "
            f"{who}. Rename or move it (or start the kernel in another folder), then run "
            "the cell again.")
