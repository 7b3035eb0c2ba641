"""The code base stays ruff-clean: checked by the test command, so CI enforces it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    result = subprocess.run([ruff, "check", str(ROOT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_runtime_imports_no_ipython_widgets_or_litellm() -> None:
    """The runtime imports no IPython or widget code, and litellm only when a model is called (docs/architecture.md,
    Layers)."""
    code = (
        "import sys, nbagent, nbagent.store, nbagent.state, nbagent.cli, nbagent.verify, nbagent.runtime, "
        "nbagent.llm, nbagent.models, nbagent.deciders, nbagent.policy, nbagent.replay; "
        "bad = [m for m in ('IPython', 'ipywidgets', 'anywidget', 'litellm', 'ipykernel') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
