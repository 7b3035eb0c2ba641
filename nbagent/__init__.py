"""nbagent: a Jupyter-native LLM agent whose every step is recorded in a verifiable log beside the notebook.

    from nbagent import Agent, tool, PolicyDecider

    @tool(risk="READ_ONLY")
    def row_count(path: str) -> int:
        "Count the rows of a CSV file."
        ...

    agent = Agent(model="openai/gpt-4o-mini", tools=[row_count], store="analysis.ipynb")
    result = await agent.run("How many rows does sales.csv have?")

Importing the package is cheap on purpose: names are loaded on first use, and no litellm, IPython or widget
import happens here.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from nbagent._version import __version__

if TYPE_CHECKING:
    from nbagent.events.levels import Autonomy, Risk
    from nbagent.gate.deciders import Answer, InteractiveDecider, PauseDecider, PolicyDecider, RecordedDecider, Verdict
    from nbagent.gate.policy import AuthPolicy, Budget
    from nbagent.runtime import Agent, RunResult
    from nbagent.store import Store
    from nbagent.tools.base import Tool, tool

_EXPORTS = {
    "Agent": ".runtime", "RunResult": ".runtime", "tool": ".tools.base", "Tool": ".tools.base",
    "Store": ".store", "Risk": ".events.levels", "Autonomy": ".events.levels", "Budget": ".gate.policy",
    "AuthPolicy": ".gate.policy",
    "PolicyDecider": ".gate.deciders", "InteractiveDecider": ".gate.deciders", "PauseDecider": ".gate.deciders",
    "RecordedDecider": ".gate.deciders", "Verdict": ".gate.deciders", "Answer": ".gate.deciders",
}

__all__ = [
    "Agent", "Answer", "AuthPolicy", "Autonomy", "Budget", "InteractiveDecider", "PauseDecider", "PolicyDecider",
    "RecordedDecider", "Risk", "RunResult", "Store", "Tool", "Verdict", "__version__", "tool",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nbagent' has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def load_ipython_extension(ip: Any) -> None:
    """`%load_ext nbagent`: registers `%%agent` and `%agent` (nothing heavy is imported yet)."""
    from nbagent.ipython import load_ipython_extension as load

    load(ip)


def unload_ipython_extension(ip: Any) -> None:
    from nbagent.ipython import unload_ipython_extension as unload

    unload(ip)
