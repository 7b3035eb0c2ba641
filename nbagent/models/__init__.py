"""Offline models served through litellm: scripted, function and replay (see base.py)."""

from .base import LocalModel, ModelScriptError
from .function import FunctionModel
from .replay import RecordedCall, ReplayDiverged, ReplayModel
from .scripted import Script, ScriptedModel

__all__ = ["FunctionModel", "LocalModel", "ModelScriptError", "RecordedCall", "ReplayDiverged", "ReplayModel",
           "Script", "ScriptedModel"]
