"""Offline models served through litellm: scripted, function and replay (see base.py)."""

from nbagent.models.base import LocalModel, ModelScriptError
from nbagent.models.function import FunctionModel
from nbagent.models.replay import RecordedCall, ReplayDiverged, ReplayModel
from nbagent.models.scripted import Script, ScriptedModel

__all__ = ["FunctionModel", "LocalModel", "ModelScriptError", "RecordedCall", "ReplayDiverged", "ReplayModel",
           "Script", "ScriptedModel"]
