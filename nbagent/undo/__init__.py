"""Undo, checked against the log: the files agent runs changed (`files.py`) and the cells they wrote (`cells.py`).
See docs/undo.md."""

from __future__ import annotations

from importlib import import_module
from typing import Any

# The names the docs show as `nbagent.undo.NAME`, loaded from their module on first use (importing the package
# imports nothing else, so a module low in the layers can import a sibling without loading the rest).
_EXPORTS = {name: "nbagent.undo.files" for name in ("undo", "preview", "undo_history", "UndoError",)}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nbagent.undo' has no attribute {name!r}")
    return getattr(import_module(module), name)
