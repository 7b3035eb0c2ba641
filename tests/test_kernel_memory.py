"""What a run leaves behind in a long-lived kernel (issue 16: no growth per step beyond the log itself).

Measured in bytes by `bench/kernel_memory.py`; here the causes found there are pinned, as counts, which do not
depend on the machine: a run's live view must not outlive it (anywidget kept every widget made from a file path,
with the last view it showed), and a run must leave little garbage in reference cycles (which only a full
collection frees, so that between two a kernel grew by it: tools' argument models made per run, tenacity's state
per tool call, the cell's argument parser)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kernel_harness import Kernel, script

from nbagent.tools.base import Tool
from nbagent.tools.files import FileTools

CELL = "%%agent --script s.json --approve all --autonomy L3 --new\nread the notes"


@pytest.mark.kernel
def test_a_run_leaves_no_view_and_little_cyclic_garbage_in_the_kernel(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("some notes\n")
    calls = [{"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]} for _ in range(10)]
    script(tmp_path / "s.json", *calls, {"content": "done"})
    k = Kernel(tmp_path, env={"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": ""})
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        for i in range(3):
            assert k.run(CELL, cell_id=f"run{i}").ok
        out = k.run("import gc\nfrom nbagent.ui.widget import RunView\ngc.collect()\n"
                    "print(sum(isinstance(o, RunView) for o in gc.get_objects()))\ngc.disable()", cell_id="views")
        assert out.stdout.split() == ["0"], out.stdout + out.stderr  # was 3: one per run, for the kernel's life
        assert k.run(CELL, cell_id="one").ok
        out = k.run("print(gc.collect())\ngc.enable()", cell_id="garbage")
        # the objects in cycles that one run of 10 tool calls left (2,353 for 20 before; ~240 now: the view
        # widget's own, which ipywidgets makes)
        assert int(out.stdout) < 800, out.stdout + out.stderr
    finally:
        k.close()


def test_tools_made_per_run_share_their_argument_models(tmp_path: Path) -> None:
    """Each run binds the file tools to its folder anew; their arguments' models (pydantic classes, in cycles) are
    made once per function, not once per run."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = FileTools(tmp_path / "a").tools(), FileTools(tmp_path / "b").tools()
    assert [t.args_model for t in first] == [t.args_model for t in second]
    assert [t.schema() for t in first] == [t.schema() for t in second]
    first[0].schema()["function"]["parameters"]["properties"]["changed"] = {}  # a caller's change stays its own
    assert "changed" not in second[0].schema()["function"]["parameters"]["properties"]

    def local(path: str) -> str:  # a function made per run (a closure): its model is the same while its code,
        return path  # defaults and annotations are (tests/test_per_run_cost.py: defaults that differ)

    assert Tool(local).args_model is Tool(local).args_model
