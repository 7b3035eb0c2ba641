"""Deprecated path: `nbagent.llm` is `nbagent.models.llm` (nbagent/_moved.py)."""

from nbagent._moved import moved

moved(__name__, "nbagent.models.llm")
