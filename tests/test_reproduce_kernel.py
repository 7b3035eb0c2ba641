"""Issue 46: reproducing a saved agent notebook in a kernel, without asking again (nbagent/ipython/reproduce.py).

A run recorded through litellm against the OpenAI-compatible stub on 127.0.0.1 (a run_cell the person approves by a
click, then an answer) is reproduced in a new kernel, as a reopened notebook's Run All does with `%agent reproduce
on`: the same cell's code runs again under the recorded approval, the recorded replies answer, the stub sees no
request and nobody is asked. The first line of each re-run cell says which it does. Refusals are one line each, the
kernel alive, nothing recorded: a run the log does not hold, an edited log, a run that waits, a cell whose request
changed. A denied run is reproduced as denied.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_harness import RUN_MIME, Kernel, answer, script
from stub_openai import Reply, StubOpenAI, tool_call

from nbagent.store import Store

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

CODE = "x = 40 + 2\nprint('x is', x)"
AGENT = "%%agent --model openai/gpt-4o-mini"
# what the toolbar's Reproduce all sends first (labextension/src/reproduce.ts reproduceOn): the runs the records name
REPRODUCE_ON = "__import__('nbagent.ipython.reproduce', fromlist=['_']).turn_on(get_ipython(), {{'ask': '{run}'}})"


@pytest.fixture
def stub() -> Iterator[StubOpenAI]:
    with StubOpenAI() as server:
        yield server


def one_line(cell: object, words: str) -> str:
    reply = cell.reply["content"]  # type: ignore[attr-defined]
    assert reply["status"] == "error", reply
    assert len(reply["traceback"]) == 1 and "\n" not in reply["evalue"], reply["traceback"]
    assert words in reply["evalue"], reply["evalue"]
    return str(reply["evalue"])


def test_a_reopened_notebook_reproduces_its_run_with_no_model_call_and_no_click(tmp_path: Path,
                                                                                stub: StubOpenAI) -> None:
    # the model named in the cells only: a kernel loads the model library when a cell first asks it
    env = {"OPENAI_API_KEY": "sk-test-reproduce", "OPENAI_API_BASE": stub.base_url}
    stub.push(Reply(tool_calls=[tool_call("run_cell", {"code": CODE, "explanation": "the answer"})]),
              Reply(content="x is 42."))
    k = Kernel(tmp_path, env=env)
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        first = k.submit(f"{AGENT}\nCompute x", cell_id="ask")
        comm, pending = k.wait_for_pending()
        k.click(comm, pending["request_id"], "approve")
        k.wait(first)
        assert first.ok and first.records[-1]["status"] == "completed", first.outputs
        assert not first.notes  # a cell's first run says nothing of re-running
        recorded = first.records[-1]["run_id"]
        stub.push(Reply(content="Twice x is 84."))
        second = k.run(f"{AGENT}\nAnd twice x?", cell_id="ask2")  # continues the conversation
        assert second.ok and second.records[-1]["status"] == "completed", second.outputs
        recorded2 = second.records[-1]["run_id"]
    finally:
        k.close()
    assert len(stub.completion_requests) == 3

    k = Kernel(tmp_path, env=env)  # the notebook reopened: a new kernel, then Run All with reproduce on
    try:
        assert k.run(REPRODUCE_ON.format(run=recorded)).ok  # (before nbagent is loaded)
        load = k.run("%load_ext nbagent", cell_id="load")
        assert load.ok and not load.stdout  # (nothing was loaded ahead of the notebook's own cell)
        on = k.run("%agent reproduce", cell_id="mode")
        assert on.ok and on.stdout.startswith("reproduce is on (%config NbAgent)"), on.stdout
        again = k.submit(f"{AGENT}\nCompute x", cell_id="ask")
        again2 = k.submit(f"{AGENT}\nAnd twice x?", cell_id="ask2")  # (Run All: queued behind the first)
        after = k.submit("print(x * 2)", cell_id="after")
        k.wait(again, timeout=90)  # no click is given: a run that asked would wait here until the timeout
        k.wait(again2)
        k.wait(after)
        assert again.ok and again2.ok, (again.outputs, again2.outputs)
        assert len(stub.completion_requests) == 3  # not one request reached the model's server
        assert again2.records[-1]["reproduces"] == recorded2 and again2.records[-1]["answer"] == "Twice x is 84."
        assert again.notes and again.notes[0].startswith(f"reproducing run {recorded[:12]} from the log: no model "
                                                         "call"), again.notes
        assert again.outputs[0]["data"]["text/plain"] == again.notes[0]  # the output's first line
        record = again.records[-1]
        assert record["status"] == "completed" and record["reproduces"] == recorded
        assert record["answer"] == "x is 42." and record["run_id"] != recorded
        bundle = next(o["data"] for o in again.outputs if RUN_MIME in o.get("data", {}))
        said = f"reproduced run {recorded[:12]} from the log: no model call"
        assert said in bundle["text/plain"] and "R" + said[1:] in bundle["text/html"]
        assert not any(s.get("view", {}).get("pending") for s in k.run_views().values())
        store = Store(tmp_path / "test.nbagent", readonly=True)
        events = store.run_events(record["run_id"])
        approved = [e.payload.by for e in events if e.type == "plan_approved"]
        assert approved == [f"recorded:{recorded}"], approved  # the recorded approval answered, nobody clicked
        result, = [e.payload.result for e in events if e.type == "tool_call_completed"]
        assert result["stdout"] == "x is 42\n" and result["cell_id"] != store.run_state(recorded).steps["nb1_0"] \
            .result["cell_id"]  # the agent's code ran again, as a new cell
        assert after.stdout == "84\n"  # the reproduced cell set x in this kernel

        # the mode off: the same cell asks again, and says so first
        stub.push(Reply(content="x is still 42."))
        k.run("%agent reproduce off", cell_id="mode")
        asked = k.run(f"{AGENT}\nCompute x", cell_id="ask")
        assert asked.ok and len(stub.completion_requests) == 4
        assert asked.notes[0].startswith("asking again: the model answers this cell anew"), asked.notes
        assert asked.outputs[0]["data"]["text/plain"] == asked.notes[0]  # first, ahead of any loading line
        assert asked.records[-1].get("reproduces") is None
    finally:
        k.close()


def test_what_cannot_be_reproduced_is_refused_in_one_line(tmp_path: Path) -> None:
    folder = tmp_path
    kernel = Kernel(folder)
    try:
        assert kernel.run("%load_ext nbagent", cell_id="load").ok
        store_path = folder / "test.nbagent"
        # a denied run, reproduced as denied (the recorded no answers; nothing is written)
        script(folder / "deny.json", {"tool_calls": [{"name": "create_file", "arguments": {"path": "r.md",
                                                                                          "content": "x"}}]},
               answer("I could not write it."))
        denied = kernel.submit("%%agent --script deny.json\nwrite r.md", cell_id="deny")
        comm, pending = kernel.wait_for_pending()
        kernel.click(comm, pending["request_id"], "deny", "not now")
        kernel.wait(denied)
        assert denied.records[-1]["status"] == "completed_with_errors"
        again = kernel.run("%%agent --reproduce\nwrite r.md", cell_id="deny", timeout=60)
        assert again.ok and again.records[-1]["status"] == "completed_with_errors", again.outputs
        assert again.records[-1]["reproduces"] == denied.records[-1]["run_id"] and not (folder / "r.md").exists()

        runs = len(Store(store_path, readonly=True).run_ids())
        # a run the log does not hold (a record copied from elsewhere, a log not shipped with the notebook)
        missing = "01ZZZZZZZZZZZZZZZZZZZZZZZZ"
        assert kernel.run(f"%agent reproduce {missing} --cell deny", cell_id="arm").ok  # (a record's button)
        one_line(kernel.run("%%agent\nwrite r.md", cell_id="deny"), f"cannot reproduce run {missing}")
        fresh = kernel.run("%%agent --reproduce\nanything", cell_id="fresh")
        one_line(fresh, "nothing to reproduce: the log holds no run of this cell (cell fresh)")
        # the cell's request changed since
        one_line(kernel.run("%%agent --reproduce\nwrite s.md", cell_id="deny"), "this cell's request is not the one")
        # a run left waiting for an answer
        script(folder / "ask.json", {"tool_calls": [{"name": "ask_human", "arguments": {"question": "Which?"}}]})
        waiting = kernel.run("%%agent --script ask.json --approve all\nask me", cell_id="wait")
        assert waiting.records[-1]["status"] == "waiting"
        waiting_id = waiting.records[-1]["run_id"]
        refused = kernel.run("%%agent --reproduce\nask me", cell_id="wait")
        one_line(refused, f"cannot reproduce run {waiting_id}: it is waiting for a decision")
        assert len(Store(store_path, readonly=True).run_ids()) == runs + 1  # the waiting one: no refusal made a run

        alive = kernel.run("print('alive')", cell_id="alive")
        assert alive.ok and alive.stdout == "alive\n"
    finally:
        kernel.close()

    # an edited log: the recorded answer changed by hand, seen by the next kernel (as `nbagent verify` sees it)
    recorded = denied.records[-1]["run_id"]
    log = store_path / "events.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if json.loads(line).get("run_id") == recorded
              and "I could not write it." in line)
    lines[at] = lines[at].replace("I could not write it.", "I wrote it, as asked.")
    log.write_text("".join(lines))
    k = Kernel(folder)
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok and k.run("%agent reproduce on", cell_id="mode").ok
        text = one_line(k.run("%%agent\nwrite r.md", cell_id="deny"), f"cannot reproduce run {recorded}: ")
        assert "fails verification" in text
        alive = k.run("print('alive')", cell_id="alive")
        assert alive.ok and alive.stdout == "alive\n"
    finally:
        k.close()
