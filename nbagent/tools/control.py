"""Control tools every agent has. The runtime carries them out itself (they steer the run, not the world);
these functions give them their schemas and descriptions, and return their arguments when called directly."""

from __future__ import annotations

from nbagent.events.levels import Risk
from nbagent.tools.base import Tool


def respond_to_user(message: str) -> str:
    """Give the user your final answer and finish the run.

    Args:
        message: the answer, in Markdown
    """
    return message


def done(summary: str = "") -> str:
    """Finish the run when the task is complete.

    Args:
        summary: a short summary of what was done
    """
    return summary


def ask_human(question: str) -> str:
    """Ask the user a question and wait for the answer. Use it when the request is ambiguous.

    Args:
        question: the question, answerable in a line
    """
    return question


def spawn_agent(prompt: str, tools: list[str] | None = None) -> str:
    """Delegate a self-contained sub-task to a new agent; returns its final answer.

    Args:
        prompt: the sub-task, with everything the sub-agent needs to know
        tools: names of the tools it may use (default: all of yours except spawn_agent)
    """
    return prompt


CONTROL_TOOLS: dict[str, Tool] = {
    t.name: t for t in (Tool(f, risk=Risk.READ_ONLY) for f in (respond_to_user, done, ask_human, spawn_agent))
}
