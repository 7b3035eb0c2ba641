"""The live view of a run (`nbagent/ipython/live.py`), outside a kernel: its widget is made only once the run has
gone on for LIVE_AFTER_S, and starts with what came before it (the next call's announcement, streamed text); a
run that ends sooner never makes one."""

from __future__ import annotations

import asyncio
import types
from pathlib import Path

from nbagent.ipython.live import LIVE_AFTER_S, LiveDisplay
from nbagent.store import Store


def started(tmp_path: Path) -> tuple[LiveDisplay, str]:
    store = Store(tmp_path / "nb.ipynb")
    run = store.create_run(store.session().id, "p")
    host = types.SimpleNamespace(decider=None, frontend_rendered=lambda: None)
    agent = types.SimpleNamespace(decider=object(), store=store)
    live = LiveDisplay(agent, host)  # type: ignore[arg-type]
    live.on_bus("event", store.run_events(run.id)[0])
    return live, run.id


async def settle() -> None:
    await asyncio.sleep(LIVE_AFTER_S + 0.3)  # the view is made, and its coalesced sync has gone out


def test_a_view_made_late_starts_with_what_streamed_before_it(tmp_path: Path) -> None:
    async def main() -> tuple[str, str]:
        live, run_id = started(tmp_path)
        live.on_bus("next_call", (run_id, {"input_tokens": 12345, "cost": 0.0019}))
        live.on_bus("token", (run_id, "Hel"))
        live.on_bus("token", (run_id, "lo"))
        live.on_bus("token", ("another run", "not this"))
        assert live.widget is None
        await settle()
        first = live.widget.streaming
        live.on_bus("token", (run_id, "!"))
        await settle()
        return first, live.widget.streaming

    assert asyncio.run(main()) == ("Hello", "Hello!")


def test_a_view_made_late_shows_the_announcement_when_nothing_streamed_yet(tmp_path: Path) -> None:
    async def main() -> str:
        live, run_id = started(tmp_path)
        live.on_bus("token", (run_id, "an abandoned attempt"))
        live.on_bus("token_reset", run_id)
        live.on_bus("next_call", (run_id, {"input_tokens": 12345, "cost": 0.0019}))
        await settle()
        return str(live.widget.streaming)

    text = asyncio.run(main())
    assert "12,345 tokens" in text and "abandoned" not in text


def test_a_run_that_ends_before_its_view_is_due_never_makes_one(tmp_path: Path) -> None:
    async def main() -> object:
        live, run_id = started(tmp_path)
        live.on_bus("token", (run_id, "quick"))
        live.finish()
        await settle()
        return live.widget

    assert asyncio.run(main()) is None
