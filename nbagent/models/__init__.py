"""The model layer: one call to any model through litellm (`llm.py`: `complete`; in a kernel, through its model
process, `process.py`), what a call is and says (`reply.py`), and the offline models, scripted, function and replay,
served with or without litellm (`base.py`, `provider.py`).

Importing the package imports none of its modules (a kernel imports `nbagent.models.process` at `%load_ext`, which
must not bring pydantic or the offline models with it): the names below load on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "LocalModel": "base", "ModelScriptError": "base", "FunctionModel": "function", "RecordedCall": "replay",
    "ReplayDiverged": "replay", "ReplayModel": "replay", "Script": "scripted", "ScriptedModel": "scripted",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nbagent.models' has no attribute {name!r}")
    return getattr(import_module(f"nbagent.models.{module}"), name)
