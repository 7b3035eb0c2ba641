"""The agent loop: plain asyncio, no IPython, everything it does recorded as events.

The loop is driven by the run's *derived* state (`store.run_state`, a fold of its events), never by local
variables that a crash would lose, so resuming a run in a new process is the same loop started on the same
events. The package follows the loop's seams, one module each:

- agent.py: `Agent`, its configuration and entry points (`run`, `resume`, `answer_pending`, `result`);
- model_choice.py: choosing the model (`ModelOptions`, litellm or an offline model);
- loop.py: the loop and the model turn;
- calls.py: a turn's tool calls: checked, planned, each one passed through the approval gate;
- invoke.py: running a call the gate let through (tool retries, control tools, sub-agents);
- decisions.py: decisions and the grants in force;
- tree.py: the run tree (sub-agents, budgets per tree);
- history.py: the conversation sent to the model;
- context.py: what the parts share (the per-run context, `_record`, `RunResult`).

Everything other code imports from `nbagent.runtime` is re-exported here.
"""

from __future__ import annotations

from nbagent.models.llm import complete
from nbagent.runtime.agent import DEFAULT_SYSTEM_PROMPT, Agent
from nbagent.runtime.calls import FILE_FACTS
from nbagent.runtime.context import CONTROL_RISK, MAX_RESULT_CHARS, RunContext, RunResult, RunStateError
from nbagent.runtime.invoke import error_text, jsonable, result_preview
from nbagent.runtime.model_choice import ChosenModel, ModelOptions, choose_model

__all__ = ["DEFAULT_SYSTEM_PROMPT", "FILE_FACTS", "Agent", "ChosenModel", "ModelOptions", "RunResult",
           "RunStateError", "choose_model"]

# (also importable, for tests and benchmarks: the helpers below, and `complete`, the model call the loop makes)
_REEXPORTED = (complete, CONTROL_RISK, MAX_RESULT_CHARS, RunContext, error_text, jsonable, result_preview)
