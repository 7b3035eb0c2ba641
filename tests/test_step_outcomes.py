"""Each step says what it did (issue 46): a cell whose code raised is "✗ raised KeyError: 'Revenue'", one interrupted
"■ interrupted after 4.6 s", never "✓ ok", and the run ends completed_with_errors as after a failed tool; the notebook
tools' results read as sentences ("wrote log.md, 16 bytes, +1 line"), their JSON behind a disclosure.

The runtime with the scripted model and a tool that returns what a cell's result holds (a property over generated
results, hostile text included), the file tools on a real folder, and the renderings of the saved record."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from bs4 import BeautifulSoup
from examples import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbagent.events.state import RunStatus
from nbagent.gate.deciders import PolicyDecider
from nbagent.runtime import Agent
from nbagent.store import Store
from nbagent.store.blobs import BlobStore
from nbagent.tools.base import Tool
from nbagent.tools.files import FileTools
from nbagent.ui.record import render_html, render_markdown, render_text
from nbagent.ui.timeline import describe
from nbagent.ui.viewstate import run_view
from tests.agents import call, turns


def cell_tool(results: list[dict[str, Any]]) -> Tool:
    """A stand-in for run_cell that returns the results a cell's run recorded, in turn (the kernel's run_cell is
    driven in test_step_outcomes_kernel.py)."""
    queue = list(results)

    def run_cell(code: str, explanation: str = "") -> dict[str, Any]:
        """Run code as a cell."""
        return queue.pop(0)

    return Tool(run_cell, risk="READ_ONLY")


def run_cells(folder: Path, results: list[dict[str, Any]]) -> tuple[Store, str]:
    store = Store(folder / "nb.ipynb")
    script = turns([call("run_cell", code=f"x = {i}") for i in range(len(results))], "done")
    agent = Agent(script=script, tools=[cell_tool(results)], store=store, autonomy="L3",
                  decider=PolicyDecider("all"), retry_base=0.001, retry_cap=0.01)
    return store, asyncio.run(agent.run("compute")).run_id


def text_of(html: str) -> str:
    return " ".join(BeautifulSoup(html, "html.parser").get_text().split())


def tool_rows(text: str) -> list[str]:
    return [line for line in text.split("\n") if re.match(r"\s+\d+\. ", line) and "run_cell(" in line]


RAISED = {"ran": True, "execution_count": 4, "stdout": "", "stderr": "", "error": "KeyError: 'Revenue'",
          "traceback": "KeyError                                  Traceback (most recent call last)\n"
                       "----> 3 sales.groupby('Region')['Revenue']\nKeyError: 'Revenue'"}
STOPPED = {"ran": True, "execution_count": 5, "stdout": "started\n", "stderr": "", "interrupted": True,
           "error": "KeyboardInterrupt: the cell was stopped: the kernel was interrupted; the state it set before "
                    "that remains"}
CLEAN = {"ran": True, "execution_count": 6, "stdout": "a\nb\nc\n", "stderr": "",
         "outputs": [{"output_type": "display_data", "mimes": ["image/png", "text/plain"],
                      "text": "<Figure size 640x480 with 1 Axes>", "images": ["a PNG image, 640 by 480"]}]}


def test_a_cell_that_raised_or_was_interrupted_is_not_ok_and_the_run_ends_with_errors(tmp_path: Path) -> None:
    store, run_id = run_cells(tmp_path, [RAISED, STOPPED, CLEAN])
    state = store.run_state(run_id)
    assert state.status == RunStatus.COMPLETED_WITH_ERRORS
    assert state.errors[0] == "run_cell: raised KeyError: 'Revenue'"
    assert state.errors[1].startswith("run_cell: interrupted after ")
    view = run_view(store, run_id)
    raised, stopped, clean = [s for s in view["steps"] if s["kind"] == "tool"]
    assert (raised["status"], raised["outcome"]) == ("failed", "raised KeyError: 'Revenue'")
    assert stopped["status"] == "interrupted" and stopped["outcome"].startswith("interrupted after ")
    assert (clean["status"], clean["outcome"]) == ("ok", "ran [6]: printed 3 lines, showed a figure")
    assert "Traceback" in raised["traceback"]

    text = render_text(view)
    rows = tool_rows(text)
    assert "✗ raised KeyError: 'Revenue' · run_cell(" in rows[0] and " ok" not in rows[0]
    assert re.search(r"■ interrupted after \d+(\.\d+)? m?s · run_cell\(", rows[1]), rows[1]
    assert "the kernel was interrupted" in rows[1]  # what stopped it, which the sentence does not say
    assert "✓ ran [6]: printed 3 lines, showed a figure" in rows[2]
    assert "⚠ completed_with_errors" in text.split("\n")[0]
    assert "1 tool call failed and 1 cell was interrupted" in text

    html = render_html(view)
    items = [text_of(str(li)) for li in BeautifulSoup(html, "html.parser").select("li.nbr-k-tool")]
    assert items[0].startswith("✗ raised KeyError: 'Revenue' · run_cell("), items[0]
    assert items[1].startswith("■ interrupted after "), items[1]
    assert items[2].startswith("✓ ran [6]: printed 3 lines, showed a figure"), items[2]
    soup = BeautifulSoup(html, "html.parser")
    first = soup.select("li.nbr-k-tool")[0]
    assert "nbr-st-failed" in first["class"] and first.select_one("details pre.nbr-traceback")
    assert all(li.select_one("details pre.nbr-result") for li in soup.select("li.nbr-k-tool"))  # JSON disclosed
    assert text_of(html).count("completed with errors") >= 1

    md = render_markdown(view)
    assert "✗ raised KeyError: 'Revenue' · **run\\_cell**" in md and "■ interrupted after " in md

    completed = [e for e in store.run_events(run_id) if e.type == "tool_call_completed"]
    assert "✗ raised KeyError: 'Revenue'" in describe(completed[0])  # nbagent show, %agent show
    assert "■ interrupted after " in describe(completed[1])


def test_file_tools_results_read_as_sentences_with_their_digests_behind_a_disclosure(tmp_path: Path) -> None:
    (tmp_path / "log.md").write_text("first\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.csv").write_text("x\n1\n2\n")
    store = Store(tmp_path / "nb.ipynb")
    tools = FileTools(tmp_path, BlobStore.of_store(store.path)).tools()
    script = turns([call("write_file", path="log.md", content="first\nsecond\n"),
                    call("create_file", path="notes.md", content="a\nb\n"),
                    call("read_file", path="data/a.csv"), call("list_files", path="data"),
                    call("search_content", pattern="1", path="data"), call("delete_file", path="notes.md")], "done")
    run_id = asyncio.run(Agent(script=script, tools=tools, store=store, autonomy="L3", decider=PolicyDecider("all"),
                               retry_base=0.001, retry_cap=0.01).run("files")).run_id
    view = run_view(store, run_id)
    said = [s.get("outcome") for s in view["steps"] if s["kind"] == "tool"]
    assert said == ["wrote log.md, 13 bytes, +1 line", "created notes.md, 4 bytes, +2 lines",
                    "read data/a.csv, lines 1-3 of 3", "listed data: 1 file",
                    "found 1 match in 1 file, 1 file searched", "deleted notes.md, 4 bytes"], said
    html = render_html(view)
    soup = BeautifulSoup(html, "html.parser")
    write = soup.select("li.nbr-k-tool")[0]
    assert text_of(str(write.select_one(".nbr-line"))).startswith("✓ wrote log.md, 13 bytes, +1 line")
    assert "sha256" not in text_of(str(write.select_one(".nbr-line")))  # the digests: only behind "result"
    assert "sha256" in write.select_one("details pre.nbr-result").get_text()
    assert view["status"] == "completed"


# ------------------------------------------------------------------------------------------------ the property

hostile = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)
errors = st.one_of(st.none(), st.just(""), hostile, st.builds(lambda n, m: f"{n}: {m}",
                   st.sampled_from(["KeyError", "ValueError", "a.b.Err", "<script>", "✗"]), hostile))
results = st.fixed_dictionaries({"ran": st.just(True), "stdout": hostile}, optional={
    "error": errors, "interrupted": st.one_of(st.booleans(), st.none(), st.just("yes")),
    "execution_count": st.one_of(st.integers(0, 10**6), hostile), "traceback": hostile,
    "outputs": st.lists(st.fixed_dictionaries({"output_type": st.sampled_from(["execute_result", "display_data"])},
                                              optional={"text": hostile}), max_size=2)})


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(results, min_size=1, max_size=3))
def test_a_step_is_ok_only_if_its_recorded_result_had_no_error(tmp_path_factory: Any,
                                                                generated: list[dict[str, Any]]) -> None:
    store, run_id = run_cells(tmp_path_factory.mktemp("p"), generated)
    recorded = [e.payload.result for e in store.run_events(run_id) if e.type == "tool_call_completed"]
    view = run_view(store, run_id)
    steps = [s for s in view["steps"] if s["kind"] == "tool"]
    rows = tool_rows(render_text(view))
    items = BeautifulSoup(render_html(view), "html.parser").select("li.nbr-k-tool")
    faulty = [bool(r.get("error")) or r.get("interrupted") is True for r in recorded]
    for bad, r, step, row, li in zip(faulty, recorded, steps, rows, items, strict=True):
        assert (step["status"] == "ok") is not bad, (r, step)
        assert row.split(". ", 1)[1].startswith("✓") is not bad, row
        assert text_of(str(li)).startswith("✓") is not bad
        if r.get("interrupted") is True:
            assert step["status"] == "interrupted" and step["outcome"].startswith("interrupted")
        elif bad:
            assert step["status"] == "failed" and step["outcome"].startswith("raised ")
    status = store.run_state(run_id).status
    assert status == (RunStatus.COMPLETED_WITH_ERRORS if any(faulty) else RunStatus.COMPLETED)


# ------------------------------------------------------------------ the view the lab extension's tests draw

FIXTURE = Path(__file__).parent.parent / "labextension" / "test" / "steps" / "outcomes.json"


def fixture_view(folder: Path) -> dict[str, Any]:
    """The view labextension/test/steps.test.ts draws: a cell that raised, one interrupted after 4.6 s, one that
    printed and showed a figure (durations fixed, so the words are the same on every machine). Rewrite the file with
    `NBAGENT_WRITE_FIXTURES=1 pytest tests/test_step_outcomes.py -k fixture`."""
    from nbagent.ui.step_words import said_step
    from nbagent.ui.viewstate import with_words

    store, run_id = run_cells(folder, [RAISED, STOPPED, CLEAN])
    view = run_view(store, run_id)
    recorded = [e.payload.result for e in store.run_events(run_id) if e.type == "tool_call_completed"]
    for step, result in zip([s for s in view["steps"] if s["kind"] == "tool"], recorded, strict=True):
        step["duration_ms"] = {"failed": 1234.0, "interrupted": 4600.0}.get(step["status"], 310.0)
        said_step(step, result, {})
    view["errors"] = ["run_cell: raised KeyError: 'Revenue'", "run_cell: interrupted after 4.6 s"]
    return with_words(view)


def test_the_fixture_the_lab_extension_draws_is_todays_view_and_python_says_the_same(tmp_path: Path) -> None:
    import json
    import os

    made = fixture_view(tmp_path)
    if os.environ.get("NBAGENT_WRITE_FIXTURES"):
        FIXTURE.write_text(json.dumps(made, indent=1, ensure_ascii=False) + "\n")
    committed = json.loads(FIXTURE.read_text())
    fields = ("kind", "tool", "status", "outcome", "detail", "traceback", "duration_ms")
    assert [{k: s.get(k) for k in fields} for s in committed["steps"]] == \
        [{k: s.get(k) for k in fields} for s in made["steps"]]
    # the strings steps.test.ts checks in the live view and the lab extension's record, here in the text/html
    items = [text_of(str(li.select_one(".nbr-line")))
             for li in BeautifulSoup(render_html(committed), "html.parser").select("li.nbr-k-tool")]
    assert items[0].startswith("✗ raised KeyError: 'Revenue' · run_cell(")
    assert items[1].startswith("■ interrupted after 4.6 s · run_cell(")
    assert items[2].startswith("✓ ran [6]: printed 3 lines, showed a figure · run_cell(")


def test_an_older_log_that_called_a_raised_cell_completed_still_renders_and_says_so(tmp_path: Path) -> None:
    """A log written before this (its run ended `completed` though its cell raised) renders: the step is ✗, the
    error is listed, and the run's own recorded end stays what the log says."""
    from nbagent.events import model as E
    from nbagent.events.levels import Risk

    store = Store(tmp_path / "nb.ipynb")
    session = store.session("default")
    run_id = store.create_run(session.id, "revenue", model="nbagent/scripted").id
    started = store.append(E.ToolCallStarted(call_id="nb1_0", tool="run_cell", arguments={"code": "x['Revenue']"},
                                             risk=Risk.WRITE_HIGH_RISK), run_id=run_id)
    store.append(E.ToolCallCompleted(call_id="nb1_0", tool="run_cell", duration_ms=1200.0, result=RAISED,
                                     preview="{\"ran\": true, \"error\": \"KeyError: 'Revenue'\"…"),
                 run_id=run_id, parent_event_id=started.id)
    store.append(E.AnswerReady(content="Revenue is 120."), run_id=run_id)
    store.append(E.Completed(), run_id=run_id)
    view = run_view(store, run_id)
    assert view["status"] == "completed"  # as recorded
    (step,) = [s for s in view["steps"] if s["kind"] == "tool"]
    assert (step["status"], step["outcome"]) == ("failed", "raised KeyError: 'Revenue'")
    assert view["errors"] == ["run_cell: raised KeyError: 'Revenue'"]
    text = render_text(view)
    assert "✗ raised KeyError: 'Revenue' · run_cell(" in text and "error: run_cell: raised KeyError" in text
    assert "✗ raised KeyError: 'Revenue'" in text_of(render_html(view))
