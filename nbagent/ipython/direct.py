"""`%agent` on a line that was not turned into an await: the cell that loaded nbagent.

IPython reads a cell (and runs the input transformers over it) before running any of it, and `%load_ext nbagent`
registers the transformer only when it runs. So in

    %load_ext nbagent
    %agent undo 01J...

the `%agent` line is still IPython's own line magic call when it runs, in a cell that does not await. Such a
line still does what it says when it needs no waiting: every command that only reads or writes the log, and
`%agent undo` (its panel asks the person before anything changes, so it is shown without waiting to be drawn).
The commands that drive a run on (approve, deny, refine, answer, resume, fix) wait for the run, and so for the
person, in their cell: those say, in one line, to run the cell again (nbagent is loaded by then) or to give the
line a cell of its own. Nothing is half done.
"""

from __future__ import annotations

from typing import Any

from nbagent.ipython.options import UsageError, line_parser, parse

# these drive a run, which awaits decisions in its cell
DRIVES_A_RUN = frozenset({"approve", "deny", "refine", "answer", "resume", "fix"})


def run_line_now(line: str) -> Any:
    """Run an `%agent` line to its end without awaiting anything (see the module's docstring)."""
    from nbagent.ipython import entry

    async def checked() -> Any:
        shell = entry.current().shell
        args = parse(line_parser(), shell.var_expand(line) if hasattr(shell, "var_expand") else line)
        if args.command in DRIVES_A_RUN:
            raise UsageError(f"%agent {args.command} goes on with a run, which waits in its cell, and this cell "
                             "loaded nbagent (too late for it to wait): run this cell again, or put the %agent "
                             "line in a cell of its own")
        current = entry.current()
        current.no_wait = True
        try:
            return await current.run_line(line)
        finally:
            current.no_wait = False

    step = entry.shown(checked)
    try:
        step.send(None)
    except StopIteration as done:
        return done.value
    step.close()  # it would have waited: nothing of it goes on in the background
    raise UsageError(f"%agent {line.split()[0] if line.split() else ''} needs a cell that can wait, and this cell "
                     "loaded nbagent: run this cell again, or put the %agent line in a cell of its own")
