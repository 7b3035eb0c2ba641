"""The file scope: which paths the agent's file tools may touch (`rules.py`: `Scope`, `ScopeGuard`), operations
beneath one folder that no link or swapped folder can redirect (`beneath.py`), and the other names a file has
inside the folder (`links.py`)."""

from nbagent._lazy import lazy_names

# the names the docs show as `nbagent.scope.NAME`, and the module each comes from
_HOMES = {"Scope": "rules", "ScopeGuard": "rules", "ScopeDenied": "rules", "DEFAULT_EXCLUDES": "rules"}
__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
