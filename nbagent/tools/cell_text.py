"""The source of the notebook cells the agent's tools write, as every part that checks one agrees on it.

The kernel (`ipython/cells.py`, `ipython/rerun.py`), `nbagent run` (`cli/run_cells.py`) and the lab extension
(`labextension/src/cells.ts`) each decide whether a cell in a notebook is the one a tool wrote: by the tools' names,
the proposed cell's header, its digest, and one rule for "unchanged". Held here, below all of them, so neither the
kernel's glue nor the command line imports the other's.
"""

from __future__ import annotations

import hashlib

INSERT_TOOL = "insert_code_cell"  # proposes a cell, not run (ipython/cells.py)
RAN_TOOLS = ("run_cell", "replace_cell")  # run the cell they write (ipython/run_cell.py, ipython/agent_cells.py)


def cell_source(code: str, run_id: str | None, explanation: str = "") -> str:
    """The cell as inserted: a comment naming the run (the explanation made one line: text after a line break
    would be code no card showed as such), then the code."""
    about = " ".join(str(explanation or "").split())
    header = f"# nbagent: proposed by run {run_id}" + (f": {about}" if about else "")
    return header + "\n" + str(code).rstrip() + "\n"


def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def same_source(source: str, recorded: str) -> bool:
    """A cell is unchanged when its source is what the log recorded its tool wrote, trailing blank space aside (a
    front end may add or drop a final newline). The one rule for `nbagent run`, a kernel (ipython/rerun.py) and the
    lab extension (cells.ts sameSource): blank is `BLANK`'s six ASCII characters on every side, since str.rstrip and
    JavaScript's trimEnd disagree on others (U+001C-U+001F, U+0085, U+FEFF), and then the kernel would run a cell the
    page removes, or refuse one the page keeps as the person's."""
    return source.rstrip(BLANK) == recorded.rstrip(BLANK)


BLANK = " \t\n\r\f\v"  # what "trailing blank space" is, here and in labextension/src/cells.ts
