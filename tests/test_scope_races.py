"""A folder swapped for a link to somewhere outside, while the file tools work, never lets them out.

The attack: a thread keeps exchanging `root/d` (a real folder) with a symbolic link to a folder outside the root
(atomically, with renameat2's RENAME_EXCHANGE where the kernel has it), while each file tool acts on `d/...` thousands
of times. Every call may succeed (it saw the real folder) or fail (it saw the swap); the property is that nothing is
ever read from, written to, created in or deleted from the outside folder. The outside folder holds files of the same
names, so any escape shows. The tests run once through `openat2` (where the kernel offers it) and once folder by
folder (`O_NOFOLLOW` walk), the fallback for kernels without it.

Deterministic companions swap at the worst moment (right after the scope check, before the use) for every tool.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nbagent.scope import beneath
from nbagent.scope.rules import Scope, ScopeDenied
from nbagent.tools.base import ToolError
from nbagent.tools.files import FileTools

OPS = 3000  # per tool and per resolution mode: the minimum
SECRET = "OUTSIDE-SECRET-" + "x" * 40 + "\n"
INSIDE = "inside\n"

_libc = ctypes.CDLL(None, use_errno=True)


def _exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (renameat2 RENAME_EXCHANGE); two renames where the kernel cannot."""
    if getattr(_libc, "renameat2", None) is not None:
        if _libc.renameat2(-100, os.fsencode(a), -100, os.fsencode(b), 2) == 0:
            return
        if ctypes.get_errno() not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(ctypes.get_errno(), "renameat2")
    tmp = a.with_name(a.name + ".swap")
    os.rename(a, tmp)
    os.rename(b, a)
    os.rename(tmp, b)


class Swapper:
    """Keeps exchanging root/d (a folder) and root/d.link (a link to the outside folder) until stopped."""

    def __init__(self, root: Path, outside: Path) -> None:
        self.d, self.link = root / "d", root / "d.link"
        os.symlink(outside, self.link)
        self.swaps = 0
        self.pause = 20e-6
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            _exchange(self.d, self.link)
            self.swaps += 1
            time.sleep(self.pause)  # about as often as a tool call: every state is seen, the machine not starved

    def __enter__(self) -> Swapper:
        self._old = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)  # interleave the two threads finely
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        sys.setswitchinterval(self._old)
        if self.d.is_symlink():  # leave the real folder in place
            _exchange(self.d, self.link)


def _snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    """Every entry below `folder`: inode and content hash (files) or "dir"."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        st = path.lstat()
        out[rel] = (st.st_ino, "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def _folders(tmp_path: Path, *names: str) -> tuple[Path, Path]:
    """root/d and an outside folder, each holding `names` (inside: INSIDE, outside: SECRET)."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    for folder, text in ((root / "d", INSIDE), (outside, SECRET)):
        for name in names:
            (folder / name).write_text(text)
    return root, outside


@pytest.fixture(params=["openat2", "walk"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    if request.param == "openat2" and not beneath.HAVE_OPENAT2:
        pytest.skip("this kernel has no openat2 (the walk mode covers it)")
    root, outside = _folders(tmp_path, "f.txt")
    (outside / "only-outside.txt").write_text(SECRET)
    ft = FileTools(Scope(root=root, base=root))
    ft.guard.fs.openat2 = request.param == "openat2"
    yield {"root": root, "outside": outside, "ft": ft, "before": _snapshot(outside)}


def _attempt(fn: Any, *args: Any, **kw: Any) -> Any:
    """The tool's reply, or None when it refused (the swap was seen: a clear tool error, never anything else)."""
    try:
        return fn(*args, **kw)
    except ToolError as exc:
        assert "OUTSIDE" not in str(exc)
        return None


def _tally(results: list[Any], swapper: Swapper) -> str:
    done = sum(r is not None for r in results)
    return f"{done} succeeded, {len(results) - done} refused, {swapper.swaps} swaps"


def test_reads_never_see_outside_bytes(world: dict[str, Any]) -> None:
    ft: FileTools = world["ft"]
    inside_sha = hashlib.sha256(INSIDE.encode()).hexdigest()
    results: dict[str, list[Any]] = {"read": [], "range": [], "meta": [], "list": [], "search": []}
    with Swapper(world["root"], world["outside"]) as sw:
        for _ in range(OPS):
            results["read"].append(r := _attempt(ft.read_file, "d/f.txt"))
            assert r is None or r["content"] == INSIDE
            results["range"].append(r := _attempt(ft.read_file, "d/f.txt", start_byte=0))
            assert r is None or r["content"] == INSIDE
            results["meta"].append(r := _attempt(ft.get_file_metadata, "d/f.txt"))
            assert r is None or (r["size"] == len(INSIDE) and r["sha256"] == inside_sha)
            results["list"].append(r := _attempt(ft.list_files, "d", pattern="only-*"))
            assert r is None or r["entries"] == []
            results["search"].append(r := _attempt(ft.search_content, "OUTSIDE", path="d"))
            assert r is None or r["matches"] == []
    assert sw.swaps > 0
    print({k: _tally(v, sw) for k, v in results.items()})
    assert _snapshot(world["outside"]) == world["before"]


def test_writes_never_touch_outside(world: dict[str, Any]) -> None:
    ft: FileTools = world["ft"]
    for folder, text in ((world["root"] / "d", INSIDE), (world["outside"], SECRET)):
        for i in range(OPS):
            (folder / f"victim{i}.txt").write_text(text)
    world["before"] = _snapshot(world["outside"])
    results: dict[str, list[Any]] = {"write": [], "create": [], "create_in_new_folder": [], "delete": []}
    with Swapper(world["root"], world["outside"]) as sw:
        for i in range(OPS):
            results["write"].append(_attempt(ft.write_file, "d/f.txt", f"written {i}\n"))
            results["create"].append(_attempt(ft.create_file, f"d/new{i}.txt", "new\n"))
            results["create_in_new_folder"].append(_attempt(ft.create_file, f"d/sub{i}/x.txt", "new\n"))
            results["delete"].append(_attempt(ft.delete_file, f"d/victim{i}.txt"))
    assert sw.swaps > 0
    print({k: _tally(v, sw) for k, v in results.items()})
    assert _snapshot(world["outside"]) == world["before"]  # nothing written, created, renamed or deleted outside
    inside = world["root"] / "d"
    assert not [p.name for p in inside.iterdir() if p.name.endswith(".nbagent-tmp")]  # no temp file left behind
    done = [i for i, r in enumerate(results["delete"]) if r is not None]
    assert all(not (inside / f"victim{i}.txt").exists() for i in done)


# ---------------------------------------------------------------------- the worst moment, every time


@pytest.fixture
def swapped_after_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """FileTools whose every scope check is followed at once by the swap (the check saw the real folder)."""
    root, outside = _folders(tmp_path, "f.txt", "victim.txt")
    os.symlink(outside, root / "d.link")
    ft = FileTools(Scope(root=root, base=root))
    check = ft.guard.check

    def check_then_swap(*a: Any, **kw: Any) -> Any:
        r = check(*a, **kw)
        if not (root / "d").is_symlink():
            _exchange(root / "d", root / "d.link")
        return r

    monkeypatch.setattr(ft.guard, "check", check_then_swap)
    return {"ft": ft, "outside": outside, "before": _snapshot(outside)}


@pytest.mark.parametrize("mode", ["openat2", "walk"])
@pytest.mark.parametrize("call", [
    ("read_file", {"path": "d/f.txt"}), ("read_file", {"path": "d/f.txt", "start_line": 1, "end_line": 1}),
    ("read_file", {"path": "d/f.txt", "start_byte": 0}), ("get_file_metadata", {"path": "d/f.txt"}),
    ("write_file", {"path": "d/f.txt", "content": "x"}), ("create_file", {"path": "d/new.txt", "content": "x"}),
    ("create_file", {"path": "d/sub/new.txt", "content": "x"}), ("delete_file", {"path": "d/victim.txt"}),
    ("list_files", {"path": "d"}), ("search_content", {"pattern": "OUTSIDE", "path": "d"}),
], ids=lambda c: c[0] + ("_" + "_".join(k for k in c[1] if k not in ("path", "content", "pattern")) or ""))
def test_swap_between_check_and_use_fails_the_call(swapped_after_check: dict[str, Any], call: tuple[str, dict],
                                                   mode: str) -> None:
    ft: FileTools = swapped_after_check["ft"]
    if mode == "openat2" and not beneath.HAVE_OPENAT2:
        pytest.skip("this kernel has no openat2")
    ft.guard.fs.openat2 = mode == "openat2"
    name, args = call
    try:
        out = getattr(ft, name)(**args)
    except ScopeDenied as exc:
        assert exc.rule == "changed" and "nothing was done" in exc.reason
    else:  # only the folder tools may answer: with what is inside (nothing), never the outside
        assert name in ("list_files", "search_content"), out
        assert "OUTSIDE" not in repr(out) and "f.txt" not in repr(out)
    assert _snapshot(swapped_after_check["outside"]) == swapped_after_check["before"]


def test_root_replaced_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "nb"
    root.mkdir()
    (root / "a.txt").write_text("a")
    ft = FileTools(Scope(root=root, base=root))
    os.rename(root, tmp_path / "moved")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "a.txt").write_text("OUTSIDE")
    os.symlink(tmp_path / "elsewhere", root)
    with pytest.raises(ToolError):
        ft.read_file("a.txt")


def test_through_the_agent_loop_nothing_outside_reaches_the_log(tmp_path: Path) -> None:
    """The way the bytes leaked before: the model asks to read and metadata d/f.txt (and write, create, delete) many
    times over while the folder is swapped; the log beside the notebook must never hold the outside bytes."""
    import asyncio

    from nbagent.gate.deciders import PolicyDecider
    from nbagent.gate.policy import Budget
    from nbagent.runtime import Agent
    from nbagent.tools.files import file_tools

    root, outside = _folders(tmp_path, "f.txt", "g.txt")
    before = _snapshot(outside)
    calls = [{"name": "read_file", "arguments": {"path": "d/f.txt"}},
             {"name": "get_file_metadata", "arguments": {"path": "d/f.txt"}},
             {"name": "search_content", "arguments": {"pattern": "SECRET", "path": "d"}},
             {"name": "write_file", "arguments": {"path": "d/g.txt", "content": "w\n"}}]
    script = {"turns": [{"tool_calls": calls} for _ in range(75)] + [{"content": "done"}]}
    a = Agent(script=script, tools=file_tools(Scope(root=root, base=root)), autonomy="L3",
              decider=PolicyDecider("all"), store=root / "nb.ipynb", budget=Budget(max_steps=1000))
    with Swapper(root, outside) as sw:
        result = asyncio.run(a.run("read d/f.txt again and again"))
    assert result.answer == "done" and sw.swaps > 0
    events = a.store.run_events(result.run_id)
    # every call ran, or failed at the check ("changed": the swap was seen first), or was denied (outside)
    calls = {e.payload.call_id for e in events if e.type in ("tool_call_started", "authorization_denied",
                                                              "tool_call_failed")}
    assert len(calls) == 300
    log = b"".join(p.read_bytes() for p in (root / "nb.nbagent").rglob("*") if p.is_file())
    assert b"OUTSIDE-SECRET" not in log
    assert _snapshot(outside) == before
