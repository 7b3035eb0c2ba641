"""Undo, checked against the log: the files agent runs changed (`files.py`; what it plans and reports, as values,
`report.py`) and the cells they wrote (`cells.py`). See docs/undo.md."""

from nbagent._lazy import lazy_names

# the names the docs show as `nbagent.undo.NAME`, and the module each comes from
_HOMES = {"undo": "files", "preview": "files", "undo_history": "files", "UndoError": "files"}
__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
