"""A reproduced run's cells are new cells (nbagent/models/replay.py, `cell_identity_masked`): a recorded run_cell
result matches the new one whatever ids, message ids, execution counts and run ids the kernel gave the new cell,
and never when what the cell printed, returned or raised differs, however that text is made."""

from __future__ import annotations

import json
import uuid
from typing import Any

from examples import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from nbagent.events.ids import new_id
from nbagent.models.replay import first_difference, same_messages

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80)


def turn(stdout: str, error: str | None, *, cell: str, run: str, count: int, tool: str = "run_cell"
         ) -> list[dict[str, Any]]:
    """A model's run_cell call and its result, as a run's own messages hold them."""
    result: dict[str, Any] = {
        "after_cell_id": "ask", "cell_id": cell, "execution_count": count, "msg_id": uuid.uuid4().hex, "ran": True,
        "sent_to_frontend": count % 2 == 0, "source": f"# nbagent: run by run {run}: add\nx = 1\n",
        "metadata": {"nbagent": {"run_id": run, "approval_event_id": new_id(), "source_sha256": "ab" * 32}},
        "stdout": stdout, "stderr": "", "outputs": [{"output_type": "execute_result", "execution_count": count,
                                                     "data": {"text/plain": stdout}}],
        "images_note": f"a request naming {{Out[{count}]}} sends them too"}
    if error is not None:
        result.update(error=error, traceback=f"Cell In[{count}], line 2\n{error}")
    return [{"role": "assistant", "content": None,
             "tool_calls": [{"id": "nb1_0", "type": "function", "function": {"name": tool, "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "nb1_0", "content": json.dumps(result, sort_keys=True)}]


@settings(max_examples=examples(200), deadline=None)
@given(a=TEXT, b=TEXT, err_a=st.none() | TEXT, err_b=st.none() | TEXT, counts=st.tuples(st.integers(1, 999),
                                                                                          st.integers(1, 999)))
def test_a_cell_result_matches_exactly_when_the_cell_did_the_same(a: str, b: str, err_a: str | None,
                                                                   err_b: str | None, counts: tuple[int, int]) -> None:
    recorded = turn(a, err_a, cell=uuid.uuid4().hex, run=new_id(), count=counts[0])
    now = turn(b, err_b, cell=uuid.uuid4().hex, run=new_id(), count=counts[1])
    assert same_messages(recorded, now) == (a == b and err_a == err_b)
    if a != b:  # the divergence names what the cell printed, not a new cell id
        assert "differs" in first_difference(recorded, now)


def test_only_the_kernel_cell_tools_are_compared_that_way() -> None:
    cell, run = uuid.uuid4().hex, new_id()
    recorded = turn("1\n", None, cell=cell, run=run, count=3, tool="my_tool")
    now = turn("1\n", None, cell=uuid.uuid4().hex, run=new_id(), count=4, tool="my_tool")
    assert not same_messages(recorded, now)  # a tool of the person's: its ids are data, compared as they are
