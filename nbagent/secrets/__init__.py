"""One redactor for everything that leaves the kernel (`redactor.py`), and a cell's outputs through it
(`outputs.py`)."""

from __future__ import annotations

from importlib import import_module
from typing import Any

# The names the docs show as `nbagent.secrets.NAME`, loaded from their module on first use (importing the package
# imports nothing else, so a module low in the layers can import a sibling without loading the rest).
_EXPORTS = {name: "nbagent.secrets.redactor" for name in ("Redactor",)}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nbagent.secrets' has no attribute {name!r}")
    return getattr(import_module(module), name)
