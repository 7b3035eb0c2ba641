from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nbagent.store import Store


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
