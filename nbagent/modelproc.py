"""Deprecated path: `nbagent.modelproc` is `nbagent.models.process` (nbagent/_moved.py)."""

from nbagent._moved import moved

moved(__name__, "nbagent.models.process")
