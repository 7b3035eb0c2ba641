"""Tools the agent can call: the base (`Tool`, `@tool`) and the control tools every agent has; the built-in file and
kernel tools; the source of the cells tools write (`cell_text.py`, which the kernel's glue imports at `%load_ext`: so
this package imports none of its modules until a name is used)."""

from typing import TYPE_CHECKING

from nbagent._lazy import lazy_names

if TYPE_CHECKING:
    from nbagent.tools.base import Tool, ToolArgumentError, ToolError, tool

_HOMES = {"Tool": "base", "ToolArgumentError": "base", "ToolError": "base", "tool": "base"}
__all__ = ["Tool", "ToolArgumentError", "ToolError", "tool"]
__getattr__ = lazy_names(__name__, _HOMES)
