"""One redactor for everything that leaves the kernel (`redactor.py`), and a cell's outputs through it
(`outputs.py`)."""

from nbagent._lazy import lazy_names

# the names the docs show as `nbagent.secrets.NAME`, and the module each comes from
_HOMES = {"Redactor": "redactor"}
__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
