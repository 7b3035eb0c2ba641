"""The import paths the docs showed before the tree went into packages keep working for a release: a package's
names load from their module, and a moved module imports as the module it became, with a DeprecationWarning naming
the new path (nbagent/_moved.py; docs/development.md, "The tree")."""

from __future__ import annotations

import subprocess
import sys

import pytest

MOVED = {"nbagent.llm": "nbagent.models.llm", "nbagent.modelproc": "nbagent.models.process",
         "nbagent.runner": "nbagent.cli.run", "nbagent.state": "nbagent.events.state"}
# what docs/, README and notebooks/ showed as `nbagent.X.NAME` (or `from nbagent.X import NAME`) before the packages
SHOWN = {"nbagent.scope": ["Scope", "ScopeGuard", "DEFAULT_EXCLUDES"], "nbagent.undo": ["undo", "preview"],
         "nbagent.events": ["UnknownEvent", "Event"], "nbagent.secrets": ["Redactor"], "nbagent.cli": ["main"],
         "nbagent.llm": ["accepts_images", "complete"], "nbagent.state": ["fold"],
         "nbagent.runner": ["agent_cell_clearance"], "nbagent.models": ["ScriptedModel", "ReplayModel"]}


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_a_moved_path_warns_and_is_the_module_it_became(old: str, new: str) -> None:
    warned = _python(f"import {old}")
    assert warned.returncode != 0 and f"{old} moved to {new}" in warned.stderr, warned.stderr
    same = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c",
                           f"import importlib as i; print(i.import_module({old!r}) is i.import_module({new!r}))"],
                          capture_output=True, text=True, timeout=120)
    assert same.stdout.strip() == "True", same.stderr


@pytest.mark.parametrize("path", sorted(SHOWN))
def test_the_names_the_docs_showed_still_import(path: str) -> None:
    names = ", ".join(SHOWN[path])
    quiet = "import warnings; warnings.simplefilter('ignore', DeprecationWarning)\n" if path in MOVED else ""
    result = _python(f"{quiet}from {path} import {names}\nprint('ok')")
    assert result.stdout.strip() == "ok", result.stderr


def test_python_m_nbagent_cli_is_the_command() -> None:
    result = subprocess.run([sys.executable, "-m", "nbagent.cli", "--version"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and result.stdout.strip().startswith("nbagent"), result.stdout + result.stderr
