"""Papermill parameters as nbagent settings (nbagent/ipython/parameters.py, docs/jupyter.md): `papermill -p approve
all`, `-p model ...`, `-p max_steps N` honoured end to end through papermill's Python API; a cell's own options
outrank them, and they outrank `%agent config`. An ordinary cell that happens to look like a parameters cell, in a
kernel given cell ids (JupyterLab), is never read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from kernel_harness import Kernel
from stub_openai import Reply, StubOpenAI, tool_call

from nbagent.ipython.parameters import Parameters, read_cell, settings_of
from nbagent.store import Store

papermill = pytest.importorskip("papermill", reason="papermill is a test dependency (pip install -e '.[test]')")

RUN_MIME = "application/vnd.nbagent.run+json"
WRITE = {"tool_calls": [{"name": "create_file", "arguments": {"path": "out.md", "content": "made\n"}}]}


@pytest.fixture(autouse=True)
def _no_nbagent_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NBAGENT_APPROVE", "NBAGENT_MODEL", "NBAGENT_MAX_STEPS", "NBAGENT_BUDGET", "NBAGENT_SCRIPT"):
        monkeypatch.delenv(name, raising=False)


def notebook(folder: Path, *cells: str, turns: list[dict[str, Any]] | None = None) -> Path:
    """A `parameters` cell of the notebook's own, nbagent loaded after it (so papermill's injected cell runs before
    %load_ext), then `cells`."""
    (folder / "s.json").write_text(json.dumps({"turns": turns or [WRITE, {"content": "Wrote out.md."}]}))
    params = nbformat.v4.new_code_cell("rows = 10")
    params.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = [params, nbformat.v4.new_code_cell("%load_ext nbagent"),
                *[nbformat.v4.new_code_cell(c) for c in cells]]
    path = folder / "in.ipynb"
    nbformat.write(nb, path)
    return path


def execute(path: Path, **parameters: Any) -> Any:
    return papermill.execute_notebook(str(path), str(path.parent / "out.ipynb"), parameters=parameters,
                                      cwd=str(path.parent), kernel_name="python3", progress_bar=False,
                                      execution_timeout=120)


def record(nb: Any) -> dict[str, Any]:
    return next(o["data"][RUN_MIME] for c in nb.cells for o in c.get("outputs", []) if RUN_MIME in o.get("data", {}))


def printed(nb: Any, source: str) -> str:
    cell = next(c for c in nb.cells if c.source == source)
    return "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")


@pytest.mark.kernel
def test_p_approve_all_is_honoured_and_outranks_agent_config(tmp_path: Path) -> None:
    path = notebook(tmp_path, "%agent config approve=none", "%agent config", "%%agent --script s.json\nwrite out.md")
    out = execute(path, approve="all", rows=3)
    assert (tmp_path / "out.md").read_text() == "made\n"
    assert record(out)["status"] == "completed" and record(out)["decisions"][0]["by"] == "policy:all"
    # the injected cell is cell [2] (after the `parameters` cell); %agent config says where the value came from
    shown = printed(out, "%agent config")
    assert "approve    = 'all'" in shown and "(papermill parameter (cell [2]))" in shown


@pytest.mark.kernel
def test_the_cells_own_option_outranks_the_parameter(tmp_path: Path) -> None:
    path = notebook(tmp_path, "%%agent --script s.json --approve none\nwrite out.md")
    out = execute(path, approve="all")
    assert not (tmp_path / "out.md").exists()
    assert record(out)["decisions"][0]["by"] == "policy:none"


@pytest.mark.kernel
def test_p_model_and_p_max_steps_are_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with StubOpenAI() as stub:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-papermill")
        monkeypatch.setenv("OPENAI_API_BASE", stub.base_url)
        stub.push(Reply(tool_calls=[tool_call("create_file", {"path": "a.md", "content": "a\n"}),
                                    tool_call("create_file", {"path": "b.md", "content": "b\n"})]),
                  Reply(content="Wrote one of them."))
        path = notebook(tmp_path, "%%agent\nwrite a.md and b.md")
        execute(path, model="openai/gpt-4o-mini", approve="all", max_steps=1, budget=0.5)
        assert stub.requests and {r.body["model"] for r in stub.requests} == {"gpt-4o-mini"}
    store = Store(tmp_path / "agent.nbagent", readonly=True)
    (run,) = store.list_runs()
    started = store.run_events(run.id)[0].payload
    assert started.model == "openai/gpt-4o-mini"
    assert started.options["max_steps"] == 1 and started.options["budget"] == 0.5
    assert started.options["approve"] == "all"
    assert (tmp_path / "a.md").exists() and not (tmp_path / "b.md").exists()  # one step, then the budget said no
    denied = [e.payload for e in store.run_events(run.id) if e.type == "authorization_denied"]
    assert denied and "step budget exhausted: 1 of 1" in denied[0].reason


@pytest.mark.kernel
def test_a_bad_parameter_value_fails_the_agent_cell_in_one_line(tmp_path: Path) -> None:
    path = notebook(tmp_path, "%%agent --script s.json\nwrite out.md")
    with pytest.raises(papermill.PapermillExecutionError) as exc:
        execute(path, approve="yes")
    assert exc.value.ename == "UsageError"
    assert exc.value.evalue == ("%%agent: papermill parameter (cell [2]): approve = 'yes': approve must be all, none, "
                                "low or recorded")
    assert not (tmp_path / "out.md").exists()


# ------------------------------------------------------------------------------------------- not papermill


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    k = Kernel(tmp_path)
    yield k
    k.close()


@pytest.mark.kernel
def test_an_ordinary_cell_named_like_a_parameter_is_not_read_when_cells_have_ids(kernel: Kernel) -> None:
    # JupyterLab sends a cell id with every execution: a cell that looks like papermill's is still just a cell
    assert kernel.run("# Parameters\nmodel = 'resnet50'\napprove = 'all'", cell_id="c1").ok
    assert kernel.run("%load_ext nbagent", cell_id="c2").ok
    assert kernel.run("# Parameters\nmodel = 'resnet50'", cell_id="c3").ok
    shown = kernel.run("%agent config", cell_id="c4").stdout
    assert "model      = ''" in shown and "approve    = ''" in shown and "papermill" not in shown
    # a kernel driven without cell ids (papermill, plain nbclient) does read it
    assert kernel.run("# Parameters\nmodel = 'nbagent/scripted'").ok
    line = kernel.run("%agent config").stdout.splitlines()[0]
    assert line.startswith("model      = 'nbagent/scripted' ") and line.endswith("(papermill parameter (cell [5]))")


def test_read_cell_takes_only_papermills_shape() -> None:
    assert read_cell('# Parameters\napprove = "all"\nmax_steps = 3\n') == {"approve": "all", "max_steps": 3}
    assert read_cell('approve = "all"') is None  # no marker line
    assert read_cell('# Parameters\napprove = pick()') is None  # not a literal: not papermill's
    assert read_cell('# Parameters\nimport os\napprove = "all"') is None
    assert settings_of({"model": "m", "nbagent_model": "n", "script": "s.json", "nbagent_session": "x",
                        "rows": 3}) == {"model": "n", "session": "x"}  # script only as nbagent_script
    p = Parameters()
    p.observe('# Parameters\nbudget = "lots"', 4)
    assert p.errors["budget"] == "papermill parameter (cell [4]): budget = 'lots': budget must be a number, got 'lots'"
    p.observe("# Parameters\nbudget = 0.25", 6)  # a later cell replaces it, as papermill's injected cell does
    assert not p.errors and p.values["budget"] == (0.25, "papermill parameter (cell [6])")
