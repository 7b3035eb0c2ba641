"""Tools the agent can call: the base (`Tool`, `@tool`) and the control tools every agent has."""

from nbagent.tools.base import Tool, ToolArgumentError, ToolError, tool

__all__ = ["Tool", "ToolArgumentError", "ToolError", "tool"]
