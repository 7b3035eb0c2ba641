"""The code base stays ruff-clean: checked by the test command, so CI enforces it."""

from __future__ import annotations

import ast
import re
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


ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _imports(path: Path, name: str, modules: set[str]) -> tuple[set[str], set[str]]:
    """The nbagent modules a module imports, at any depth (in functions too): those that run, and those for
    annotations only (under `if TYPE_CHECKING:`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in
                   ast.unparse(node.test) for stmt in node.body for n in ast.walk(stmt)}
    runs: set[str] = set()
    typed: set[str] = set()
    for node in ast.walk(tree):
        found: set[str] = set()
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
            found = {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
        elif isinstance(node, ast.Import):
            found = {a.name for a in node.names}
        (typed if id(node) in typing_only else runs).update(found & modules - {name})
    return runs, typed - runs


def _modules() -> dict[str, Path]:
    return {".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): f
            for f in (ROOT / "nbagent").rglob("*.py")}


def _layers() -> dict[str, int]:
    """docs/architecture.md's "The tree, layer by layer": each module (its path under nbagent/) and its layer."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("## The tree, layer by layer", 1)[1].split("\n## ", 1)[0]
    layer: dict[str, int] = {}
    for line in section.splitlines():
        if (m := re.match(r"(\d+)\. \*\*", line)) is None:
            continue
        for path in re.findall(r"`([\w/]+\.py)`", line):
            name = ("nbagent." + path.removesuffix(".py").replace("/", ".")).removesuffix(".__init__")
            assert name not in layer, f"{path} is named twice in docs/architecture.md's layers"
            layer[name] = int(m.group(1))
    return layer


def test_architecture_names_every_module_once_in_its_layer() -> None:
    """The tree and docs/architecture.md's layer list match module for module."""
    modules, layers = set(_modules()), set(_layers())
    assert sorted(modules - layers) == [], "modules docs/architecture.md's layers do not name"
    assert sorted(layers - modules) == [], "modules docs/architecture.md's layers name that do not exist"


def test_every_import_points_down_the_layers_and_none_goes_round() -> None:
    """Every import nbagent's code makes, in functions too, is of a module in its own layer or one below
    (docs/architecture.md, "The tree, layer by layer"); no module reaches itself through imports that run; an
    import for annotations only stays in its own package or goes down."""
    files, layer = _modules(), _layers()
    graph: dict[str, set[str]] = {}
    up = []
    for name, path in files.items():
        runs, typed = _imports(path, name, set(files))
        graph[name] = runs
        up += [f"{name} -> {d}" for d in sorted(runs) if layer[d] > layer[name]]
        up += [f"{name} -> {d} (annotations)" for d in sorted(typed)
               if layer[d] > layer[name] and d.rsplit(".", 1)[0] != name.rsplit(".", 1)[0]]
    assert up == [], "imports up the layers"

    def reaches(start: str) -> bool:
        seen, todo = set(), list(graph[start])
        while todo:
            if (m := todo.pop()) == start:
                return True
            if m not in seen:
                seen.add(m)
                todo.extend(graph[m])
        return False

    assert sorted(m for m in graph if reaches(m)) == [], "modules on an import cycle"
    # the top layer's two packages stand side by side: what both need lives below them (tools/cell_text.py,
    # ui/run_tables.py)
    package = {name: name.split(".")[1] if "." in name else "" for name in graph}
    across = [f"{m} -> {d}" for m, deps in graph.items() for d in sorted(deps)
              if {package[m], package[d]} == {"cli", "ipython"}]
    assert across == [], "nbagent.cli and nbagent.ipython import each other"


# The private names still imported across modules: none. A name two modules need is public in the module that owns
# it (with a docstring saying why), or lives in the one module that uses it; the set stays empty.
KNOWN_PRIVATE: frozenset[str] = frozenset()


def test_no_module_imports_another_s_private_names() -> None:
    """A `_name` is its module's own: no other module of nbagent imports it (but KNOWN_PRIVATE, which only
    shrinks)."""
    files = _modules()
    found = []
    for name, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nbagent"):
                found += [f"{name}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert sorted(set(found) - KNOWN_PRIVATE) == [], "private names imported across modules"
    assert sorted(KNOWN_PRIVATE - set(found)) == [], "no longer imported: take them out of KNOWN_PRIVATE"


# Modules are small enough to read in one sitting; these few are not yet (the list may only shrink).
MAX_LINES = 500
KNOWN_LONG: frozenset[str] = frozenset()


def test_modules_stay_small() -> None:
    """No module of nbagent is over MAX_LINES lines (but KNOWN_LONG, which only shrinks): a module that grows past it
    is split by concept, as events/envelope.py, gate/grant_backing.py, undo/report.py and ui/record_format.py were."""
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in _modules().items()}
    long = {name for name, n in sizes.items() if n > MAX_LINES}
    assert sorted(f"{name}: {sizes[name]} lines" for name in long - KNOWN_LONG) == [], "modules over 500 lines"
    assert sorted(KNOWN_LONG - long) == [], "no longer over 500 lines: take them out of KNOWN_LONG"


@pytest.mark.slow
def test_mypy_clean(tmp_path: Path) -> None:
    """The type checker (mypy, strict: pyproject.toml [tool.mypy]) finds nothing in nbagent/: CI runs this."""
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[test]')")
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache")],
                            cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
