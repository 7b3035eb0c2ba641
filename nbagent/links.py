"""The symbolic links inside the notebook's folder, indexed by what they lead to: the other names of a file.

A write's effect is the file it lands on, but a file can be reached under other names: a repository can ship
`helper.py -> data/cache.txt`, and then writing `data/cache.txt` plants code that `import helper` runs, though
neither the written name nor the resolved one says so. So before a write is judged, the links that lead to its
file (or to a folder holding it) are looked up here, and their names count for the write's risk (effects.py).

The index is rebuilt incrementally: a folder is read again only when its modification time changed (a link
made, removed or replaced changes its folder's), so a check costs one `stat` per folder. It is bounded (folders
and entries read per refresh); past the bound it says it is partial, and effects.py then treats a write as high
risk rather than guess. The log (`*.nbagent`), git's object store and `.cache` are not walked: nothing there is
a link anything runs through.
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

MAX_FOLDERS = 20_000
MAX_ENTRIES = 400_000
_SKIP = (".git/objects", ".cache")


@dataclass
class _Folder:
    mtime: int
    links: list[str] = field(default_factory=list)  # names (relative to the root) of the links in this folder
    folders: list[str] = field(default_factory=list)


class LinkIndex:
    """Every symbolic link under `root` (not followed), with where it leads inside `root`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.realpath(root))
        self._folders: dict[str, _Folder] = {}
        self._lock = threading.Lock()
        self.partial = False

    def _scan(self, rel: str, st: os.stat_result, budget: list[int]) -> _Folder:
        found = _Folder(mtime=st.st_mtime_ns)
        path = self.root / rel if rel != "." else self.root
        try:
            with os.scandir(path) as it:
                for entry in it:
                    budget[1] -= 1
                    if budget[1] < 0:
                        self.partial = True
                        break
                    name = entry.name if rel == "." else f"{rel}/{entry.name}"
                    if entry.is_symlink():
                        found.links.append(name)
                    elif entry.is_dir(follow_symlinks=False) and not name.endswith(".nbagent") and name not in _SKIP:
                        found.folders.append(name)
        except OSError:
            pass
        return found

    def links(self) -> list[str]:
        """Every link's name, after re-reading the folders that changed since the last call."""
        with self._lock:
            self.partial = False
            budget = [MAX_FOLDERS, MAX_ENTRIES]
            seen: dict[str, _Folder] = {}
            todo = ["."]
            while todo:
                rel = todo.pop()
                budget[0] -= 1
                if budget[0] < 0:
                    self.partial = True
                    break
                try:
                    st = os.lstat(self.root / rel if rel != "." else self.root)
                except OSError:
                    continue
                if not stat.S_ISDIR(st.st_mode):
                    continue
                known = self._folders.get(rel)
                folder = known if known is not None and known.mtime == st.st_mtime_ns else self._scan(rel, st, budget)
                seen[rel] = folder
                todo.extend(folder.folders)
            self._folders = seen
            return [name for f in seen.values() for name in f.links]

    def names_of(self, rel: str) -> list[str]:
        """The other names of the file `rel` (relative to the root): each link leading to it, or to a folder
        holding it (then the link's name with the rest of the path)."""
        out = []
        for name in self.links():
            try:
                real = os.path.realpath(self.root / name)
            except OSError:
                continue
            target = os.path.relpath(real, self.root)
            if target == ".." or target.startswith("../"):
                continue
            target = Path(target).as_posix()
            if rel == target:
                out.append(name)
            elif rel.startswith(target + "/") or target == ".":
                out.append(name + "/" + (rel if target == "." else rel[len(target) + 1:]))
        return out
