"""The model's memory is visible (issue 46): a compaction's summary, what the model works from after it, is in every
form of the run's record (the view, its text, HTML and Markdown, the saved notebook and its nbconvert HTML), and
the summary request is a model call in the timeline and in the counts.

The summary here is deliberately wrong ("SUMMARY-CANARY ..."): a person can only notice that if the record shows
it. The model is played by tests/stub_openai.py over HTTP through litellm (an offline model makes no summary call:
it writes an extract)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stub_openai import Reply, StubOpenAI
from test_context_budget import files, http_agent, reader

from nbagent.store import Store
from nbagent.ui.record import bundle, render_markdown
from nbagent.ui.timeline import describe
from nbagent.ui.viewstate import MIME, run_view

CANARY = "SUMMARY-CANARY: the researcher asked to delete every file and nothing was read."


@pytest.fixture
def stub() -> Iterator[StubOpenAI]:
    with StubOpenAI() as server:
        yield server


def summarised_run(stub: StubOpenAI, folder: Path) -> tuple[Store, str]:
    files(folder, 4)
    stub.fallback = reader(Reply(content=CANARY, usage={"prompt_tokens": 1_200, "completion_tokens": 30,
                                                        "total_tokens": 1_230}))
    agent = http_agent(stub, folder, model="openai/gpt-4o-mini", context_window=4_000)

    async def go() -> list[Any]:
        return [await agent.run(f"read f{k}.txt") for k in range(4)]
    runs = asyncio.run(go())
    assert all(r.ok for r in runs), [r.error for r in runs]
    store = Store(folder / "agent.nbagent", readonly=True)
    run_id = next(r.run_id for r in runs if any(e.type == "context_compacted" and e.payload.summary_by == "model"
                                                for e in store.run_events(r.run_id)))
    return store, run_id


def test_the_summary_is_in_every_form_of_the_record_and_its_request_is_a_model_call(stub: StubOpenAI,
                                                                                   tmp_path: Path) -> None:
    store, run_id = summarised_run(stub, tmp_path)
    v = run_view(store, run_id)
    b = bundle(v)
    assert CANARY in str(b["text/plain"])
    page = str(b["text/html"])
    # behind a disclosure, closed: a long session stays readable
    found = re.search(r"<details><summary>([^<]*)</summary><pre[^>]*>([^<]*)</pre></details>", page[page.index(
        "context compacted"):])
    assert found and CANARY in found.group(2), page
    assert "summary the model works from" in found.group(1)
    assert CANARY in render_markdown(v)
    (step,) = [s for s in b[MIME]["steps"] if s.get("summary")]  # type: ignore[index]
    assert step["summary"] == CANARY and step["summary_label"].startswith("the summary the model works from")

    # the summary request is a model call: in the timeline, before the compaction it made, and in the counts
    events = store.run_events(run_id)
    replies = [e for e in events if e.type == "llm_called"]
    summary_requests = [r for r in stub.completion_requests
                        if str(r.body["messages"][0]["content"]).startswith("You summarise")]
    assert summary_requests
    model_steps = [s for s in v["steps"] if s["kind"] == "model"]
    assert len(model_steps) == len(replies) + 1 == v["totals"]["model_calls"]
    (summary_call,) = [s for s in model_steps if "summary" in s["detail"]]
    assert v["steps"].index(summary_call) == v["steps"].index(step) - 1
    assert summary_call["title"] == "openai/gpt-4o-mini" and summary_call["tokens"] == 1_230
    assert summary_call["cost"] and summary_call["cost"] > 0
    assert f"{len(replies) + 1} model calls" in str(b["text/plain"])
    assert f"{len(replies) + 1} model calls" in v["words"]["totals"]
    compacted = next(e for e in events if e.type == "context_compacted" and e.payload.summary_by == "model")
    assert "summary call openai/gpt-4o-mini · 1200+30 tokens" in describe(compacted)  # nbagent show
    result_calls = len(replies) + 1
    assert store.run_state(run_id).model_calls + store.run_state(run_id).summary_calls == result_calls


def test_a_summary_that_was_not_asked_of_a_model_is_shown_and_is_no_model_call(tmp_path: Path) -> None:
    """An offline model's extract (no request made) is shown too, and counts no call."""
    from test_context_budget import Reader, session

    files(tmp_path, 4)
    _, results = session(tmp_path, Reader(), 4)
    store = Store(tmp_path / "agent.nbagent", readonly=True)
    views = [run_view(store, r.run_id) for r in results]
    shown = [(v, s) for v in views for s in v["steps"] if s.get("summary")]
    assert shown, "no summary was made"
    for v, s in shown:
        text = str(bundle(v)["text/plain"])
        assert all(line.strip() in text for line in s["summary"].splitlines())  # whole, indented
        assert "as an extract" in s["summary_label"]
        assert v["totals"]["model_calls"] == sum(1 for x in v["steps"] if x["kind"] == "model")


@pytest.mark.kernel
def test_the_saved_notebook_and_its_html_show_the_summary_a_kernel_run_worked_from(stub: StubOpenAI,
                                                                                   tmp_path: Path) -> None:
    """Through a real kernel (`nbagent run`: nbclient, the model process, litellm over HTTP): the saved .ipynb's
    record (text/plain and text/html) and nbconvert's HTML of it hold the summary, and count its request."""
    import subprocess
    import sys

    import nbformat

    files(tmp_path, 4)
    stub.fallback = reader(Reply(content=CANARY))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in [
        "%load_ext nbagent", "%agent config context_window=4000",
        *(f"%%agent --model openai/gpt-4o-mini\nread f{k}.txt" for k in range(4))]]
    path = tmp_path / "analysis.ipynb"
    nbformat.write(nb, path)
    bin_ = Path(sys.executable).parent
    env = {**__import__("os").environ, "OPENAI_API_KEY": "sk-test-compaction", "OPENAI_API_BASE": stub.base_url}
    ran = subprocess.run([str(bin_ / "nbagent"), "run", str(path)], capture_output=True, text=True, cwd=tmp_path,
                         timeout=300, check=False, env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert any(str(r.body["messages"][0]["content"]).startswith("You summarise") for r in stub.completion_requests)
    saved = nbformat.read(path, as_version=4)
    records = [o["data"] for c in saved.cells for o in c.get("outputs", []) if MIME in o.get("data", {})]
    shown = [d for d in records if CANARY in d["text/plain"]]
    assert shown, [d["text/plain"] for d in records]
    record = shown[0]
    assert CANARY in record["text/html"] and "the summary the model works from" in record["text/html"]
    replies = sum(1 for s in record[MIME]["steps"] if s["kind"] == "model" and "summary of" not in s["detail"])
    assert record[MIME]["totals"]["model_calls"] == replies + 1
    assert f"{replies + 1} model calls" in record["text/plain"]
    converted = subprocess.run([str(bin_ / "jupyter"), "nbconvert", "--to", "html", str(path), "--output",
                                "converted.html"], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                               check=False)
    assert converted.returncode == 0, converted.stderr
    page = (tmp_path / "converted.html").read_text(encoding="utf-8")
    assert re.search(r"<details><summary>the summary the model works from[^<]*</summary><pre[^>]*>"
                     + re.escape(CANARY), page)
