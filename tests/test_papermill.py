"""Plain papermill (no nbagent runner): approvals from NBAGENT_APPROVE; without a policy, a fast clear failure."""

from __future__ import annotations

import json
import time
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.kernel

papermill = pytest.importorskip("papermill", reason="papermill is a test dependency (pip install -e '.[test]')")

RUN_MIME = "application/vnd.nbagent.run+json"


def write(folder: Path) -> Path:
    (folder / "s.json").write_text(json.dumps({"turns": [
        {"tool_calls": [{"name": "create_file", "arguments": {"path": "out.md", "content": "made by papermill\n"}}]},
        {"content": "Wrote out.md."},
    ]}))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbagent"),
                nbformat.v4.new_code_cell("%%agent --script s.json\nwrite out.md")]
    path = folder / "in.ipynb"
    nbformat.write(nb, path)
    return path


def test_papermill_with_an_approval_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBAGENT_APPROVE", "all")
    path = write(tmp_path)
    out = papermill.execute_notebook(str(path), str(tmp_path / "out.ipynb"), cwd=str(tmp_path), kernel_name="python3",
                                     progress_bar=False)
    assert (tmp_path / "out.md").read_text() == "made by papermill\n"
    record = next(o["data"][RUN_MIME] for o in out.cells[1].outputs if RUN_MIME in o.get("data", {}))
    assert record["status"] == "completed" and record["decisions"][0]["by"] == "policy:all"
    assert (tmp_path / "agent.nbagent").is_dir()  # papermill tells the kernel no notebook path: the fallback


def test_papermill_without_a_policy_fails_fast_with_the_documented_message(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NBAGENT_APPROVE", raising=False)
    path = write(tmp_path)
    started = time.monotonic()
    with pytest.raises(papermill.PapermillExecutionError) as exc:
        papermill.execute_notebook(str(path), str(tmp_path / "out.ipynb"), cwd=str(tmp_path),
                                   kernel_name="python3", progress_bar=False, execution_timeout=120)
    message = str(exc.value)
    assert "HeadlessDecisionError" in message and "nobody can answer here" in message
    assert "NBAGENT_APPROVE=all|none|low" in message
    assert time.monotonic() - started < 110  # it did not sit out the cell timeout
    assert not (tmp_path / "out.md").exists()
    docs = (Path(__file__).resolve().parents[1] / "docs" / "troubleshooting.md").read_text()
    assert "nobody can answer here" in docs
