"""What the code of a tool call did, read from its recorded result: it raised, or it was interrupted.

A tool that runs code (run_cell, replace_cell, run_python) completes even when the code fails: its result carries
what the cell showed and the error the kernel reported, so the model can read the traceback and fix the cell. The
call itself did not fail, but the step did not do what was asked, so every view marks it (✗ raised KeyError:
'Revenue', ■ interrupted after 4.6 s) and the run ends `completed_with_errors`, as for a failed tool (state.py).

Read only from the result's fields, never from what the code printed: `interrupted` (true when a kernel interrupt
or the time limit stopped the cell), `ename`/`evalue` where the result has them, else `error`, which run_cell.py
writes as `"{ename}: {evalue}"` (the exception's class name, then its message, as the kernel's error message says).
Plain Python, below the runtime.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel

CODE_TOOLS = frozenset({"run_cell", "replace_cell", "run_python"})
_NAMED = re.compile(r"([A-Za-z_][\w.]{0,199}): ?(.*)", re.DOTALL)


class CodeFault(BaseModel):
    """The code of a call raised (`raised`) or was stopped (`interrupted`): the kernel's ename and evalue."""

    kind: Literal["raised", "interrupted"]
    ename: str
    evalue: str = ""

    def sentence(self, duration_ms: float | None = None) -> str:
        """"raised KeyError: 'Revenue'", "interrupted after 4.6 s": the step's outcome, first word first."""
        if self.kind == "interrupted":
            return "interrupted" + (f" after {duration(duration_ms)}" if duration_ms else "")
        return f"raised {self.ename}" + (f": {_one_line(self.evalue)}" if self.evalue else "")


def duration(ms: float) -> str:
    """A duration as the records write one (ui/record_words.fmt_ms calls this; format.js fmtMs): "4.6 s", "850 ms"."""
    ms = float(ms)
    if ms < 1:
        return f"{ms:.2f} ms"
    if ms < 10:
        return f"{ms:.1f} ms"
    if ms < 1000:
        return f"{ms:.0f} ms"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f} s"
    m, s = divmod(round(s), 60)
    return f"{m} min {s} s" if m < 60 else f"{m // 60} h {m % 60} min"


def _one_line(text: str, width: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def code_fault(tool: str | None, result: Any) -> CodeFault | None:
    """The fault a code-running call's recorded result reports, or None (it ran cleanly, or the tool runs no code,
    or the result was cut into a string and has no fields to read)."""
    if tool not in CODE_TOOLS or not isinstance(result, dict):
        return None
    error = result.get("error")
    interrupted = result.get("interrupted") is True
    if not interrupted and not (isinstance(error, str) and error):
        return None
    ename, evalue = result.get("ename"), result.get("evalue")
    if not isinstance(ename, str) or not ename:
        found = _NAMED.fullmatch(error) if isinstance(error, str) else None
        text = error if isinstance(error, str) else ""
        ename, evalue = (found.group(1), found.group(2)) if found else ("Error", text)
    return CodeFault(kind="interrupted" if interrupted else "raised", ename=ename,
                     evalue=evalue if isinstance(evalue, str) else str(evalue))


__all__ = ["CODE_TOOLS", "CodeFault", "code_fault", "duration"]
