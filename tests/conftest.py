from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nbagent.store import Store


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
