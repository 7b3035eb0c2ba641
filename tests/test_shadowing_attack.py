"""Attacks on the check that no module in the working folder stands in for one of nbagent's dependencies, or the
model library's (nbagent/shadowing.py): a folder joining an installed namespace package, compiled modules, links,
case, a folder that becomes shadowing between two cells, the standard library's names, and a folder of thousands
of folders (the check runs before every `%%agent` cell).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kernel_harness import Kernel, answer, script

from nbagent import shadowing


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder on sys.path as a kernel has it ('' after the standard library, before site-packages)."""
    monkeypatch.chdir(tmp_path)
    at = next(i for i, p in enumerate(sys.path) if p.endswith("site-packages"))
    monkeypatch.setattr(sys, "path", [*sys.path[:at], "", *[p for p in sys.path[at:] if p not in ("", str(tmp_path))]])
    return tmp_path


def _namespace(name: str) -> bool:
    spec = importlib.util.find_spec(name)
    return spec is not None and spec.origin in (None, "namespace") and spec.submodule_search_locations is not None


def test_a_folder_that_joins_an_installed_namespace_package_is_named(folder: Path) -> None:
    """`opentelemetry` (which mcp imports) is a namespace package: a folder of that name in the working folder,
    without an `__init__.py`, joins it ahead of the installed one, so its `trace/__init__.py` is what `import mcp`
    runs. Likewise tiktoken's plugin namespace `tiktoken_ext`, every module of which tiktoken imports."""
    assert _namespace("opentelemetry") and _namespace("tiktoken_ext")
    (folder / "opentelemetry" / "trace").mkdir(parents=True)
    (folder / "opentelemetry" / "trace" / "__init__.py").write_text("raise SystemExit('must never run')\n")
    # Was: passed (a folder without __init__.py was taken for one the installed package always wins over)
    with pytest.raises(shadowing.ShadowedLibrary) as caught:
        shadowing.check("nbagent")
    assert str(folder / "opentelemetry") in str(caught.value) and "'opentelemetry'" in str(caught.value)
    (folder / "tiktoken_ext").mkdir()
    (folder / "tiktoken_ext" / "planted.py").write_text("raise SystemExit('must never run')\n")
    with pytest.raises(shadowing.ShadowedLibrary, match="'tiktoken_ext'"):
        shadowing.check()
    # the same run in a fresh interpreter: the planted module is what the import runs
    ran = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, ''); import mcp"], cwd=folder,
                         capture_output=True, text=True, timeout=120)
    assert "must never run" in ran.stderr


def test_held_a_namespace_folder_of_data_and_a_regular_package_s_name_load(folder: Path) -> None:
    """A folder named like a namespace package that holds no Python (data), and a folder named like a regular
    package (the installed one wins), are the person's own."""
    (folder / "opentelemetry").mkdir()
    (folder / "opentelemetry" / "spans.json").write_text("[]")
    (folder / "mcp").mkdir()  # a folder of MCP configs
    (folder / "mcp" / "servers.json").write_text("{}")
    (folder / "pydantic").mkdir()
    shadowing.check("nbagent")
    shadowing.check()


@pytest.mark.parametrize("planted", ["pydantic_core.cpython-311-x86_64-linux-gnu.so", "pydantic_core.abi3.so",
                                     "tinydb.so", "nh3.pyc"])
def test_held_a_compiled_module_named_like_a_dependency_is_named(folder: Path, planted: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, planted.split(".")[0], raising=False)  # as in a kernel before a first run
    (folder / planted).write_bytes(b"\x7fELF")
    with pytest.raises(shadowing.ShadowedLibrary) as caught:
        shadowing.check("nbagent")
    assert str(folder / planted) in str(caught.value)


def test_held_links_and_case(folder: Path, tmp_path_factory: pytest.TempPathFactory,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A link named `pydantic.py` to a file elsewhere, and a link named `tinydb` to a package elsewhere, are
    imported as themselves: named. `Pydantic.py` is not what `import pydantic` takes (names are case-sensitive)."""
    for name in ("pydantic", "tinydb"):
        monkeypatch.delitem(sys.modules, name)
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "evil.py").write_text("")
    (elsewhere / "pkg").mkdir()
    (elsewhere / "pkg" / "__init__.py").write_text("")
    (folder / "Pydantic.py").write_text("")
    (folder / "TinyDB").mkdir()
    (folder / "TinyDB" / "__init__.py").write_text("")
    shadowing.check("nbagent")
    (folder / "pydantic.py").symlink_to(elsewhere / "evil.py")
    (folder / "tinydb").symlink_to(elsewhere / "pkg")
    with pytest.raises(shadowing.ShadowedLibrary, match=r"'pydantic', 'tinydb'"):
        shadowing.check("nbagent")


@pytest.mark.kernel
def test_held_the_standard_library_s_names_are_not_taken_from_the_folder_in_a_kernel(tmp_path: Path) -> None:
    """A kernel has '' after the standard library: a cloned repository's `secrets.py` or `difflib.py` (which a
    first run imports) is not what nbagent's import takes, so it never runs and the run works; a module
    that appears between two cells (`starlette.py`: mcp's, imported only once a server is used) stops the second.
    One kernel."""
    ran = tmp_path / "ran"
    for name in ("secrets", "difflib", "fractions"):
        (tmp_path / f"{name}.py").write_text(f"import pathlib; pathlib.Path({str(ran)!r}).touch()\n")
    turns = script(tmp_path / "s.json", answer("hello"))
    k = Kernel(tmp_path)
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        first = k.run(f"%%agent --script {turns}\nsay hello", cell_id="a1")
        assert first.ok and "hello" in json.dumps(first.records), first.outputs
        (tmp_path / "starlette.py").write_text(f"import pathlib; pathlib.Path({str(ran)!r}).touch()\n")
        second = k.run(f"%%agent --script {turns}\nsay hello again", cell_id="a2")
        assert not second.ok and any("starlette.py" in o.get("error", "") for o in second.outputs)
        assert not ran.exists()
    finally:
        k.close()


def test_a_folder_of_many_folders_is_checked_without_looking_into_each(folder: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The check runs before every `%%agent` cell. A folder of 5,000 sub-folders (an image dataset's classes)
    must not cost a look inside each: only folders named like a dependency are looked into. Counted, not timed
    (50,000 folders took 1.5-2.1 s a cell, measured, and take 30-45 ms now: the folder's listing)."""
    for i in range(5_000):
        os.mkdir(folder / f"class_{i}")
    (folder / "notes.md").write_text("")
    shadowing.wanted("nbagent"), shadowing.wanted(shadowing.ROOT)  # the names, computed once per process: not counted
    looked: list[str] = []
    real = Path.exists

    def counted(self: Path) -> bool:
        looked.append(str(self))
        return real(self)

    monkeypatch.setattr(Path, "exists", counted)
    shadowing.check("nbagent")
    shadowing.check()
    # Was: 5 looks per folder (an __init__ of each suffix): 50,000 for these two checks
    assert len(looked) < 100, len(looked)
