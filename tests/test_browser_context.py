"""Issue 28 in a real browser: before each model call the live view says what the call will send and cost, and the
saved notebook says when the conversation was compacted.

A folder with four ~32 KB text files and a notebook: `%load_ext nbagent`, `%agent config context_window=4000`, and
four `%%agent` cells that each ask to read one file, with openai/gpt-4o-mini served by tests/stub_openai.py on
127.0.0.1 (a model played by code that reads the file it is asked about and answers; each answer takes a second, so
the live view can be seen while a call is under way). Run All; the first cell's live view shows "sending … tokens
(≈ $…)…" where the reply will stream; once all four are done, a record's timeline has a "context compacted" line,
and the notebook saved with Ctrl+S holds it in its text/plain. Screenshots: test-artifacts/browser/context-*.png.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from stub_openai import HttpError, Reply, Respond, StubOpenAI, tool_call
from test_browser import (  # noqa: F401  (browser, page are fixtures)
    ACTIVE,
    LIVE,
    RECORD,
    Lab,
    browser,
    expect,
    page,
    save,
    shot,
    start_flow,
    wait_until,
)

pytest.importorskip("playwright.sync_api")

from playwright.sync_api import Page

pytestmark = [pytest.mark.browser, pytest.mark.slow]
CELLS = 4
LINE = "x" * 60


def answer(body: dict[str, Any]) -> Reply | HttpError:
    time.sleep(1.0)  # long enough to see the call under way, well within the client's timeout
    messages = body["messages"]
    if str(messages[0].get("content")).startswith("You summarise"):
        return Reply(content="The researcher read the first files; each has 400 lines.")
    last = messages[-1]
    if last["role"] == "user":
        return Reply(tool_calls=[tool_call("read_file", {"path": str(last["content"]).split()[-1]})])
    return Reply(content="Read it: 400 lines.")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with StubOpenAI() as stub:
        stub.fallback = Respond(answer)
        saved = {k: os.environ.get(k) for k in ("OPENAI_API_BASE", "OPENAI_API_KEY")}
        os.environ.update(OPENAI_API_BASE=stub.base_url, OPENAI_API_KEY="sk-browser-context-0123456789")
        server = Lab(tmp_path_factory.mktemp("lab"))  # its kernels inherit the two variables
        try:
            yield server
        finally:
            server.close()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def write_notebook(lab: Lab) -> Path:
    folder = lab.root / "long-session"
    (folder / "data").mkdir(parents=True)
    for k in range(CELLS):
        (folder / "data" / f"f{k}.txt").write_text("\n".join(f"line {i} of file {k}: {LINE}" for i in range(400)))
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbagent"),
                nbformat.v4.new_code_cell("%agent config context_window=4000"),
                *[nbformat.v4.new_code_cell(f"%%agent --model openai/gpt-4o-mini\nread data/f{k}.txt")
                  for k in range(CELLS)]]
    path = folder / "session.ipynb"
    nbformat.write(nb, path)
    return path


def test_the_live_view_shows_the_next_call_and_the_notebook_says_when_it_compacted(page: Page, lab: Lab) -> None:  # noqa: F811
    notebook = write_notebook(lab)
    start_flow(page, lab, notebook)
    stream = page.locator(f"{LIVE} .nbv-stream-text").first
    expect(stream).to_contain_text("sending", timeout=90_000)
    said = stream.inner_text()
    assert "tokens" in said and "(≈ $" in said, said  # gpt-4o-mini has a price in litellm's table
    shot(page, "context-next-call")

    records = page.locator(f"{ACTIVE} {RECORD}")
    expect(records).to_have_count(CELLS, timeout=180_000)
    expect(page.locator(LIVE)).to_have_count(0, timeout=60_000)
    compacted = page.locator(f"{ACTIVE} {RECORD}").filter(has_text="context compacted")
    expect(compacted.first).to_be_visible()
    compacted.first.scroll_into_view_if_needed()
    shot(page, "context-compacted-record")

    save(page, notebook)  # (it may return on an earlier autosave: the wait below is for this test's content)

    def saved_with_it() -> bool:
        try:
            nb = json.loads(notebook.read_text())
        except (OSError, ValueError):
            return False
        return any("context compacted, " in "".join(o.get("data", {}).get("text/plain", ""))
                   for c in nb["cells"] for o in c.get("outputs", []))
    wait_until(saved_with_it, 60, "the saved notebook to hold the compaction in a record's text")
