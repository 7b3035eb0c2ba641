"""Deprecated path: `nbagent.state` is `nbagent.events.state` (nbagent/_moved.py)."""

from nbagent._moved import moved

moved(__name__, "nbagent.events.state")
