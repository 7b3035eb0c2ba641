from __future__ import annotations

from pathlib import Path

import pytest

from nbagent.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "analysis.ipynb")
    yield s
    s.close()
