"""Shared fixtures, and the test tiers.

Tiers (markers registered in pyproject.toml), given here from what a test uses, so that a new test is in its tier
without anyone marking it:

- `browser`: a test in tests/test_browser*.py (JupyterLab driven in Chromium).
- `kernel`: a test that starts a Jupyter kernel: it uses the `kernel` fixture, or it refers (itself or through
  the functions and fixtures of its module it uses) to what starts one: tests/kernel_harness.py's `Kernel`,
  jupyter_client, nbclient, papermill, or a subprocess given `run` (`nbagent run`); see `_starts_kernels`.
- `install`: a test that installs nbagent (marked by hand: tests/test_firststeps_clone.py).
- `slow`: every browser, kernel and install test, and the tests in SLOW (measured at several seconds each).

The fast tier is `pytest -m "not slow"` (under 3 minutes on 2 cores); CI runs everything. A test in the fast
tier that takes longer than FAST_LIMIT_S is named at the end of the run, to be made faster or added to SLOW.
"""

from __future__ import annotations

import inspect
import os
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nbagent.store import Store

# Names that start Jupyter kernels when a test (or a function or fixture of its module it uses) refers to them.
KERNEL_NAMES = {"Kernel", "KernelManager", "AsyncKernelManager", "NotebookClient", "execute_notebook", "main_run",
                "run_notebook", "nbclient", "papermill"}
# Modules or single tests (node ids) that take long without a kernel or a browser (measured on 2 cores: the
# property tests a minute or more each, the writer killed at random moments most of one, the fresh clones).
SLOW = {
    "test_approval_property", "test_effect_property", "test_firststeps_clone",
    "test_model_process",  # each test starts a model process that imports litellm (~3 s)
    "tests/test_store_processes.py::test_writer_sigkilled_at_random_moments",
    "tests/test_lint.py::test_mypy_clean",  # ~30 s of CPU for the whole package, cold
    # a fresh interpreter importing litellm (~3 s) and making its first call
    "tests/test_llm_http.py::test_a_first_call_with_tools_loads_no_mcp_gateway_and_leaves_the_environment_as_it_was",
    # a model process (litellm imported, ~3 s); `jupyter execute` starting a kernel in a subprocess
    "tests/test_bounded_waits.py::test_through_the_model_process_the_deadline_cancels_the_call_there",
    "tests/test_cell_truth.py::test_jupyter_execute_stops_at_a_failed_run_and_shows_its_line",
}
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


def tiers(item: pytest.Item) -> set[str]:
    """The tier markers a collected test gets (besides those it carries itself)."""
    path = Path(str(item.path))
    own = {m.name for m in item.iter_markers()}
    found: set[str] = set()
    if path.name.startswith("test_browser"):
        found.add("browser")
    elif "kernel" in getattr(item, "fixturenames", ()) or _starts_kernels(item):
        found.add("kernel")
    if found or "install" in own or path.stem in SLOW or item.nodeid in SLOW:
        found.add("slow")
    return found - own


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for name in sorted(tiers(item)):
            item.add_marker(name)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    """Name the fast-tier tests that were not fast (a test's own time: setup, call and teardown)."""
    took: dict[str, float] = {}
    slow: set[str] = set()
    for reports in terminalreporter.stats.values():
        for r in reports:
            if isinstance(r, pytest.TestReport):
                took[r.nodeid] = took.get(r.nodeid, 0.0) + r.duration
                if "slow" in r.keywords:
                    slow.add(r.nodeid)
    over = sorted(((t, n) for n, t in took.items() if n not in slow and t > FAST_LIMIT_S), reverse=True)
    if over:
        terminalreporter.section(f"fast tier: tests over {FAST_LIMIT_S:.0f} s (make them faster, or add them to "
                                 "SLOW in tests/conftest.py)")
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
