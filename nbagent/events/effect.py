"""What a call touches, as recorded in its events: the files it reads and writes, resolved, the cell it writes, and
whether it makes code that something runs later. The data only: nbagent/gate/effects.py resolves a call to it and
holds the call to it when it runs."""

from __future__ import annotations

import posixpath
from typing import Literal

from pydantic import BaseModel, Field

__all__ = ["WRITING", "Effect", "Op", "Target", "plain"]

Op = Literal["read", "list", "write", "create", "delete"]
WRITING: frozenset[str] = frozenset({"write", "create", "delete"})


class Target(BaseModel):
    """One file or folder a call touches."""

    op: Op
    written: str  # as the model wrote it
    path: str = ""  # resolved, relative to the notebook's folder, links followed; "" when it cannot be
    arg: str = ""  # the argument it came from
    # for a write: the file's other names, links in the folder that lead to it (helper.py -> data/cache.txt)
    aliases: list[str] = Field(default_factory=list)
    problem: str | None = None  # why it cannot be resolved (the scope refuses it: the call will be refused)
    rule: str | None = None  # the scope's rule that refuses it (outside, symlink_escape, excluded...)
    # what nbagent sends in place of `written` (an MCP server's path made absolute, as decided: mcp/rules.py); kept
    # out of the log, which holds paths relative to the notebook's folder
    sent: str | None = Field(default=None, exclude=True)

    @property
    def redirected(self) -> bool:
        """The path leads somewhere other than its name says (a link on the way)."""
        return bool(self.path) and self.path != plain(self.written)


class Effect(BaseModel):
    """What a call will touch, and whether it makes code that runs later."""

    targets: list[Target] = Field(default_factory=list)
    runs_later: str | None = None
    # a notebook cell the call writes, resolved (`replace_cell`: the id of the cell that the id or call id the model
    # wrote names), so a decision binds to that cell, not to how the model spelled it; no path: grants need --arg
    cell: str | None = None
    # why nbagent cannot tell what the call changes (an MCP tool that writes what its arguments do not say: a git
    # checkout); such a call is WRITE_HIGH_RISK unless the person's own configuration set the tool's risk
    unknown: str | None = None

    @property
    def redirected(self) -> bool:
        return any(t.redirected for t in self.targets)

    @property
    def refused(self) -> bool:
        """A target the scope refuses (outside the folder, excluded...): the call is refused whatever anyone says."""
        return any(t.problem is not None for t in self.targets)

    def paths(self) -> list[str]:
        """The resolved paths (what grants match); the written one where it could not be resolved."""
        return [t.path or plain(t.written) for t in self.targets]

    def key(self) -> list[list[str]]:
        """What a digest binds: each target's operation and resolved path (and the cell it writes)."""
        return [[t.op, t.path or "?" + t.written] for t in self.targets] + ([["cell", self.cell]] if self.cell else [])

    def shown(self, written: str | None) -> str | None:
        """The target as the card shows it: `out/latest.md → data.csv` when a link leads elsewhere. A tool whose
        target argument nbagent does not know (an MCP tool's `outputPath`) shows the paths it resolved to, so the
        card never hides what the decision is about."""
        if written is None:
            if not self.targets:
                return None
            listed = [_clip(f"{t.written} → {t.path}" if t.redirected else t.written) for t in self.targets[:3]]
            more = len(self.targets) - 3
            return ", ".join(listed) + (f", and {more} more" if more > 0 else "")
        shown = written
        for t in self.targets:
            if t.redirected and t.written == written:
                shown = f"{written} → {t.path}"
                break
        # another path argument that leads elsewhere is named too (copy_file(path=a, dest=latest.md -> data.csv))
        others = [f"{t.written} → {t.path}" for t in self.targets if t.redirected and t.written != written]
        return shown + (f" ({'; '.join(_clip(o) for o in others[:3])})" if others else "")


def _clip(text: str, width: int = 120) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def plain(path: str) -> str:
    text = str(path).replace("\\", "/")
    norm = posixpath.normpath(text) if text else text
    return norm[2:] if norm.startswith("./") else norm
