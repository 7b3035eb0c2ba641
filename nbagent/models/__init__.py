"""The model layer: one call to any model through litellm (`llm.py`: `complete`; in a kernel, through its model
process, `process.py`), what a call is and says (`reply.py`), and the offline models, scripted, function and replay,
served with or without litellm (`base.py`, `provider.py`).

Importing the package imports none of its modules (a kernel imports `nbagent.models.process` at `%load_ext`, which
must not bring pydantic or the offline models with it): the names below load on first use.
"""

from nbagent._lazy import lazy_names

# the names the docs show as `nbagent.models.NAME`, and the module each comes from
_HOMES = {
    "LocalModel": "base", "ModelScriptError": "base", "FunctionModel": "function", "RecordedCall": "replay",
    "ReplayDiverged": "replay", "ReplayModel": "replay", "Script": "scripted", "ScriptedModel": "scripted",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
