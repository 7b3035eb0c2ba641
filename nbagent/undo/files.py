"""Undo what agent runs changed in the notebook's folder, checked against the log (see docs/undo.md).

    report = undo(store, "01M8...")              # the run and the runs it spawned
    report = undo(store, "01M8...", to=True)     # ...and every later run: the folder as before that run
    report.ok, report.conflicts, report.not_undoable, report.undo_run_id

Every file change a file tool made is in the log as the hashes of the content before and after it (the tool's
result: `before_sha256`, `after_sha256`; None = no file), and the content itself is in the store's blob folder.
Undo plans one restore per file (to the content before the earliest change undone), checks that each file is
still what the runs left (else a conflict: nothing is changed unless `force`), then restores newest change first,
through the scope guard, recording the restores as a run of model `nbagent/undo`, which can itself be undone.
What it plans and reports (`Restore`, `Conflict`, `UndoReport`...) are values in report.py, re-exported here.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import os
import stat
import time
from collections.abc import Collection, Container, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from nbagent.events.levels import Autonomy, Risk
from nbagent.events.model import (
    AnswerReady,
    Completed,
    CompletedWithErrors,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallStarted,
)
from nbagent.runtime.context import ms_since
from nbagent.runtime.recording import run_tree
from nbagent.scope.rules import Scope, ScopeGuard
from nbagent.store import RunNotFound, Store
from nbagent.store.blobs import BlobError, BlobStore
from nbagent.store.verify import verify_store
from nbagent.tools.base import ToolError
from nbagent.undo.cells import ACTED, CELL_TOOLS, CELL_UNDO_TOOL, KERNEL_NOTE, cell_changes, cell_conflicts, cell_name
from nbagent.undo.report import (  # what an undo finds and does, as values (report.py), re-exported here
    Conflict,
    FileChange,
    NotUndoable,
    Restore,
    UndoError,
    UndoReport,
    said,
)

UNDO_MODEL = "nbagent/undo"
UNDO_SESSION = "undo"  # its own session: an undo run never becomes the conversation a later %%agent continues
RESTORE_TOOL = "restore_file"
FILE_TOOLS = {"create_file": "created", "write_file": "written", "delete_file": "deleted",
              RESTORE_TOOL: "restored"}
# Tools with no effect to undo: reads, and the control tools (spawn_agent's children are undone themselves).
NO_EFFECT = {"list_files", "read_file", "search_content", "get_file_metadata", "list_variables", "inspect_variable",
             "respond_to_user", "done", "ask_human", "spawn_agent"}
MAX_DIFF_CHARS = 20_000


# ---------------------------------------------------------------------------------------------- reading the log


def _path_of(tool: str, result: dict[str, Any]) -> str | None:
    key = FILE_TOOLS.get(tool)
    value = result.get(key) if key else None
    return value if isinstance(value, str) else None


def collect(store: Store, run_ids: set[str]) -> tuple[list[FileChange], list[NotUndoable]]:
    """The file changes of these runs in log order, and the calls whose effects undo cannot reverse."""
    changes: list[FileChange] = []
    problems: list[NotUndoable] = []
    started: dict[tuple[str, str], str] = {}
    for e in _logged(store):
        if e.run_id not in run_ids:
            continue
        p: Any = e.payload
        if e.type == "tool_call_started":
            started[(e.run_id, p.call_id)] = p.tool
            if p.tool in CELL_TOOLS:
                problems.append(NotUndoable(run_id=e.run_id, call_id=p.call_id, tool=p.tool, why=(
                    "what undo does to its cell is listed above; what its code did in the kernel and on disk is not "
                    "undone")))
            elif p.tool == CELL_UNDO_TOOL:
                problems.append(NotUndoable(run_id=e.run_id, call_id=p.call_id, tool=p.tool, why=(
                    "a cell an undo removed or restored is not brought back: ask the agent to run it again")))
            elif p.tool not in NO_EFFECT and p.tool not in FILE_TOOLS:
                code = p.tool == "run_python"
                why = ("its effects in the kernel and on disk are not recorded" if code else
                       "an MCP tool: its effects are outside nbagent" if p.tool.startswith("mcp__") else
                       "a user tool or a tool without recorded content: its effects are not recorded")
                problems.append(NotUndoable(run_id=e.run_id, call_id=p.call_id, tool=p.tool, why=why))
        elif e.type == "tool_call_completed" and p.tool in FILE_TOOLS:
            result = p.result if isinstance(p.result, dict) else {}
            path = _path_of(p.tool, result)
            if path is None or "after_sha256" not in result or "before_sha256" not in result:
                problems.append(NotUndoable(run_id=e.run_id, call_id=p.call_id, tool=p.tool,
                                            why=str(result.get("undo") or "recorded without the content before "
                                                    "and after (file tools without a blob store, or a log older "
                                                    "than undo)")))
                continue
            changes.append(FileChange(run_id=e.run_id, call_id=p.call_id, tool=p.tool, path=path,
                                      before_sha256=result["before_sha256"], after_sha256=result["after_sha256"]))
    return changes, problems


# (the store, its events once read) while `log_checked` holds
_CHECKED: ContextVar[tuple[int, list[Any]] | None] = ContextVar("nbagent_undo_log_checked", default=None)


@contextlib.contextmanager
def log_checked(store: Store) -> Iterator[None]:
    """The log verified once (`check_log`) and read once for the previews made inside: the Undo… offers of a
    notebook's records (one for each record, asked together) would otherwise verify and parse the whole log once
    per record."""
    check_log(store)
    token = _CHECKED.set((id(store), []))
    try:
        yield
    finally:
        _CHECKED.reset(token)


def _logged(store: Store) -> list[Any]:
    """Every event of the log in order: read once inside `log_checked`, else now."""
    held = _CHECKED.get()
    if held is None or held[0] != id(store):
        return list(store.query_events())
    if not held[1]:
        held[1].extend(store.query_events())
    return held[1]


def check_log(store: Store) -> None:
    """Undo trusts the log to say what the runs changed, so it first checks it as `nbagent verify` does: a log
    that fails (an edited result could name a file no run touched) is an UndoError, and nothing is changed."""
    held = _CHECKED.get()
    if held is not None and held[0] == id(store):
        return
    report = verify_store(store)
    if not report.ok:
        more = f" (+{len(report.problems) - 1} more)" if len(report.problems) > 1 else ""
        raise UndoError(f"the log fails verification ({report.problems[0]}{more}); undo acts only on a log that "
                        f"verifies, nothing was changed: run `nbagent verify {shown(store.path)}` for details")


def shown(path: Path) -> str:
    """A path as a message names it: relative to the working folder (a kernel's is the notebook's) when inside it,
    so a saved notebook does not carry the home folder's path."""
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve()).as_posix() or "."
    except (ValueError, OSError):
        return str(path)


def undoers(store: Store) -> dict[str, list[str]]:
    """Each run that a completed undo run put back, with those undo runs in log order (`options.undo.runs`). An
    undo that failed was rolled back, so it put nothing back and is not counted."""
    out: dict[str, list[str]] = {}
    ids = sorted(str(row.get("id")) for row in store.runs.all() if row.get("model") == UNDO_MODEL and row.get("id"))
    for uid in ids:
        state = store.run_state(uid)
        spec = state.options.get("undo")
        if state.status.value != "completed" or not isinstance(spec, dict):
            continue
        for rid in spec.get("runs") or []:
            out.setdefault(str(rid), []).append(uid)
    return out


def standing_undo(store: Store, run_id: str, by_run: dict[str, list[str]] | None = None) -> str | None:
    """The undo run whose restores of `run_id` still stand (none of them was itself undone since), or None."""
    by_run = undoers(store) if by_run is None else by_run

    def standing(rid: str, seen: frozenset[str]) -> str | None:
        for uid in reversed(by_run.get(rid, [])):
            if uid not in seen and standing(uid, seen | {uid}) is None:  # (a loop only a hand-edited log has)
                return uid
        return None

    return standing(run_id, frozenset({run_id}))


def undo_history(store: Store, run_id: str) -> list[dict[str, Any]]:
    """Every completed undo of `run_id`, oldest first: its run id, when it ended, and the undo that undid it."""
    by_run = undoers(store)
    return [{"run_id": uid, "ended_at": store.run_state(uid).ended_at,
             "undone_by": standing_undo(store, uid, by_run), **undo_did(store, uid)} for uid in by_run.get(run_id, [])]


def undo_did(store: Store, undo_run_id: str) -> dict[str, Any]:
    """What an undo run did, from its own recorded steps: the files it restored, and each cell it removed, restored
    or kept (`{"name": "[4] x = 1", "action": "remove"|"restore"|"keep"}`): what its records may claim."""
    files, cells = 0, []
    for e in store.run_events(undo_run_id):
        p: Any = e.payload
        if e.type != "tool_call_completed" or not isinstance(p.result, dict):
            continue
        if p.tool == RESTORE_TOOL and p.call_id.startswith("undo"):
            files += 1
        elif p.tool == CELL_UNDO_TOOL and p.result.get("action") in ACTED:
            r = p.result
            cells.append({"name": str(r.get("name") or cell_name(str(r.get("cell_id")), None, "")),
                          "action": r["action"]})
    return {"files": files, "cells": cells}


def runs_to_undo(store: Store, run_id: str, *, to: bool = False) -> list[str]:
    """The run and its spawned runs; with `to`, also every run started after it (in log order). The log is
    verified first (`check_log`): every route to an undo (the command, `%agent undo`, the Undo panel's preview)
    comes through here."""
    check_log(store)
    tree = run_tree(store, run_id)
    if not to:
        return tree
    first = next(i for i, rid in enumerate(store.run_ids()) if rid == tree[0])
    later = [rid for rid in store.run_ids()[first:] if rid not in tree]
    return tree + later


def plan(changes: list[FileChange]) -> list[Restore]:
    """One restore per file, newest change first: from what the last change left to what the first one found."""
    by_path: dict[str, Restore] = {}
    order: list[str] = []
    for c in reversed(changes):
        r = by_path.get(c.path)
        if r is None:
            by_path[c.path] = Restore(path=c.path, expect_sha256=c.after_sha256, to_sha256=c.before_sha256)
            order.append(c.path)
        else:
            r.to_sha256, r.changes = c.before_sha256, r.changes + 1
    return [by_path[p] for p in order if by_path[p].expect_sha256 != by_path[p].to_sha256]


# ---------------------------------------------------------------------------------------------- the folder


class _Folder:
    """The notebook's folder, reached only through the scope guard (descriptors, never a re-resolved path)."""

    def __init__(self, root: Path) -> None:
        self.guard = ScopeGuard(Scope(root=root, base=root))

    def current(self, path: str) -> tuple[str | None, bytes | None]:
        """(sha256, content) of the file now, (None, None) when absent; ToolError when it is not a plain file."""
        self.guard.contain(path)  # outside or excluded now: refused (ScopeDenied)
        # the name itself, not what it resolves to: a link put where the run left a file is refused as such
        lexical = os.path.relpath(os.path.normpath(self.guard.scope.root / path), self.guard.scope.root)
        st = self.guard.fs.lstat(Path(lexical).as_posix())
        if st is None:
            return None, None
        if stat.S_ISLNK(st.st_mode):
            raise ToolError(f"{path} is now a symbolic link")
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{path} is now a folder")
        r = self.guard.check(path, "read", max_bytes=0)
        with self.guard.open_read(r) as f:
            data = f.read()
        return hashlib.sha256(data).hexdigest(), data

    def restore(self, path: str, data: bytes | None) -> None:
        """Put `data` at `path` (None: remove the file) through the guard."""
        st = self.guard.fs.lstat(path)
        if data is None:
            if st is not None:
                r = self.guard.check(path, "delete", max_bytes=0)
                self.guard.recheck(r)
                self.guard.delete(r)
            return
        if st is None:
            r = self.guard.check(path, "create")
            self.guard.write(r, data, create=True)
        else:
            r = self.guard.check(path, "write", max_bytes=0)
            self.guard.recheck(r)
            self.guard.write(r, data, create=False)


def _text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", errors="replace")


def _diff(left: bytes | None, now: bytes | None, path: str) -> str:
    if (left and b"\x00" in left[:8192]) or (now and b"\x00" in now[:8192]):
        return "(binary content differs)\n"
    a = "/dev/null" if left is None else f"left-by-run/{path}"
    b = "/dev/null" if now is None else f"now/{path}"
    text = "".join(difflib.unified_diff(_text(left).splitlines(keepends=True), _text(now).splitlines(keepends=True),
                                        a, b, n=3))
    return text if len(text) <= MAX_DIFF_CHARS else text[:MAX_DIFF_CHARS] + "\n… diff truncated\n"


# ---------------------------------------------------------------------------------------------- undo


def preview(store: Store, run_id: str, *, to: bool = False, force: bool = False,
            folder: str | Path | None = None, kept: Collection[str] = (), gone: Container[str] = ()) -> UndoReport:
    """What `undo` would do, checked against the folder now and changing nothing: the restores, each file changed
    since the run (a conflict, with its diff), the calls undo cannot reverse, and `undone_by` when an earlier undo
    already put the run back. What the Undo panel shows before any button; UndoError as `undo`."""
    return _prepare(store, run_id, to=to, force=force, folder=folder, kept=kept, gone=gone)[0]


def undo(store: Store, run_id: str, *, to: bool = False, force: bool = False, folder: str | Path | None = None,
         by: str = "user", kept: Collection[str] = (), gone: Container[str] = ()) -> UndoReport:
    """Undo a run (and its children; with `to`, every later run too). Conflicts refuse unless `force`; an
    UndoError means nothing was changed. The restores are recorded as a new run of model `nbagent/undo`. `kept`:
    the agent's cells the person edited and ran since (the kernel knows them): theirs, left as they are, and
    recorded as kept, so the log never says a cell went that stayed. `gone`: the agent's cells the page said the
    notebook no longer holds (the person deleted them): nothing is sent for them, and they are recorded as gone."""
    if store.readonly:
        raise UndoError(f"{shown(store.path)}: the log is open read-only; undo records a run, so it needs to write")
    report, contents, fs, what = _prepare(store, run_id, to=to, force=force, folder=folder, kept=kept,
                                          gone=gone)
    if report.undone_by:
        raise UndoError(f"{what} was already undone by run {report.undone_by}; nothing was changed (undoing run "
                        f"{report.undone_by} brings its changes back)")
    if report.conflicts:
        return report
    report.undo_run_id = _record(store, report, contents, fs, what=what, run_id=report.runs[0], to=to, force=force,
                                 by=by)
    return report


def _prepare(store: Store, run_id: str, *, to: bool, force: bool, folder: str | Path | None,
             kept: Collection[str] = (), gone: Container[str] = ()
             ) -> tuple[UndoReport, dict[str, bytes | None], _Folder, str]:
    """Everything checked and loaded before anything changes: the plan, the saved contents, the conflicts."""
    root = Path(folder) if folder is not None else store.path.parent
    try:
        run_id = store.resolve_run(run_id)
    except RunNotFound as exc:  # the same error, naming the log as a cell may save it (not by its absolute path)
        why = "ambiguous run id prefix" if "ambiguous" in str(exc) else "no such run"
        raise RunNotFound(run_id, shown(store.path), why) from None
    runs = runs_to_undo(store, run_id, to=to)
    busy = [rid for rid in runs if store.in_progress(rid)]
    if busy:
        raise UndoError(f"run {busy[0]} is still running in another process; undo it once it has ended")
    changes, problems = collect(store, set(runs))
    every = _logged(store)
    cells, cell_problems = cell_changes([e for e in every if e.run_id in set(runs)])
    for c in cells:
        c.gone = c.cell_id in gone
        c.kept = c.cell_id in kept and not c.gone
    problems += [NotUndoable(run_id=r, call_id=c, tool=t, why=w) for r, c, t, w in cell_problems]
    report = UndoReport(runs=runs, restores=plan(changes), not_undoable=problems, cells=cells)
    what = f"run {run_id}" + (" and every later run" if to else "")
    if not report.restores and not report.cells:
        raise UndoError(f"{what}: no file changes to undo, nor cells" + (
            f" ({len(problems)} call(s) not undoable: {', '.join(sorted({p.tool for p in problems}))})"
            if problems else ""))
    if not report.restores and all(c.kept or c.gone for c in report.cells):
        raise UndoError(f"{what}: nothing to undo: " + "; ".join(c.line() for c in report.cells))
    standing = standing_undo(store, run_id)
    report.undone_by = standing if standing is not None and standing not in runs else None
    if not force and not report.undone_by:
        for cell_id, why in cell_conflicts(every, set(runs), [c for c in cells if not c.kept and not c.gone]).items():
            report.conflicts.append(Conflict(path=f"cell {cell_id}", reason=why))
    blobs = BlobStore.of_store(store.path)
    fs = _Folder(root)
    contents: dict[str, bytes | None] = {}
    for r in report.restores:
        try:
            contents[r.path] = None if r.to_sha256 is None else blobs.get(r.to_sha256)
            left = None if r.expect_sha256 is None else blobs.get(r.expect_sha256)
        except BlobError as exc:
            raise UndoError(f"{r.path}: {exc}; nothing was changed") from None
        try:
            r.current_sha256, now = fs.current(r.path)
        except (ToolError, OSError) as exc:
            raise UndoError(f"{r.path}: {exc}; nothing was changed") from None
        if r.current_sha256 != r.expect_sha256 and not force and not report.undone_by:
            reason = ("removed since" if r.current_sha256 is None else
                      "created since" if r.expect_sha256 is None else "changed since")
            report.conflicts.append(Conflict(path=r.path, reason=f"{reason} the run left it",
                                             diff=_diff(left, now, r.path)))
    return report, contents, fs, what


def _record(store: Store, report: UndoReport, contents: dict[str, bytes | None], fs: _Folder, *, what: str,
            run_id: str, to: bool, force: bool, by: str) -> str:
    """Restore every file as one recorded run, each restore a tool call with the hashes before and after. If one
    fails (a read-only folder...), the files already restored are put back, so the undo changes nothing."""
    session = store.session(UNDO_SESSION)
    run = store.create_run(session.id, f"undo {what}", model=UNDO_MODEL, autonomy=Autonomy.L3,
                           options={"undo": {"run_id": run_id, "to": to, "force": force, "runs": report.runs}},
                           lease=True)
    report.undo_run_id = run.id
    blobs = BlobStore.of_store(store.path)
    reason = f"undo of {what}, asked by {by}" + (" (--force)" if force else "")

    def step(call_id: str, path: str, to_sha: str | None, data: bytes | None, why: str) -> str | None:
        """One recorded restore; the hash of what it replaced, or raises after recording the failure."""
        started = store.append(ToolCallStarted(
            call_id=call_id, tool=RESTORE_TOOL, arguments={"path": path, "to_sha256": to_sha},
            risk=Risk.WRITE_HIGH_RISK, target=path, reason=why), run_id=run.id)
        t0 = time.perf_counter()
        try:
            before, now = fs.current(path)
            if now is not None:
                blobs.put(now)  # what is replaced stays recoverable (a --force over an edit: undo the undo)
            fs.restore(path, data)
        except (ToolError, OSError) as exc:
            store.append(ToolCallFailed(call_id=call_id, tool=RESTORE_TOOL, error=str(exc),
                                        error_type=type(exc).__name__, duration_ms=ms_since(t0)),
                         run_id=run.id, parent_event_id=started.id)
            raise
        action = "remove" if to_sha is None else "restore" if before is not None else "recreate"
        store.append(ToolCallCompleted(
            call_id=call_id, tool=RESTORE_TOOL, duration_ms=ms_since(t0), preview=f"{action} {path}",
            result={"restored": path, "action": action, "before_sha256": before, "after_sha256": to_sha}),
            run_id=run.id, parent_event_id=started.id)
        return before

    done: list[tuple[str, str | None]] = []  # (path, what the restore replaced)
    try:
        try:
            for i, r in enumerate(report.restores):
                done.append((r.path, step(f"undo{i + 1}", r.path, r.to_sha256, contents[r.path], reason)))
            for i, c in enumerate(report.cells):  # the kernel removes or restores them in the notebook
                started = store.append(ToolCallStarted(
                    call_id=f"cell{i + 1}", tool=CELL_UNDO_TOOL, arguments={"cell_id": c.cell_id, "action": c.acted},
                    risk=Risk.WRITE_HIGH_RISK, target=c.cell_id, reason=reason), run_id=run.id)
                store.append(ToolCallCompleted(
                    call_id=f"cell{i + 1}", tool=CELL_UNDO_TOOL, duration_ms=0.0, preview=c.line(),
                    result={"cell_id": c.cell_id, "action": c.acted, "name": c.name,
                            "execution_count": c.count, "note": KERNEL_NOTE}),
                    run_id=run.id, parent_event_id=started.id)
        except (ToolError, OSError) as exc:
            report.failed.append(f"{report.restores[len(done)].path}: {exc}")
            for j, (path, before) in reversed(list(enumerate(done))):
                try:
                    data = None if before is None else blobs.get(before)
                    step(f"rollback{j + 1}", path, before, data, f"rollback: the undo failed at "
                                                                 f"{report.restores[len(done)].path}")
                except (ToolError, OSError, BlobError) as again:
                    report.failed.append(f"{path}: restored by the undo, and could not be put back: {again}")
        store.append(AnswerReady(content=report.text()), run_id=run.id)
        if report.failed:
            store.append(CompletedWithErrors(errors=report.failed), run_id=run.id)
        else:
            store.append(Completed(summary=report.summary()), run_id=run.id)
    finally:
        store.release_lease(run.id)
    report.undo_run_id = run.id
    return run.id


__all__ = ["FILE_TOOLS", "MAX_DIFF_CHARS", "NO_EFFECT", "RESTORE_TOOL", "UNDO_MODEL", "UNDO_SESSION", "Conflict",
           "FileChange", "NotUndoable", "Restore", "UndoError", "UndoReport", "check_log", "collect", "log_checked",
           "plan", "preview", "runs_to_undo", "said", "shown", "standing_undo", "undo", "undo_did", "undo_history",
           "undoers"]
