"""The kernel's rule for a queued cell after its `%%agent` cell re-ran (nbagent/ipython/rerun.py), over generated
notebooks and edits: a cell is refused exactly when it is one the re-run superseded and its source is unchanged (by
runner_cells' rule), or, without a cell id the log knows, its source is such a cell's; a changed cell, a person's cell
and a cell of another `%%agent` cell always run; every refusal is one line naming the run that wrote the cell."""

from __future__ import annotations

from typing import Any

from examples import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from nbagent.ipython.rerun import Reruns, Superseded
from nbagent.tools.cell_text import same_source


class Log:
    def __init__(self, runs: set[str]) -> None:
        self.runs = runs

    def run_ids(self) -> list[str]:
        return sorted(self.runs)


code = st.text(st.characters(blacklist_categories=["Cs"]), max_size=40)
edit = st.sampled_from(["same", "newline", "spaces", "appended", "emptied", "person"])


def edited(source: str, how: str) -> str:
    return {"same": source, "newline": source + "\n", "spaces": source + "  \n", "appended": source + "x = 1\n",
            "emptied": "", "person": "print('mine')"}[how]


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(code, edit, st.booleans(), st.booleans()), min_size=1, max_size=6))
def test_refused_exactly_when_superseded_and_unchanged(cells: list[tuple[str, str, bool, bool]]) -> None:
    reruns = Reruns(agent_ran=True)
    log = Log({"R1", "R2"})
    sent: list[tuple[str | None, str, Superseded | None]] = []
    for i, (body, how, ours, with_id) in enumerate(cells):
        source = f"# nbagent: run by run R1: step {i}\n{body}\n"
        held = Superseded(cell_id=f"c{i}", source=source, run_id="R1", call_id=f"nb{i}_0", agent_cell_id="A",
                          by_run="R2")
        if ours:  # a cell of the re-run %%agent cell; else one of another %%agent cell (not superseded)
            reruns.cells[held.cell_id] = held
        sent.append((held.cell_id if with_id else None, edited(source, how), held if ours else None))
    for cell_id, source, held in sent:
        line: Any = reruns.refusal(cell_id, source, log)
        if cell_id is not None and cell_id in reruns.cells:
            expected = same_source(source, reruns.cells[cell_id].source)
        else:  # no id, or one the log never saw: by its code alone
            expected = any(same_source(source, s.source) for s in reruns.cells.values())
        assert (line is not None) == expected, (cell_id, source, held)
        if line is not None:
            assert "\n" not in line and line.startswith("nbagent: not run:") and "run R1" in line and "(run R2)" in line


@settings(max_examples=examples(100), deadline=None)
@given(code, st.booleans(), st.booleans())
def test_a_cell_naming_a_run_the_log_lacks(body: str, agent_ran: bool, known: bool) -> None:
    """Refused (one line) only after an `%%agent` cell ran in this kernel, and only when the log lacks the run."""
    reruns = Reruns(agent_ran=agent_ran)
    line = reruns.refusal("c9", f"# nbagent: run by run R7: x\n{body}", Log({"R7"} if known else {"R1"}))
    assert (line is not None) == (agent_ran and not known)
    if line is not None:
        assert "\n" not in line and "R7" in line and "log does not hold" in line
    assert reruns.refusal("c9", "print(1)\n" + body, Log(set())) is None  # no header: a person's cell
