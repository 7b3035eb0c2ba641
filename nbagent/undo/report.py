"""What an undo finds and does, as values: the recorded file changes it reads, the restore it plans for each file,
the conflicts and the calls it cannot reverse, and the report that says so in words (`UndoReport.text`, `said`).
Apart from files.py, which reads the log and the folder and acts (and re-exports these names): nothing here reads
or changes anything, so the report is the same whether it is a preview or what an undo did.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from nbagent.undo.cells import ACTED, KERNEL_NOTE, CellUndo


class UndoError(Exception):
    """Undo cannot start (unknown run, nothing recorded, a saved content missing...): nothing was changed."""


class FileChange(BaseModel):
    """One recorded change of one file (None = no file there)."""

    run_id: str
    call_id: str
    tool: str
    path: str
    before_sha256: str | None
    after_sha256: str | None


class NotUndoable(BaseModel):
    """A call whose effect undo cannot reverse: listed, never silently skipped."""

    run_id: str
    call_id: str
    tool: str
    why: str


class Restore(BaseModel):
    """What undo will do to one file: from what the runs left (`expect_sha256`) to `to_sha256`."""

    path: str
    expect_sha256: str | None
    to_sha256: str | None
    current_sha256: str | None = None
    changes: int = 1

    @property
    def action(self) -> str:
        if self.to_sha256 is None:
            return "remove"
        return "restore" if self.expect_sha256 is not None else "recreate"


class Conflict(BaseModel):
    path: str
    reason: str
    diff: str = ""


class UndoReport(BaseModel):
    """What an undo did or would do; `ok` False means nothing at all was changed."""

    runs: list[str] = Field(default_factory=list)
    restores: list[Restore] = Field(default_factory=list)
    conflicts: list[Conflict] = Field(default_factory=list)
    not_undoable: list[NotUndoable] = Field(default_factory=list)
    # the notebook cells run_cell/replace_cell wrote: removed or restored by the kernel (undo_cells.py)
    cells: list[CellUndo] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)
    undo_run_id: str | None = None
    undone_by: str | None = None  # an earlier undo run that already put the run back (and still stands)

    @property
    def ok(self) -> bool:
        return not self.conflicts and not self.failed

    def text(self) -> str:
        """The report as lines for a terminal or a cell."""
        lines: list[str] = []
        if self.conflicts:
            what = "file(s) or cell(s)" if any(c.path.startswith("cell ") for c in self.conflicts) else "file(s)"
            lines.append(f"undo refused: {len(self.conflicts)} {what} changed since the run(s); nothing was changed "
                         "(--force restores them anyway):")
            for c in self.conflicts:
                lines.append(f"  conflict: {c.path}: {c.reason}")
                lines.extend("    " + line for line in c.diff.rstrip("\n").splitlines())
        elif self.failed:
            lines.append(f"undo failed (run {self.undo_run_id}); the files it had restored were put back:")
            lines.extend(f"  failed: {f}" for f in self.failed)
        elif self.undo_run_id:
            lines.append(f"undo run {self.undo_run_id}: {self.summary()} (runs {', '.join(self.runs)})")
            lines.extend(f"  {r.action}d {r.path}" for r in self.restores)
        if self.cells and not self.conflicts and not self.failed:
            lines.extend(f"  {c.line()}" for c in self.cells)
            lines.append(f"  note: {KERNEL_NOTE}")
        for n in self.not_undoable:
            lines.append(f"  not undoable: {n.tool} (run {n.run_id}, call {n.call_id}): {n.why}")
        return "\n".join(lines)

    def summary(self) -> str:
        """"1 file put back, 2 cells: 1 removed, 1 kept as yours (you edited it since)": what the undo does."""
        return said(len(self.restores), [c.acted for c in self.cells])


def said(files: int, acted: list[str]) -> str:
    """What an undo did in a few words, files and cells by what happened to them (restore_cell's actions)."""
    parts = [f"{files} file{'s' if files != 1 else ''} put back"] if files or not acted else []
    counts = {a: acted.count(a) for a in ("remove", "restore", "keep", "gone") if a in acted}
    more = {"keep": " as yours (you edited it since)", "gone": " (deleted since)"}
    cells = [f"{n} {ACTED[a]}{more.get(a, '')}" for a, n in counts.items()]
    if cells:
        total = sum(counts.values())
        parts.append(f"{total} cell{'s' if total != 1 else ''}: " + ", ".join(cells) if len(cells) > 1 else
                     f"{total} cell{'s' if total != 1 else ''} {cells[0].split(' ', 1)[1]}")
    return ", ".join(parts)
