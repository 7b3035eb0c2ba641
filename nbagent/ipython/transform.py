"""Turning `%%agent` cells (and `%agent` lines) into top-level awaits.

A magic's body cannot be awaited, and a synchronous wait never sees a widget click (docs/architecture.md,
"Guarantees, and where each is held": a click is never lost while a cell awaits). So before IPython's own
cell-magic handling, an input transformer rewrites

    %%agent --model m            ->    await __import__("nbagent.ipython.entry", fromlist=["_"]).run_cell(
    Load sales.csv ...                     '--model m', 'Load sales.csv ...')

and each `%agent ...` line at the start of a line into `await ....run_line('...')`. The cell then awaits at
top level (IPython's autoawait), and ipykernel >= 7.4 keeps handling comm messages (clicks) meanwhile.

A cell the agent ran, superseded by a re-run of its `%%agent` cell, becomes a no-op that says so (rerun.py): the
kernel is the only place that sees the requests Run All queued before the re-run began.
"""

from __future__ import annotations

_CALL = '__import__("nbagent.ipython.entry", fromlist=["_"])'


def transform(lines: list[str]) -> list[str]:
    if not lines:
        return lines
    from nbagent.ipython.rerun import transform_refused

    refused = transform_refused(lines)  # a queued cell that a re-run of its %%agent cell superseded (rerun.py)
    if refused is not None:
        return refused
    first = lines[0].rstrip("\n")
    if first.startswith("%%agent") and (len(first) == 7 or first[7] in " \t"):
        args = first[7:].strip()
        body = "".join(lines[1:])
        return [f"await {_CALL}.run_cell({args!r}, {body!r})\n"]
    if not any(line.startswith("%agent") for line in lines):
        return lines
    out = []
    for line in lines:
        stripped = line.rstrip("\n")
        if stripped.startswith("%agent") and (len(stripped) == 6 or stripped[6] in " \t"):
            out.append(f"await {_CALL}.run_line({stripped[6:].strip()!r})\n")
        else:
            out.append(line)
    return out
