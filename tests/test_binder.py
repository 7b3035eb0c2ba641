"""Binder's steps, followed exactly in a fresh virtual environment, then the quickstart headlessly.

repo2docker does: `pip install -r binder/requirements.txt`, then runs `binder/postBuild` from the repository's
root. Here the same two steps run in a new venv; then `nbagent run` executes the quickstart with no network
access needed and no API key, and JupyterLab lists the extension.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(shutil.which("npm") is None, reason="building the lab extension needs npm")]


def test_binder_steps_then_the_quickstart(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
    env.pop("PYTHONPATH", None)

    def run(*cmd: str, cwd: Path = ROOT, timeout: int = 900) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                                check=False)
        assert result.returncode == 0, f"{cmd} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        return result

    run("pip", "install", "--quiet", "-r", "binder/requirements.txt")
    run("bash", "binder/postBuild")
    listed = run("jupyter", "labextension", "list")
    text = listed.stdout + listed.stderr
    assert "nbagent-labextension" in text and "enabled" in text.split("nbagent-labextension")[1].splitlines()[0]

    work = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", work, ignore=shutil.ignore_patterns("*.nbagent", "report.md"))
    result = run(str(venv / "bin" / "nbagent"), "run", "quickstart.ipynb", "--approve", "low", cwd=work)
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 3 and all(" completed " in line for line in lines[:2]), result.stdout
    assert lines[2].startswith("ok: 2 run(s)") and (work / "report.md").exists()
