"""Shared fixtures, the test tiers and the hypothesis profiles.

Tiers (markers registered in pyproject.toml) are written on the tests (`@pytest.mark.kernel` on a test, or a module's
`pytestmark`):

- `browser`: drives JupyterLab in Chromium (every test in tests/test_browser*.py);
- `kernel`: starts a Jupyter kernel (the `kernel` fixture, tests/kernel_harness.py's `Kernel`, jupyter_client,
  nbclient, papermill, or `nbagent run` in a subprocess);
- `install`: installs nbagent from a fresh clone or its sdist;
- `slow`: everything above, and the tests marked `slow` themselves (seconds each without a kernel: the property
  tests over whole runs, the model-process tests, `mypy` over the package, ...).

A test that starts a kernel without its marker is refused at collection, with the line to add (`_starts_kernels` reads
what the test, its fixtures and the test folder's functions it calls refer to), so the fast tier never starts one.

The fast tier is `pytest -m "not slow" --hypothesis-profile quick` (a tenth of each property's examples:
tests/examples.py); CI runs everything with the full counts (the `ci` profile, the default). A fast-tier test that
takes longer than FAST_LIMIT_S is named at the end of the run, to be made faster or marked `slow`; the end of every
run also says how many tests each tier ran and how long they took together.
"""

from __future__ import annotations

import inspect
import os
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from nbagent.store import Store

# Names that start Jupyter kernels when a test (or a function or fixture of its module it uses) refers to them.
KERNEL_NAMES = {"Kernel", "KernelManager", "AsyncKernelManager", "NotebookClient", "execute_notebook", "main_run",
                "run_notebook", "nbclient", "papermill"}
FAST_LIMIT_S = 5.0
TESTS = Path(__file__).resolve().parent


def _code_refs(code: types.CodeType) -> tuple[set[str], set[str]]:
    """The global and attribute names a code object (with the functions nested in it) uses, and its strings."""
    names, strings = set(code.co_names), {c for c in code.co_consts if isinstance(c, str)}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            n, s = _code_refs(const)
            names |= n
            strings |= s
    return names, strings


def _starts_kernels(item: pytest.Item) -> bool:
    """Whether a test refers, itself or through the test folder's functions it uses (its module's fixtures, helpers
    of any test module), to something that starts a kernel: KERNEL_NAMES, or a subprocess given the argument "run"
    (`nbagent run NOTEBOOK`)."""
    function = getattr(item, "function", None)
    if function is None:
        return False
    function = inspect.unwrap(getattr(getattr(function, "hypothesis", None), "inner_test", function))  # @given
    module = vars(inspect.getmodule(function) or object)
    fixtures = [getattr(module.get(name), "__wrapped__", module.get(name)) for name in item.fixturenames]
    todo = [function, *(f for f in fixtures if inspect.isfunction(f))]
    seen: set[Any] = set()
    names: set[str] = set()
    strings: set[str] = set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        n, s = _code_refs(f.__code__)
        names |= n
        strings |= s
        todo.extend(v for k in n if inspect.isfunction(v := f.__globals__.get(k))
                    and Path(v.__code__.co_filename).parent == TESTS)
    return bool(names & KERNEL_NAMES) or ("run" in strings and "subprocess" in names)


TIERS = ("browser", "kernel", "install")
# `ci` is hypothesis's defaults with each test's own count (written on it); `quick` scales the counts down
# (tests/examples.py). Registered on import, before the hypothesis plugin loads the one `--hypothesis-profile` names.
settings.register_profile("ci", settings.get_profile("default"))
settings.register_profile("quick", settings.get_profile("default"))


def missing_tier(item: pytest.Item) -> str | None:
    """The tier marker a collected test lacks, if any: `browser` for tests/test_browser*.py, `kernel` for a test
    that starts a kernel."""
    own = {m.name for m in item.iter_markers()}
    if Path(str(item.path)).name.startswith("test_browser"):
        return None if "browser" in own else "browser"
    if own & {"kernel", "install"}:
        return None
    if "kernel" in getattr(item, "fixturenames", ()) or _starts_kernels(item):
        return "kernel"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = [(item.nodeid, tier) for item in items if (tier := missing_tier(item))]
    if unmarked:
        shown = "\n".join(f"  {nodeid}: add @pytest.mark.{tier}" for nodeid, tier in unmarked[:20])
        raise pytest.UsageError(f"tests without their tier marker (tests/conftest.py):\n{shown}")
    for item in items:
        if {m.name for m in item.iter_markers()} & set(TIERS):
            item.add_marker("slow")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    """Each tier's count and time (a test's own: setup, call and teardown, summed over the workers), and the
    fast-tier tests that were not fast."""
    took: dict[str, float] = {}
    tier: dict[str, str] = {}
    for reports in terminalreporter.stats.values():
        for r in reports:
            if isinstance(r, pytest.TestReport):
                took[r.nodeid] = took.get(r.nodeid, 0.0) + r.duration
                tier[r.nodeid] = next((t for t in TIERS if t in r.keywords), "slow" if "slow" in r.keywords else "fast")
    if not took:
        return
    terminalreporter.section("tiers: tests and their time summed (all workers)")
    for name in ("fast", "slow", *TIERS):
        ids = [n for n, t in tier.items() if t == name]
        if ids:
            terminalreporter.write_line(f"{name:>8}: {len(ids):5d} tests  {sum(took[n] for n in ids):8.1f} s")
    over = sorted(((t, n) for n, t in took.items() if tier[n] == "fast" and t > FAST_LIMIT_S), reverse=True)
    if over:
        terminalreporter.section(f"fast tier: tests over {FAST_LIMIT_S:.0f} s (make them faster, or mark them slow)")
        for t, n in over:
            terminalreporter.write_line(f"{t:6.1f} s  {n}")


@pytest.fixture(autouse=True, scope="session")
def _user_data_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Never the real user's data folder (the key that seals grants and trusts, the stores' anchors): one of the
    test session's own, for subprocesses and kernels too (they inherit the environment)."""
    old = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("user-data"))
    yield
    if old is None:
        os.environ.pop("XDG_DATA_HOME", None)
    else:
        os.environ["XDG_DATA_HOME"] = old


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "analysis.ipynb")
    yield s
    s.close()


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[object]:
    """A real kernel in `tmp_path` (notebook test.ipynb) with nbagent loaded, driven like JupyterLab."""
    from kernel_harness import Kernel

    k = Kernel(tmp_path)
    assert k.run("%load_ext nbagent", cell_id="setup").ok
    yield k
    k.close()
