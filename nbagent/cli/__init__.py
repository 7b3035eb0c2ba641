"""The `nbagent` command (`commands.py`) and the headless notebook runner behind `nbagent run` (`run.py`; the
agent's cells as it treats them, `run_cells.py`; what stops it early, `run_stops.py`)."""

from nbagent._lazy import lazy_names

# the names the docs show as `nbagent.cli.NAME`, and the module each comes from
_HOMES = {"main": "commands"}
__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
