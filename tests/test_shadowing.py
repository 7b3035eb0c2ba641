"""The model library is never loaded from the working folder (nbagent/shadowing.py): unit checks, no kernel.

The kernel attack (a cloned repository's `litellm.py` and `tiktoken.py`, loaded in the background after
`%load_ext`) is in test_model_loading_attack.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nbagent import shadowing


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder on sys.path as a kernel has it ('' after the standard library), with nothing of the model
    library imported yet."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))] + [""])
    for name in ("litellm", "openai", "tiktoken", "httpx"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


def test_a_module_of_the_library_in_the_working_folder_stops_the_load(folder: Path) -> None:
    (folder / "tiktoken.py").write_text("raise SystemExit('must never run')\n")
    with pytest.raises(shadowing.ShadowedLibrary) as caught:
        shadowing.check()
    message = str(caught.value)
    assert str(folder / "tiktoken.py") in message and "'tiktoken'" in message
    assert "Rename or move it" in message and "\n" not in message


def test_a_package_and_the_library_itself_are_named_too(folder: Path) -> None:
    (folder / "openai").mkdir()
    (folder / "openai" / "__init__.py").write_text("")
    (folder / "litellm.py").write_text("")
    with pytest.raises(shadowing.ShadowedLibrary, match=r"'litellm', 'openai'"):
        shadowing.check()


def test_a_folder_of_the_person_own_modules_loads(folder: Path) -> None:
    (folder / "analysis.py").write_text("")
    (folder / "helpers").mkdir()
    (folder / "helpers" / "__init__.py").write_text("")
    (folder / "openai").mkdir()  # a namespace folder (no __init__): the installed package wins over it
    (folder / "data.csv").write_text("a,b\n")
    shadowing.check()


def test_a_module_already_imported_is_the_one_in_use(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (folder / "httpx.py").write_text("")
    monkeypatch.setitem(sys.modules, "httpx", sys.modules.get("json"))
    shadowing.check()


def test_only_the_working_folder_counts(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (folder / "litellm.py").write_text("")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != ""])
    shadowing.check()  # a folder not on sys.path is never imported from
