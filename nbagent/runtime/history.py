"""The history sent to the model: the session's chain of runs (what a new run continues, what a fork
supersedes) and the messages they leave behind, closed and, for a model that takes no images, described.
"""

from __future__ import annotations

from typing import Any

from nbagent.events.state import RunState, RunStatus
from nbagent.models.llm import (
    accepts_images,
)
from nbagent.runtime.context import AgentBase, RunContext


class History(AgentBase):
    """The conversation a run continues (a part of `Agent`)."""

    def latest_run_id(self) -> str | None:
        """The session's latest top-level run that was not forked away: what a new run continues."""
        for run in reversed(self.store.session_states(self.session.id)):
            if run.parent_run_id is None and run.status != RunStatus.SUPERSEDED:
                return run.run_id
        return None

    def successors(self, run_id: str) -> list[str]:
        """The run and every run that continues it, directly or not (what a fork supersedes)."""
        runs = self.store.session_states(self.session.id)
        chain = {run_id}
        for r in runs:  # ULID order: a successor is always newer than what it continues
            if r.previous_run_id in chain:
                chain.add(str(r.run_id))
        return [str(r.run_id) for r in runs if r.run_id in chain and r.status != RunStatus.SUPERSEDED]

    def conversation(self, run_id: str | None) -> list[dict[str, Any]]:
        """The messages a run leaves behind, after those of the runs it continues (oldest first)."""
        return [m for _, messages in self.conversation_runs(run_id) for m in messages]

    def conversation_runs(self, run_id: str | None) -> list[tuple[str, list[dict[str, Any]]]]:
        """`conversation`, run by run: (run id, its messages), oldest first."""
        chain: list[str] = []
        while run_id is not None and run_id not in chain:
            chain.append(run_id)
            run_id = self.store.run_state(run_id).previous_run_id
        return [(rid, _closed(self.store.run_state(rid).messages)) for rid in reversed(chain)]

    def _history(self, ctx: RunContext, state: RunState) -> None:
        """The run's history, run by run, and each run's name in result handles (`r1`: its conversation's first)."""
        runs = self.conversation_runs(state.previous_run_id) if state.previous_run_id else []
        if self._local is None and any(_has_images(m) for _, m in runs) and not accepts_images(self.model):
            runs = [(rid, _images_described(m)) for rid, m in runs]
        ctx.history = runs
        ctx.run_names = {rid: f"r{i + 1}" for i, (rid, _) in enumerate(runs)}
        ctx.run_names[ctx.run_id] = f"r{len(runs) + 1}"

    def _prefix(self, ctx: RunContext, state: RunState) -> list[dict[str, Any]]:
        """The system prompt and the history (`_history` sets it): what every request of the run starts with.
        An image an earlier run sent to a model that takes them ({Out[n]}) is described to one that does not
        (offline models and replays get the history as recorded, so a replay asks what was asked)."""
        self._history(ctx, state)
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return system + [m for _, messages in ctx.history for m in messages]


def _has_images(messages: list[dict[str, Any]]) -> bool:
    return any(isinstance(m.get("content"), list) and any(
        isinstance(p, dict) and p.get("type") == "image_url" for p in m["content"]) for m in messages)


def _images_described(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = [{"type": "text", "text": "(an image shown earlier in this conversation; this model does not "
                                                "take images)"}
                       if isinstance(p, dict) and p.get("type") == "image_url" else p for p in content]
            m = {**m, "content": content}
        out.append(m)
    return out


def _closed(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A finished conversation for the next run: any tool call left unanswered gets a result saying so."""
    out = list(messages)
    for i in range(len(out) - 1, -1, -1):
        m = out[i]
        if m["role"] == "assistant":
            answered = {t.get("tool_call_id") for t in out[i + 1:] if t["role"] == "tool"}
            missing = [c for c in m.get("tool_calls") or [] if c.get("id") not in answered]
            out.extend({"role": "tool", "tool_call_id": c.get("id"),
                        "content": "Not executed: the run ended before this call ran."} for c in missing)
            break
    return out
