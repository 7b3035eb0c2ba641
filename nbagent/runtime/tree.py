"""The run tree: a run, its sub-agents and theirs. Budgets are spent per tree (a sub-agent spends its root's),
and a run whose sub-agent waits for a decision waits with it.
"""

from __future__ import annotations

from nbagent.events.state import RunState, RunStatus
from nbagent.gate.policy import TreeUsage
from nbagent.runtime.context import AgentBase


class RunTree(AgentBase):
    """The run tree (a part of `Agent`)."""

    def _waiting_descendant(self, state: RunState) -> RunState | None:
        for child in state.children:
            c = self.store.run_state(child)
            if c.status == RunStatus.WAITING and c.pending is not None:
                return c
            deeper = self._waiting_descendant(c) if c.status == RunStatus.RUNNING else None
            if deeper is not None:
                return deeper
        return None


    def _root_of(self, run_id: str) -> str:
        state = self.store.run_state(run_id)
        while state.parent_run_id is not None:
            state = self.store.run_state(state.parent_run_id)
        return state.run_id or run_id

    def tree_usage(self, run_id: str) -> TreeUsage:
        """What the run tree containing `run_id` has spent, in total and run by run (budgets use the total)."""
        return self._tree_totals(self._root_of(run_id))

    def _tree_totals(self, root: str) -> TreeUsage:
        states, todo = [], [root]
        while todo:
            s = self.store.run_state(todo.pop())
            states.append(s)
            todo.extend(s.children)
        return TreeUsage.of(states)

    def _tree_sums(self, root: str, state: RunState) -> tuple[int, float, int, int]:
        """What `_tree_totals(root)` sums for the budgets (tokens, cost, model calls, tool steps), in the same
        order, without building the per-run table; `state` is a run's state just read (used if it is the root's)."""
        tokens, cost, model_calls, tool_steps = 0, 0.0, 0, 0
        todo = [root]
        while todo:
            run_id = todo.pop()
            s = state if run_id == state.run_id else self.store.run_state(run_id)
            model_calls += s.all_model_calls
            tokens += s.tokens
            cost += s.cost
            tool_steps += s.tool_calls_started
            todo.extend(s.children)
        return tokens, cost, model_calls, tool_steps

    def _tree_attempts(self, root: str) -> int:
        total, todo = 0, [root]
        while todo:
            s = self.store.run_state(todo.pop())
            total += s.model_attempts
            todo.extend(s.children)
        return total
