"""The `nbagent` command (`commands.py`) and the headless notebook runner behind `nbagent run` (`run.py`; the
agent's cells as it treats them, `run_cells.py`; what stops it early, `run_stops.py`)."""

from __future__ import annotations

from importlib import import_module
from typing import Any

# The names the docs show as `nbagent.cli.NAME`, loaded from their module on first use (importing the package
# imports nothing else, so a module low in the layers can import a sibling without loading the rest).
_EXPORTS = {name: "nbagent.cli.commands" for name in ("main",)}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nbagent.cli' has no attribute {name!r}")
    return getattr(import_module(module), name)
