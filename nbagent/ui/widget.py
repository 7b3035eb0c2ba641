"""The live run view: an anywidget that shows a run as it happens and turns clicks into decisions.

The host (the `%%agent` magic) displays a `RunView`, feeds it the run's view state (`push(view)`, or `attach` to
the event bus) and streamed tokens (`token(text)`), and calls `end(bundle)` at the end before replacing the widget
with the static record (`nbagent.ui.record`): `ended` carries that record's MIME bundle to the page, which puts it
in the view's place itself when the kernel's replacement cannot reach it (after a page reload). Updates are
coalesced: at most one sync per `interval` seconds, the latest view winning, so a burst of events costs a handful
of comm messages, not one each.

A click in the front end is an event, not state: the view sends a custom comm message
`{"event": "decision", "request_id", "action", "text", "nonce"}` (`model.send` in run_view.js, `on_msg` here). It
must not be a state sync: ipywidgets' front-end model counts a sync as pending until the kernel publishes
`status: idle` parented to that comm message, and ipykernel 7.4 dispatches comm messages that arrive while a cell
awaits with `concurrent=True`, which publishes no busy/idle, so every later sync of the widget stays buffered in
the page and the second click of a run never leaves the browser. Custom messages are not counted that way, and
the front end sends no state at all.

The handler checks a click against the pending request of the latest view and hands it to the
`InteractiveDecider` (`resolve` is thread-safe and ignores stale or repeated requests); the `decided` trait then
carries the request id so every open view disables its buttons at once. The handler never raises: a bad, stale,
duplicate or wrong-kind click is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from nbagent.events.bus import EventBus
from nbagent.gate.deciders import Answer, InteractiveDecider, Verdict
from nbagent.gate.grants import GrantSpec
from nbagent.ui.record_words import next_call_line

# The front end's code, as text. Given as paths, anywidget watches the files for edits (hot reload): every widget
# it makes connects to the file's `changed` signal and is never let go, so every run view of a kernel's life stayed
# in memory with the last view it showed (~1.5 KB a step). Text is not watched. run_view.js is the bundle of
# labextension/src/run_view/ (`npm run build:view`, committed).
ESM = Path(__file__).with_name("run_view.js").read_text(encoding="utf-8")
CSS = Path(__file__).with_name("run_view.css").read_text(encoding="utf-8")

log = logging.getLogger("nbagent.ui")

APPROVAL_ACTIONS = ("approve", "deny", "refine")


class Clickable(anywidget.AnyWidget):
    """A view the front end talks to with custom messages: {"event": "rendered"} once drawn (so someone can see it,
    and click in it), then the view's own events, handled by `_on_event`. Never raises into the comm handler."""

    def _listen(self) -> None:
        self.rendered = threading.Event()
        self.on_rendered: Callable[[], None] | None = None
        self.on_msg(self._on_custom)

    def _on_custom(self, widget: Any, content: Any, buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        event = content.get("event")
        if event == "rendered":
            self.rendered.set()
            if self.on_rendered is not None:
                try:
                    self.on_rendered()
                except Exception:
                    log.debug("on_rendered failed", exc_info=True)
        elif isinstance(event, str):
            self._on_event(event, content)

    def _on_event(self, event: str, content: dict[str, Any]) -> None:
        """A view's own events; one it does not know (from a newer front end, say) is ignored."""


class RunView(Clickable):
    """The live view of one run.

        view = RunView(decider=agent.decider)      # an InteractiveDecider: clicks resolve its requests
        display(view)
        unsubscribe = view.attach(agent.bus, build_view)   # build_view(run_id) -> view-state dict
        ...
        view.flush()
    """

    _esm = ESM
    _css = CSS

    view = traitlets.Dict().tag(sync=True)
    streaming = traitlets.Unicode("").tag(sync=True)
    decided = traitlets.Unicode("").tag(sync=True)
    # empty while the kernel drives this view; then the run's static record (text/plain, text/html and the view's
    # JSON). Only this says the view is over: a status does not ("interrupted" is also where a resume starts)
    ended = traitlets.Dict().tag(sync=True)

    def __init__(self, decider: InteractiveDecider | None = None, *, interval: float = 0.1, **kwargs: Any) -> None:
        self.decider = decider
        self.interval = interval
        self.accepted: list[dict[str, Any]] = []  # decisions handed to the decider (for the host and tests)
        self._lock = threading.RLock()
        self._next_view: dict[str, Any] | None = None
        self._builder: Callable[[], dict[str, Any]] | None = None
        self._tokens: list[str] = []
        self._tokens_dirty = False
        self._announced = False  # the streamed text is the next call's estimate, replaced by its first token
        self._last_sync = 0.0
        self._timer: asyncio.TimerHandle | threading.Timer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._seen_runs: set[str] = set()  # sub-agent runs of the attached run
        self.run_id: str | None = None  # the run `attach` follows, once known
        self.syncs = 0  # how many coalesced syncs went out
        super().__init__(**kwargs)
        self._listen()

    def _on_event(self, event: str, content: dict[str, Any]) -> None:
        """"decision": a click on Approve, Deny, Refine or an answer."""
        if event == "decision":
            try:
                self._decide(content)
            except Exception:
                log.exception("the run view could not handle a decision")

    # ------------------------------------------------------------------ feeding the view

    def push(self, view: dict[str, Any]) -> None:
        """A new view state (the latest wins). Synced now if the last sync is older than `interval`, else soon."""
        with self._lock:
            self._next_view = view
            self._builder = None
        self._schedule()

    def token(self, text: str) -> None:
        """A piece of the model reply being streamed."""
        with self._lock:
            if self._announced:
                self._tokens.clear()
                self._announced = False
            self._tokens.append(text)
            self._tokens_dirty = True
        self._schedule()

    def announce(self, estimate: dict[str, Any]) -> None:
        """Where the streamed reply will appear, the call about to be made: its input tokens and their cost."""
        with self._lock:
            self._tokens[:] = [next_call_line(estimate)]
            self._announced = True
            self._tokens_dirty = True
        self._schedule()

    def reset_tokens(self) -> None:
        """Drop the streamed text (the reply is complete and shown as a step, or it was abandoned and retried)."""
        with self._lock:
            self._tokens.clear()
            self._tokens_dirty = True
        self._schedule()

    def flush(self) -> None:
        """Sync whatever is pending now (the host calls this when the run ends)."""
        with self._lock:
            self._cancel_timer()
        self._sync()

    def end(self, record: dict[str, Any]) -> None:
        """The run is over for this view: sync what is pending, then hand the page the record that replaces it."""
        self.flush()
        self.ended = dict(record)

    def attach(self, bus: EventBus, build_view: Callable[[str], dict[str, Any]],
               run_id: str | Callable[[], str | None] | None = None) -> Callable[[], None]:
        """Follow a run on the bus; returns the unsubscribe function.

        Each event of the run (or of its sub-agents) marks the view stale; it is rebuilt with
        `build_view(run_id)` at most once per interval (lazily: a burst of events costs one build). Streamed
        tokens go to `streaming`, which is cleared when the model call is recorded or abandoned. `run_id` is the
        run's id, a callable returning it (None while unknown), or None: then the first top-level `run_started`
        on the bus is taken as the run (the host may read it back from `self.run_id`).
        """

        def current() -> str | None:
            rid = run_id() if callable(run_id) else run_id
            return rid or self.run_id

        def mine(rid: str | None) -> bool:
            return rid is not None and (rid == current() or rid in self._seen_runs)

        def rebuild() -> dict[str, Any]:
            rid = current()
            return build_view(rid) if rid else {}

        def listener(kind: str, data: Any) -> None:
            try:
                if kind == "event":
                    if (current() is None and data.type == "run_started"
                            and not getattr(data.payload, "parent_run_id", None)):
                        self.run_id = data.run_id
                    if not mine(data.run_id):
                        return
                    with self._lock:
                        if data.type == "child_run_started":
                            self._seen_runs.add(data.payload.child_run_id)
                        if data.type == "llm_called" and data.run_id == current():
                            self._tokens.clear()
                            self._tokens_dirty = True
                        self._builder = rebuild
                        self._next_view = None
                    self._schedule()
                elif kind == "token":
                    rid, text = data
                    if rid == current():
                        self.token(text)
                elif kind == "token_reset" and data == current():
                    self.reset_tokens()
                elif kind == "next_call" and data[0] == current():
                    self.announce(data[1])
            except Exception:  # a view must never break the run
                log.exception("the run view failed to follow an event")

        return bus.subscribe(listener)

    # ------------------------------------------------------------------ coalescing

    def _schedule(self) -> None:
        with self._lock:
            if self._timer is not None:
                return  # a sync is already due: it will carry the latest state
            wait = self._last_sync + self.interval - time.monotonic()
            if wait > 0:
                self._start_timer(wait)
                return
        self._sync()

    def _start_timer(self, wait: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            self._loop = loop
            self._timer = loop.call_later(wait, self._due)
        else:
            timer = threading.Timer(wait, self._due)
            timer.daemon = True
            self._timer = timer
            timer.start()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _due(self) -> None:
        with self._lock:
            self._timer = None
        try:
            self._sync()
        except Exception:
            log.exception("the run view failed to sync")

    def _sync(self) -> None:
        with self._lock:
            view, builder = self._next_view, self._builder
            self._next_view = self._builder = None
            streaming = "".join(self._tokens) if self._tokens_dirty else None
            self._tokens_dirty = False
            self._last_sync = time.monotonic()
            if view is None and builder is not None:
                view = builder()
            if view is None and streaming is None:
                return
            self.syncs += 1
            with self.hold_sync():
                if view is not None:
                    if view is self.view:
                        self.send_state("view")  # the same dict, changed in place: traitlets would see no change
                    else:
                        self.view = view
                if streaming is not None:
                    self.streaming = streaming

    def close(self) -> None:
        with self._lock:
            self._cancel_timer()
        layout = getattr(self, "layout", None)  # ipywidgets gives every DOMWidget a Layout widget of its own
        super().close()
        if layout is not None:
            layout.close()

    # ------------------------------------------------------------------ decisions from the front end

    def latest_view(self) -> dict[str, Any]:
        """The newest view state, synced or not."""
        with self._lock:
            if self._next_view is not None:
                return self._next_view
            return self.view

    def _decide(self, decision: dict[str, Any]) -> bool:
        """Hand a click to the decider if it answers the pending request with an action of the right kind."""
        request_id = str(decision.get("request_id") or "")
        action = decision.get("action")
        text = str(decision.get("text") or "")
        pending = self.latest_view().get("pending") or {}
        if not request_id or pending.get("request_id") != request_id:
            log.debug("ignored a decision for request %r: not the pending request", request_id)
            return False
        if request_id == self.decided:
            log.debug("ignored a repeated decision for request %r", request_id)
            return False
        value: Verdict | Answer
        if pending.get("kind") == "approval" and action in APPROVAL_ACTIONS:
            scope = decision.get("scope")
            grant = GrantSpec(scope=scope) if scope in ("run", "session") and action != "refine" else None
            if action == "approve":
                value = Verdict.approve(by="user", grant=grant)
            elif action == "deny":
                value = Verdict.deny(text.strip(), by="user", grant=grant)
            elif not text.strip():
                log.debug("ignored a refine without feedback for request %r", request_id)
                return False
            else:
                value = Verdict.refine(text.strip(), by="user")
        elif pending.get("kind") == "human_input" and action == "answer":
            value = Answer(text=text, by="user")
        else:
            log.debug("ignored a %r decision for a %r request", action, pending.get("kind"))
            return False
        # early=True: the view already shows this request (it is in the log), the decider may not be waiting
        # on it yet (the run is between recording it and asking); the decision is kept for that moment
        if self.decider is None or not self.decider.resolve(request_id, value, early=True):
            log.debug("ignored a decision for request %r: nothing waits for it", request_id)
            return False
        self.accepted.append({"request_id": request_id, "action": action, "text": text,
                              "scope": decision.get("scope")})
        self.decided = request_id
        return True
