"""What a new user meets running notebooks (issue 45): a read-only folder, an older notebook format, a run that
needs a decision inside `nbagent run`. Each is said in one clear line fitting where it is shown, nothing is lost,
and what nbagent writes is a notebook nbformat's own validator accepts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

pytestmark = pytest.mark.kernel

RUN_MIME = "application/vnd.nbagent.run+json"


def nbagent(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("nbagent")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, cwd=cwd, timeout=300, check=False)


def write_notebook(path: Path, cells: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    nbformat.write(nb, path)
    return path


def script(folder: Path, name: str, *turns: dict[str, Any]) -> str:
    (folder / name).write_text(json.dumps({"turns": list(turns)}))
    return name


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------------ a read-only folder


@pytest.fixture
def readonly_folder(tmp_path: Path):
    """A real read-only file system (a tmpfs, filled by `fill`, then remounted read-only; needs root, as CI has):
    `chmod` stops no root process, a read-only mount stops everyone."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True,
                             check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")

    def readonly() -> Path:
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        return mnt

    try:
        yield mnt, readonly
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_nbagent_run_in_a_readonly_folder_says_one_line_and_loses_nothing(readonly_folder, tmp_path: Path) -> None:
    folder, readonly = readonly_folder
    script(folder, "s.json", {"content": "hi"})
    write_notebook(folder / "nb.ipynb", ["%load_ext nbagent", "%%agent --script s.json\nhello"])
    readonly()
    before = snapshot(folder)

    # in place: nothing can be written there, so nothing runs; one line says so and what to do
    result = nbagent("run", "nb.ipynb", cwd=folder)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"nbagent: error: {folder / 'nb.ipynb'}: cannot write the executed notebook")
    assert "copy the notebook to a writable folder" in line.lower()
    assert snapshot(folder) == before

    # the executed notebook written elsewhere: the agent's cell fails in the one line of the log's error, and the
    # output holds that same line as the cell's whole traceback
    result = nbagent("run", str(folder / "nb.ipynb"), "-o", str(tmp_path / "out.ipynb"), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    (failed,) = result.stderr.splitlines()
    assert failed.startswith(f"a cell failed: StoreReadOnly: {folder / 'nb.nbagent'}: cannot write the log")
    assert result.stdout.splitlines() == [f"FAILED: 0 run(s); executed notebook written to {tmp_path / 'out.ipynb'}"]
    (error,) = [o for c in nbformat.read(tmp_path / "out.ipynb", as_version=4).cells for o in c.outputs
                if o.output_type == "error"]
    assert error.ename == "StoreReadOnly" and len(error.traceback) == 1
    assert snapshot(folder) == before

    # an output path in a read-only folder, from a writable one: refused before anything runs
    (tmp_path / "rw").mkdir()
    write_notebook(tmp_path / "rw" / "nb.ipynb", ["1 + 1"])
    result = nbagent("run", "nb.ipynb", "-o", str(folder / "out.ipynb"), cwd=tmp_path / "rw")
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"nbagent: error: {folder / 'out.ipynb'}: cannot write the executed notebook")
    assert "pass --output" in line.lower() and not (tmp_path / "rw" / "nb.nbagent").exists()


def test_an_agent_cell_in_a_readonly_folder_fails_in_one_line(readonly_folder) -> None:
    """In a kernel (as JupyterLab runs it): the cell's error is the store's one line, no traceback above it."""
    sys.path.insert(0, str(Path(__file__).parent))
    from kernel_harness import Kernel

    folder, readonly = readonly_folder
    script(folder, "s.json", {"content": "hi"})
    readonly()
    k = Kernel(folder)
    try:
        assert k.run("%load_ext nbagent").ok
        cell = k.run("%%agent --script s.json\nhello")
    finally:
        k.close()
    assert cell.reply is not None and cell.reply["content"]["ename"] == "StoreReadOnly"
    (shown,) = cell.reply["content"]["traceback"]
    assert "cannot write the log (Read-only file system)" in shown and "copy the notebook" in shown
    assert cell.stdout == cell.stderr == ""
    assert not (folder / "test.nbagent").exists()


# ------------------------------------------------------------------------------------------ nbformat 4.0-4.4


def old_notebook(path: Path, minor: int, ids: bool = False) -> Path:
    """A notebook of nbformat 4.`minor`, valid by that version's own schema: no cell ids (they came in 4.5), a
    markdown cell, a code cell with an execution result, and an %%agent cell. `ids`: with the ids an earlier
    `nbagent run` wrote into it while keeping its old minor version (invalid, as nbformat says)."""
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_markdown_cell("# Sales"), nbformat.v4.new_code_cell("%load_ext nbagent"),
                nbformat.v4.new_code_cell("6 * 7", execution_count=1, outputs=[nbformat.v4.new_output(
                    "execute_result", data={"text/plain": "42"}, execution_count=1)]),
                nbformat.v4.new_code_cell("%%agent --script s.json\nsay hi")]
    nb.nbformat_minor = minor
    for cell in nb.cells:
        del cell["id"]
    nbformat.validate(nb, version=4, version_minor=minor)  # a real 4.minor notebook
    if ids:
        for n, cell in enumerate(nb.cells):
            cell["id"] = f"cell-{n}"
    path.write_text(json.dumps(nb, indent=1))
    return path


@pytest.mark.parametrize("minor", [0, 1, 2, 3, 4])
def test_an_older_notebook_is_written_back_valid(tmp_path: Path, minor: int) -> None:
    script(tmp_path, "s.json", {"content": "hi"})
    path = old_notebook(tmp_path / "old.ipynb", minor)
    result = nbagent("run", "old.ipynb", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    written = nbformat.read(path, as_version=4)
    nbformat.validate(written)  # by the version it declares: cell ids need 4.5
    assert written.nbformat_minor == 5
    assert [c.source for c in written.cells] == ["# Sales", "%load_ext nbagent", "6 * 7",
                                                 "%%agent --script s.json\nsay hi"]
    assert written.cells[2].outputs[0]["data"]["text/plain"] == "42"
    (record,) = [o["data"][RUN_MIME] for o in written.cells[3].outputs if RUN_MIME in o.get("data", {})]
    assert record["status"] == "completed" and record["cell_id"] == written.cells[3].id  # the run is tied to it

    if minor:
        return
    # run again (once: the oldest): the same cells (ids kept), so the cell's run is re-run, not a new cell's
    again = nbagent("run", "old.ipynb", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    rerun = nbformat.read(path, as_version=4)
    assert [c.id for c in rerun.cells] == [c.id for c in written.cells]


def test_a_notebook_an_earlier_run_left_invalid_keeps_its_cell_ids(tmp_path: Path) -> None:
    """Cell ids written beside nbformat_minor 4 (what `nbagent run` wrote before): the ids name the cells in the log,
    so they stay, and the notebook is written valid."""
    script(tmp_path, "s.json", {"content": "hi"})
    path = old_notebook(tmp_path / "old.ipynb", 4, ids=True)
    with pytest.raises(nbformat.ValidationError):
        nbformat.validate(nbformat.read(path, as_version=4))
    result = nbagent("run", "old.ipynb", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    written = nbformat.read(path, as_version=4)
    nbformat.validate(written)
    assert [c.id for c in written.cells] == ["cell-0", "cell-1", "cell-2", "cell-3"]


# ------------------------------------------------------------------------------------------ a decision headless


def test_a_decision_inside_nbagent_run_advises_what_answers_there(tmp_path: Path) -> None:
    """The notebook cleared the approval policy (`%agent config approve=`): inside `nbagent run` the advice is that
    setting and the flags that answer decisions, not "use nbagent run"; a plain nbclient run still hears of both."""
    script(tmp_path, "w.json", {"tool_calls": [{"name": "create_file", "arguments": {"path": "a.md", "content": "a"}}]},
           {"content": "done"})
    path = write_notebook(tmp_path / "nb.ipynb", ["%load_ext nbagent", "%agent config approve=",
                                                  "%%agent --script w.json\nwrite a.md"])
    result = nbagent("run", "nb.ipynb", "--approve", "all", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    (failed,) = result.stderr.splitlines()
    assert failed.startswith("a cell failed: HeadlessDecisionError: nbagent: run ")
    assert "nbagent run NOTEBOOK" not in failed and "use `nbagent run" not in failed
    assert "%agent config" in failed and "--approve" in failed  # what set it aside, and what answers
    assert not (tmp_path / "a.md").exists()

    from nbclient import NotebookClient

    plain = nbformat.read(path, as_version=4)
    plain.cells = [c for c in plain.cells if "config" not in c.source]
    client = NotebookClient(plain, timeout=120, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(tmp_path)}})
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBAGENT_")}
    client.execute(env={**env, "NBAGENT_HEADLESS": "1"}, cwd=str(tmp_path))
    (error,) = [o for o in plain.cells[-1].outputs if o.output_type == "error"]
    assert error.ename == "HeadlessDecisionError"
    assert "nbagent run NOTEBOOK --approve" in error.evalue and "NBAGENT_APPROVE=all|none|low" in error.evalue
