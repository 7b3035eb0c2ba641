"""The code base stays ruff-clean: checked by the test command, so CI enforces it."""

from __future__ import annotations

import ast
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
        "import sys, nbagent, nbagent.store, nbagent.events.state, nbagent.cli.commands, nbagent.store.verify, "
        "nbagent.runtime, "
        "nbagent.models.llm, nbagent.models, nbagent.gate.deciders, nbagent.gate.policy, nbagent.runtime.recording; "
        "bad = [m for m in ('IPython', 'ipywidgets', 'anywidget', 'litellm', 'ipykernel') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def _imports_in(body: list[ast.stmt], package: str, files: set[str]) -> set[str]:
    """The nbagent modules a module body imports at its top level (TYPE_CHECKING blocks included)."""
    deps: set[str] = set()
    for node in body:
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
            deps.update(f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names)
        elif isinstance(node, ast.Import):
            deps.update(a.name for a in node.names)
        elif isinstance(node, ast.If):
            deps |= _imports_in(node.body, package, files)
    return {d for d in deps if d in files}


def _module_imports() -> dict[str, set[str]]:
    files = {".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): f
             for f in (ROOT / "nbagent").rglob("*.py")}
    return {name: _imports_in(ast.parse(path.read_text(encoding="utf-8")).body,
                              name if path.name == "__init__.py" else name.rpartition(".")[0], set(files)) - {name}
            for name, path in files.items()}


def test_the_gate_and_the_store_import_in_one_direction() -> None:
    """No import circle runs through the gate, the log or the runtime (docs/architecture.md, Layers): ids and policy
    sit below state and grants, those below approval, and nothing below the runtime imports approval or it."""
    graph = _module_imports()

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            for dep in graph[todo.pop()]:
                if dep == goal:
                    return True
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return False

    core = [m for m in graph if not m.startswith(("nbagent.ipython", "nbagent.ui", "nbagent.cli"))
            and m != "nbagent"]
    circles = sorted(m for m in core if reaches(m, m))
    assert circles == [], f"modules on an import circle: {circles}"
    below = ["nbagent.events.ids", "nbagent.gate.policy", "nbagent.events.levels", "nbagent.events.state",
             "nbagent.gate.grants", "nbagent.gate.effects", "nbagent.events.model", "nbagent.store"]
    assert [m for m in below if reaches(m, "nbagent.gate.approval") or reaches(m, "nbagent.runtime")] == []


@pytest.mark.slow
def test_mypy_clean(tmp_path: Path) -> None:
    """The type checker (mypy, strict: pyproject.toml [tool.mypy]) finds nothing in nbagent/: CI runs this."""
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[test]')")
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache")],
                            cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
