"""Grants in a real browser: "Approve for this run" once, and the next matching call runs with its grant shown.

The scripted model overwrites notes.md twice, then writes other.md, then asks a question (so the run pauses live).
The first card offers "Approve for this run" with what it covers; one click approves it and gives the grant. The
second overwrite of notes.md runs without a card, its step saying "allowed by grant …"; other.md is not covered
and gets a card of its own. Clicked by visible text in JupyterLab + Chromium (tests/test_browser.py's server,
browser and helpers); screenshots go to test-artifacts/browser/ (grant-*.png).
"""

from __future__ import annotations

from typing import Any

import pytest
from test_browser import (  # noqa: F401  (browser, lab, page are fixtures)
    LIVE,
    WAITING,
    Lab,
    ask,
    browser,
    button,
    expect,
    finished_record,
    lab,
    page,
    saved_record,
    shot,
    start_flow,
    waiting_card,
    write_flow,
)

from nbagent.store import Store

pytest.importorskip("playwright.sync_api")

from playwright.sync_api import Page

pytestmark = pytest.mark.browser


def overwrite(path: str, content: str) -> dict[str, Any]:
    return {"content": f"Updating {path}.",
            "tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]}


def test_approve_for_this_run_then_the_next_matching_call_runs_under_the_grant(page: Page, lab: Lab) -> None:  # noqa: F811
    notebook = write_flow(lab, "grant", [overwrite("notes.md", "v1\n"), overwrite("notes.md", "v2\n"),
                                         overwrite("other.md", "o\n"), ask("Anything else?"), {"content": "Done."}],
                          files={"notes.md": "mine\n", "other.md": "theirs\n"}, prompt="Update the notes twice")
    folder = notebook.parent
    start_flow(page, lab, notebook)
    card = waiting_card(page, 1, "Overwrite notes.md")
    expect(card.locator(".nbv-grant-covers")).to_contain_text("write_file path=notes.md up to WRITE_HIGH_RISK")
    shot(page, "grant-1-card-offers")
    button(page, "Approve for this run").click()

    # notes.md again: no card; the step says which grant let it run. other.md: not covered, so it asks.
    card = waiting_card(page, 2, "Overwrite other.md")  # no plan for the granted call
    assert (folder / "notes.md").read_text() == "v2\n" and (folder / "other.md").read_text() == "theirs\n"
    live = page.locator(LIVE)
    granted = live.locator(".nbv-grant-why")
    expect(granted).to_have_count(1)
    expect(granted).to_contain_text("allowed by grant")
    expect(granted).to_contain_text("by user (for this run: write_file path=notes.md")
    expect(live.locator(".nbv-grant-given")).to_contain_text("and for the rest of this run: write_file path=notes.md")
    expect(page.locator(WAITING)).to_have_count(1)
    granted.scroll_into_view_if_needed()
    shot(page, "grant-2-step-under-grant")
    button(page, "Overwrite other.md").click()

    answer_box = live.get_by_placeholder("Your answer (Enter sends)")
    expect(answer_box).to_be_visible(timeout=60_000)
    answer_box.fill("no")
    button(page, "Answer").click()

    record = finished_record(page)
    expect(record.locator(".nbr-grant-why")).to_contain_text("allowed by grant")
    saved = saved_record(page, notebook)
    store = Store(notebook.with_suffix(".nbagent"), readonly=True)
    (given,) = store.query_events(types="grant_given")
    starts = [e.payload for e in store.run_events(saved["run_id"])
              if e.type == "tool_call_started" and e.payload.tool == "write_file"]
    assert [s.grant_id for s in starts] == [None, given.payload.grant_id, None]
    assert given.payload.scope == "run" and given.payload.by == "user" and given.payload.paths == ["notes.md"]
    assert [d["kind"] for d in saved["decisions"]] == ["approved", "approved", "answered"]
    assert saved["decisions"][0]["grants"][0]["grant_id"] == given.payload.grant_id
