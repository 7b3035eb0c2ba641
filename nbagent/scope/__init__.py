"""The file scope: which paths the agent's file tools may touch (`rules.py`: `Scope`, `ScopeGuard`), operations
beneath one folder that no link or swapped folder can redirect (`beneath.py`), and the other names a file has
inside the folder (`links.py`)."""

from __future__ import annotations

from importlib import import_module
from typing import Any

# The names the docs show as `nbagent.scope.NAME`, loaded from their module on first use (importing the package
# imports nothing else, so a module low in the layers can import a sibling without loading the rest).
_EXPORTS = {name: "nbagent.scope.rules" for name in ("Scope", "ScopeGuard", "ScopeDenied", "DEFAULT_EXCLUDES",)}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nbagent.scope' has no attribute {name!r}")
    return getattr(import_module(module), name)
