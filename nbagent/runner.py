"""Deprecated path: `nbagent.runner` is `nbagent.cli.run` (nbagent/_moved.py)."""

from nbagent._moved import moved

moved(__name__, "nbagent.cli.run")
