"""One run's output area: the live view while it runs, the static record once it ends.

The view is rebuilt from the store (the events are the truth) at most every 100 ms however many events arrive,
and streamed tokens are passed through as they come. When no widget can be shown (no anywidget, no comm), the
output still gets the static record at the end, so a saved notebook always reads well without a kernel.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any

from nbagent.events.model import EventBase, RunStarted
from nbagent.ui.record import bundle
from nbagent.ui.viewstate import run_view

if TYPE_CHECKING:
    from nbagent.ipython.hoststate import HostState
    from nbagent.runtime import Agent

log = logging.getLogger("nbagent.ipython")

REBUILD_S = 0.1
LIVE_AFTER_S = 0.1  # below what a person perceives as a delay


class LiveDisplay:
    """`display_id`: an output already in the cell to take over (the "loading the model library…" line), else a
    new one."""

    def __init__(self, agent: Agent, host: HostState, run_id: str | None = None,
                 display_id: str | None = None) -> None:
        self.agent = agent
        self.host = host
        self.run_id: str | None = run_id  # known for a resumed run; a new one announces itself
        self.display_id = display_id or f"nbagent-{uuid.uuid4().hex}"
        self.final_view: dict[str, Any] | None = None  # the view the static record was made from
        self._scheduled = False
        self._finished = False
        self._tokens: list[str] = []  # streamed before the widget existed: it starts with them
        self._announced: Any = None  # the next call's estimate announced before then (its first token replaces it)
        # the agent's cells an earlier run wrote, as they were when this run's plan named them (by the model's
        # spelling): the card and the record say what the person saw then, not the cell this run made of it
        self._cells_named: dict[str, tuple[str, int | None, str]] = {}
        self.widget: Any = None
        self._shown = display_id is not None
        if display_id:  # the loading line says the run has begun
            self._show(_Placeholder())
        # The run's output (the widget, whose front-end code is ~185 KB a cell) appears once the run has gone on
        # for LIVE_AFTER_S, while it waits (for its model, a tool, a person), never before its request leaves: a
        # run that ends sooner goes straight to its record, as a progress bar is shown only for work that lasts.
        # Tokens that came meanwhile are the widget's first.
        try:
            self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(LIVE_AFTER_S, self._create)
        except RuntimeError:  # no event loop (a plain script): now
            self._timer = None
            self._create()

    def _show(self, obj: Any, raw: bool = False) -> None:
        from IPython.display import display, update_display

        if self._shown:
            update_display(obj, raw=raw, display_id=self.display_id)
        else:
            display(obj, raw=raw, display_id=self.display_id)
            self._shown = True

    def _create(self) -> None:
        if self._finished or self.widget is not None:
            return
        try:
            from nbagent.ui.widget import RunView

            widget = RunView(decider=self.host.decider if self.agent.decider is self.host.decider else None)
            widget.on_rendered = self.host.frontend_rendered
            self._show(widget)
        except Exception as exc:  # no widget support here: the record alone will do, and a line until then
            log.debug("no live view: %s", exc)
            self._show(_Placeholder())
            return
        self.widget = widget
        if self._announced is not None and not self._tokens:
            widget.announce(self._announced)
        for text in self._tokens:
            widget.token(text)
        self._tokens.clear()
        self._announced = None
        if self.run_id is not None:
            widget.push(self.view())

    def on_bus(self, kind: str, data: Any) -> None:
        if kind == "event":
            event: EventBase = data
            if event.type == "plan_proposed" and event.run_id == self.run_id:
                self._name_cells(event)
            if self.run_id is None and event.type == "run_started" and isinstance(event.payload, RunStarted) \
                    and event.payload.parent_run_id is None:
                self.run_id = event.run_id
            if event.type == "llm_called" and event.run_id == self.run_id:
                # the reply is now a step of its own: the stream shows the next turn only
                self._tokens.clear()
                self._announced = None
                if self.widget is not None:
                    self.widget.reset_tokens()
            self._schedule()
        elif kind == "token" and data[0] == self.run_id:
            if self.widget is not None:
                self.widget.token(data[1])
            else:
                self._tokens.append(data[1])
        elif kind == "token_reset" and data == self.run_id:
            self._tokens.clear()
            self._announced = None
            if self.widget is not None:
                self.widget.reset_tokens()
        elif kind == "next_call" and data[0] == self.run_id:
            if self.widget is not None:
                self.widget.announce(data[1])
            else:
                self._announced, self._tokens = data[1], []

    def _schedule(self) -> None:
        if self._scheduled or self.widget is None:
            return
        self._scheduled = True
        try:
            asyncio.get_running_loop().call_later(REBUILD_S, self._rebuild)
        except RuntimeError:
            self._rebuild()

    def _rebuild(self) -> None:
        self._scheduled = False
        if self.widget is None or self.run_id is None:
            return
        try:
            self.widget.push(self.view())
        except Exception:
            log.exception("the live view could not be updated; the run continues")

    def view(self) -> dict[str, Any]:
        assert self.run_id is not None
        store = self.agent.store
        view = run_view(store, self.run_id, known=self._known)
        if view["pending"] is None:  # a sub-agent may be the one waiting: show its question here
            for child in view["children"]:
                child_state = store.run_state(child)
                if child_state.pending is not None:
                    p = child_state.pending
                    pending: dict[str, Any] = {"kind": p.kind, "request_id": p.request_id, "plan_id": p.plan_id,
                                               "question": p.question, "run_id": child}
                    view["pending"] = pending
                    plan = child_state.plans.get(p.plan_id) if p.plan_id else None
                    if plan is not None:  # its card: the approval is phrased from the plan, as for the run's own
                        pending["plan"] = {
                            "purpose": plan.purpose, "max_risk": str(plan.max_risk),
                            "steps": [s.model_dump(mode="json") for s in plan.steps]}
                    break
        return view

    def _known(self, spelling: str, run_id: str | None) -> tuple[str, int | None, str] | None:
        """A cell the model named, as this kernel ran it (an earlier run's too), for the card to name it "[3] …": as
        it was when the plan named it, when this display saw the plan."""
        if spelling in self._cells_named:
            return self._cells_named[spelling]
        registry = getattr(self.host, "agent_cells", None)
        found = registry.find(spelling, run_id) if registry is not None else None
        return None if found is None or found.edited else (found.cell_id, found.execution_count, found.source)

    def _name_cells(self, event: EventBase) -> None:
        """Note the cells a plan's replace_cell steps name, as they are now (before any of them runs)."""
        for step in getattr(event.payload, "steps", None) or []:
            spelled = (step.arguments or {}).get("cell") if step.tool == "replace_cell" else None
            if isinstance(spelled, str) and spelled.strip() not in self._cells_named:
                held = self._known(spelled.strip(), event.run_id)
                if held is not None:
                    self._cells_named[spelled.strip()] = held

    def finish(self) -> None:
        self._finished = True
        if self._timer is not None:
            self._timer.cancel()
        if self.run_id is None:  # it failed before its run began: nothing shown may say it runs
            if self._shown and self.widget is None:
                self._show({"text/plain": "nbagent: no run was started."}, raw=True)
            return
        view = self.final_view = self.view()
        record = bundle(view)  # text/plain, text/html and the JSON: every copy of the record carries all three
        if self.widget is not None:
            try:
                self.widget.push(view)
                self.widget.end(record)
            except Exception:
                log.debug("final widget update failed", exc_info=True)
        self._show(record, raw=True)
        if self.widget is not None:
            self.widget.close()
            self.widget = None


class _Placeholder:
    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {"text/plain": "nbagent: running…", "text/html": "<p><em>nbagent: running…</em></p>"}
