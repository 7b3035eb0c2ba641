"""The symbolic links inside the notebook's folder, indexed by what they lead to: the other names of a file.

A write's effect is the file it lands on, but a file can be reached under other names: a repository can ship
`helper.py -> data/cache.txt`, and then writing `data/cache.txt` plants code that `import helper` runs, though
neither the written name nor the resolved one says so. So before a write is judged, the links that lead to its
file (or to a folder holding it) are looked up here, and their names count for the write's risk (effects.py).

Every folder under the notebook's is read (the store beside the notebook, `NAME.nbagent`, and git's object store
excepted: nothing there is a link anything runs through), and so is every folder outside it that a link inside
leads to, under the link's name: `mod -> ../lib/mod` with `lib/mod/__init__.py -> ../../nb/data/cache.txt` makes
`mod/__init__.py` another name of `data/cache.txt`. The index is kept current incrementally: a folder is read again
only when its modification time changed (a link made, removed or replaced changes its folder's), so a check costs
one `stat` per folder, and where the links lead is worked out again only when some folder changed. It is bounded
(folders, entries, links); past a bound it says it is partial, and effects.py then treats a write as high risk
rather than guess.
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

MAX_FOLDERS = 20_000
MAX_ENTRIES = 400_000
MAX_LINKS = 20_000


@dataclass
class _Folder:
    mtime: int
    links: list[str] = field(default_factory=list)  # names (relative to the root) of the links in this folder
    folders: list[str] = field(default_factory=list)  # sub-folders to read, and links to folders outside the root


class LinkIndex:
    """Every symbolic link under `root` (not followed, but for folders outside `root` a link leads to), with where
    it leads inside `root`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.realpath(root))
        self._folders: dict[str, _Folder] = {}
        self._lock = threading.Lock()
        self._resolved: list[tuple[str, str]] | None = None  # (link name, where it leads, relative), while unchanged
        self.partial = False

    def _skipped(self, name: str) -> bool:
        """The store beside the notebook (a top-level `*.nbagent`) and git's object store: never link folders."""
        return ("/" not in name and name.endswith(".nbagent")) or name == ".git/objects"

    def _outside_folder(self, name: str) -> bool:
        """A link leading to a folder outside the root (read under the link's name: what leads back counts)."""
        try:
            real = os.path.realpath(self.root / name)
        except OSError:
            return False
        inside = real == str(self.root) or real.startswith(str(self.root) + os.sep)
        return not inside and os.path.isdir(real)

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
                        if self._outside_folder(name):
                            found.folders.append(name)
                    elif entry.is_dir(follow_symlinks=False) and not self._skipped(name):
                        found.folders.append(name)
        except OSError:
            pass
        return found

    def links(self) -> list[str]:
        """Every link's name, after re-reading the folders that changed since the last call."""
        with self._lock:
            return self._refresh()

    def _refresh(self) -> list[str]:
        self.partial = False
        budget = [MAX_FOLDERS, MAX_ENTRIES]
        seen: dict[str, _Folder] = {}
        visited: set[tuple[int, int]] = set()  # folders by identity: a link loop is read once
        changed = False
        todo = ["."]
        while todo:
            rel = todo.pop()
            budget[0] -= 1
            if budget[0] < 0:
                self.partial = True
                break
            try:  # (a folder reached through a link outside the root: its own time, through the link)
                st = os.stat(self.root / rel if rel != "." else self.root)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) in visited:
                continue
            visited.add((st.st_dev, st.st_ino))
            known = self._folders.get(rel)
            if known is not None and known.mtime == st.st_mtime_ns:
                folder = known
            else:
                folder, changed = self._scan(rel, st, budget), True
            seen[rel] = folder
            todo.extend(folder.folders)
        changed = changed or seen.keys() != self._folders.keys()
        self._folders = seen
        if changed:
            self._resolved = None
        names = [name for f in seen.values() for name in f.links]
        if len(names) > MAX_LINKS:
            self.partial = True
            names = names[:MAX_LINKS]
        return names

    def _where(self) -> list[tuple[str, str]]:
        """(link, where it leads relative to the root) for every link leading inside; worked out again only when a
        folder changed (a link retargeted is a link replaced: its folder's time changes)."""
        names = self._refresh()
        if self._resolved is None:
            out = []
            for name in names:
                try:
                    real = os.path.realpath(self.root / name)
                except OSError:
                    continue
                target = os.path.relpath(real, self.root)
                if target != ".." and not target.startswith("../"):
                    out.append((name, Path(target).as_posix()))
            self._resolved = out
        return self._resolved

    def names_of(self, rel: str) -> list[str]:
        """The other names of the file `rel` (relative to the root): each link leading to it, or to a folder
        holding it (then the link's name with the rest of the path)."""
        with self._lock:
            where = self._where()
        out = []
        for name, target in where:
            if rel == target:
                out.append(name)
            elif rel.startswith(target + "/") or target == ".":
                out.append(name + "/" + (rel if target == "." else rel[len(target) + 1:]))
        return out
