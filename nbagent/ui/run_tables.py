"""The runs of a log as plain text: the runs table and one run's timeline, which `nbagent runs`/`nbagent show` and
`%agent runs`/`%agent show` print alike (kept here, below both the command line and the kernel's glue)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nbagent.events.envelope import EventBase
from nbagent.events.state import RunState
from nbagent.store import RunRecord
from nbagent.ui.record_format import NOMINAL_NOTE
from nbagent.ui.timeline import clip, describe, money
from nbagent.ui.viewstate import cell_labels, is_file_fact, is_nominal

HEADER = ["RUN", "SESSION", "CELL", "STATUS", "MODEL", "TOOL CALLS", "TOKENS", "COST", "STARTED"]


def short_ids(ids: list[str], minimum: int = 12) -> dict[str, str]:
    """Shortest prefix of each id (at least `minimum` chars) that no other id shares.

    Args:
        ids: the ids to shorten, all of them (a prefix is unique among these).
        minimum: the fewest characters a short id keeps.
    """
    out = {}
    for i in ids:
        n = minimum
        while n < len(i) and any(o != i and o.startswith(i[:n]) for o in ids):
            n += 1
        out[i] = i[:n]
    return out


def table(rows: list[list[str]], right: set[int]) -> str:
    """Rows as aligned plain-text columns (the first row is the header), two spaces apart.

    Args:
        rows: the cells, every row as long as the first.
        right: the indexes of the columns aligned right (numbers).
    """
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [r[c].rjust(widths[c]) if c in right else r[c].ljust(widths[c]) for c in range(len(r))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def run_row(r: RunRecord, short: str, names: dict[str, str], cells: dict[str, str]) -> list[str]:
    """One run as a row of the runs table: `nbagent runs` and `%agent runs` show the same columns."""
    cost = money(r.cost) + (" nominal" if r.cost is not None and is_nominal(r.model) else "")
    return [
        short, names.get(r.session_id, r.session_id[:10]), cells.get(r.cell_id or "", "-"), r.status.value,
        r.model or "-", str(r.steps), str(r.tokens), cost, r.created_at[:19].replace("T", " "),
    ]


def runs_table(runs: Sequence[RunRecord], names: dict[str, str]) -> str:
    """A log's runs as the table both commands print: each run by its shortest unique id, its session's name
    (`names`), and its cell by the shortest label that tells it from the others."""
    short = short_ids([r.id for r in runs])
    cells = cell_labels(r.cell_id for r in runs)
    return table([HEADER] + [run_row(r, short[r.id], names, cells) for r in runs], right={5, 6, 7})


def render_timeline(state: RunState, events: list[EventBase], log_path: Path) -> str:
    """One run as `nbagent show` prints it: a header, one line per event (indented under its parent), totals.

    Args:
        state: the run's state (`Store.run_state`).
        events: the run's events in order (`Store.run_events`).
        log_path: the store the run is in, named on the last line.
    """
    head = [
        f"run {state.run_id}  status {state.status.value}",
        f"  model {state.model or '-'} · autonomy {state.autonomy.value} · cell {state.cell_id or '-'}"
        + (f" · continues {state.previous_run_id}" if state.previous_run_id else ""),
        f"  prompt: {clip(state.prompt, 100)}",
        "",
    ]
    depth: dict[str, int] = {}
    t0 = events[0].time if events else None
    rows = []
    for e in events:
        d = depth.get(e.parent_event_id, -1) + 1 if e.parent_event_id else 0
        depth[e.id] = d
        offset = (e.time - t0).total_seconds() if t0 else 0.0
        note = ""
        if e.type == "authorization_denied" and is_file_fact(getattr(e.payload, "rule", None)):
            note = "  (an error, not a denial: older nbagents logged file facts so)"
        rows.append(f"{e.seq:>5}  {e.ts[11:23]}  +{offset:>7.3f}s  {'  ' * d}{e.type:<22} {describe(e)}{note}")
    cost = money(state.cost) if state.cost_known else "unknown"
    nominal = state.cost_known and is_nominal(state.model)
    calls, models = len(state.steps), state.all_model_calls
    tail = [
        "",
        f"  {calls} tool call{'s' if calls != 1 else ''} · {models} model call{'s' if models != 1 else ''} · "
        f"{state.tokens} tokens · cost {cost}" + (f" nominal ({NOMINAL_NOTE})" if nominal else ""),
    ]
    if state.answer:
        tail.append(f"  answer: {clip(state.answer, 100)}")
    if state.error:
        tail.append(f"  error: {state.error}")
    if state.pending:
        tail.append(f"  waiting for: {state.pending.kind} (request {state.pending.request_id})")
    tail.append(f"  log: {log_path}")
    return "\n".join(head + rows + tail)
