"""How a run is shown: the static record (HTML, text, Markdown, MIME bundle) and the live widget's Python side
(clicks turned into decisions, coalesced syncs). No kernel: the widget runs on comm's dummy comm."""

from __future__ import annotations

import asyncio
import copy
import html as html_lib
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from agents import InOrder, agent, call, turns

from nbagent.events.state import RunStatus
from nbagent.gate.deciders import (
    Answer,
    ApprovalRequest,
    InteractiveDecider,
    PauseDecider,
    QuestionRequest,
    Verdict,
)
from nbagent.runtime import Agent
from nbagent.tools.files import file_tools
from nbagent.ui.record import MIME, RunRecord, bundle, markdown_html, render_html, render_markdown, render_text
from nbagent.ui.viewstate import view_state

EVIL = '<script>alert("x")</script>'
ANSWER = (
    "## Top regions\n\n**North** leads with *10* units.\n\n- North\n- South\n- East\n\n"
    "| region | revenue |\n|---|---:|\n| North | 10 |\n| South | 7 |\n\n"
    "Wrote `report.md`; see [the docs](https://example.com/a?b=1&c=2) and [bad](javascript:alert(1)). " + EVIL
)


def view_of(a: Agent, run_id: str) -> dict[str, Any]:
    return view_state(a.store.run_state(run_id), a.store.run_events(run_id), log_path=str(a.store.path))


@pytest.fixture
def full(tmp_path: Path) -> dict[str, Any]:
    """A finished run: a read, a denial, a plan refined then approved (a file write with a diff), a question
    answered, a plan denied, and a Markdown answer; model and tool text carry a <script>."""
    (tmp_path / "sales.csv").write_text("region,revenue\nNorth,10\nSouth,7\nEast,3\n" + EVIL + ",0\n")
    (tmp_path / ".env").write_text("KEY=1\n")
    script = turns(
        {"content": "Let me look at the data first " + EVIL, "tool_calls": [call("read_file", path="sales.csv")]},
        [call("read_file", path=".env")],
        [call("create_file", path="report.md", content="# Report\n\n1. North\n")],
        [call("create_file", path="report.md", content="# Sales report\n\n1. North\n2. South\n3. East\n")],
        [call("ask_human", question="Which currency should the report use?")],
        [call("delete_file", path="sales.csv")],
        ANSWER,
    )
    decider = InOrder(
        [Verdict.refine("list all three regions"), Verdict.approve(), Verdict.deny("keep the raw data")],
        [Answer(text="EUR")],
    )
    a = agent(tmp_path, script, tools=file_tools(tmp_path), decider=decider)
    result = asyncio.run(a.run("Load sales.csv, find the top 3 regions and write report.md", cell_id="cell-1"))
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS
    return view_of(a, result.run_id)


@pytest.fixture
def waiting(tmp_path: Path) -> dict[str, Any]:
    """A run left waiting for the approval of an overwrite."""
    (tmp_path / "notes.md").write_text("# Notes\nold line\n")
    script = turns([call("write_file", path="notes.md", content="# Notes\nnew line\n")])
    a = agent(tmp_path, script, tools=file_tools(tmp_path), decider=PauseDecider())
    result = asyncio.run(a.run("update the notes"))
    assert result.status == RunStatus.WAITING
    return view_of(a, result.run_id)


# ---------------------------------------------------------------------------------------------- the HTML record

def test_html_shows_the_whole_run(full: dict[str, Any]) -> None:
    out = render_html(full)
    assert out.startswith('<div class="nbagent-run') and "<style>" in out and "<script" not in out
    # header
    assert "completed with errors" in out and "nbagent/scripted" in out and full["run_id"] in out
    assert "cell-1" in out and "L1" in out
    assert "Load sales.csv, find the top 3 regions and write report.md" in out
    # steps: model calls with tokens and cost, tools with arguments, risk and duration, the denial, the question
    assert re.search(r"\d+ tokens", out) and "$0.000" in out
    assert "read_file" in out and "sales.csv" in out
    # what let a call through only where it matters (a grant, a high-risk call that ran without asking): not
    # "READ_ONLY runs without asking" under every read, nor the approval its plan card shows once
    assert "runs without asking" not in out and "(plan 01" not in out
    assert "nbr-risk-read_only" in out and "nbr-risk-write_low_risk" in out and "nbr-risk-write_high_risk" in out
    assert "is excluded from the agent" in out and "scope.excluded" in out
    assert "Which currency should the report use?" in out and "EUR" in out
    # plans: diffs coloured by line, decisions with who and why
    assert '<span class="nbr-add">+# Sales report</span>' in out
    assert '<span class="nbr-del">-North,10</span>' in out
    assert "feedback: list all three regions" in out and "reason: keep the raw data" in out
    # who and when, for the person reading their notebook: "by you · 14:02 UTC" (JupyterLab shows their own clock)
    when = r'<time datetime="20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ" title="[^"]+ UTC">\d\d:\d\d UTC</time>'
    assert re.search("by you · " + when, out)
    assert "approved by user" not in out and "sent back to the model" in out and "plan sent back with feedback" in out
    # the answer, rendered
    assert "<strong>North</strong>" in out and "<em>10</em>" in out and "<li>North</li>" in out
    assert '<th>region</th>' in out and 'style="text-align:right"' in out and "<code>report.md</code>" in out
    assert '<a href="https://example.com/a?b=1&amp;c=2" rel="noopener noreferrer">the docs</a>' in out
    assert 'href="javascript' not in out
    # totals and log
    t = full["totals"]
    assert t["tool_calls"] == t["steps"] == 6
    assert f"{t['tool_calls']} tool calls · {t['model_calls']} model calls" in out
    assert f"Timeline · {len(full['steps'])} entries" in out and "Steps (" not in out
    assert f"{t['tokens']:,} tokens" in out
    assert full["log_path"] in out


def test_untrusted_text_is_escaped_everywhere(full: dict[str, Any]) -> None:
    out = render_html(full)
    assert "<script>" not in out and "</script>" not in out
    assert "&lt;script&gt;" in out  # the thinking text, the tool result, the diff and the answer show it as text
    assert out.count("&lt;script&gt;") >= 4
    hostile = copy.deepcopy(full)
    hostile["model"] = '"><img src=x onerror=alert(1)>'
    hostile["prompt"] = "<iframe src=//evil>"
    hostile["steps"][2]["arguments"] = {"path": "<b onmouseover=alert(1)>"}
    hostile["plans"][0]["purpose"] = "<svg onload=alert(1)>"
    hostile["decisions"][0]["by"] = "<u>me</u>"
    hostile["log_path"] = "</div><script>x</script>"
    out = render_html(hostile)
    for bad in ("<img", "<iframe", "<b onmouseover", "<svg", "<u>me", "<script"):
        assert bad not in out


def test_markdown_renders_normal_markdown() -> None:
    out = markdown_html("# T\n\n1. a\n2. **b**\n\n```python\nx = '<tag>'\n```\n\n> quote <em>\n\n"
                        "[y](https://ok.example) _it_ snake_case_name ~~gone~~ `a<b`\n\n- [m](mailto:a@b.example)")
    flat = out.replace("\n", "")
    assert "<h3>T</h3>" in out and "<ol><li>a</li><li><strong>b</strong></li></ol>" in flat
    assert "<pre><code class=\"language-python\">x = '&lt;tag&gt;'</code></pre>" in flat
    assert "<blockquote><p>quote &lt;em&gt;</p></blockquote>" in flat
    assert '<a href="https://ok.example" rel="noopener noreferrer">y</a>' in out
    assert '<ul><li><a href="mailto:a@b.example" rel="noopener noreferrer">m</a></li></ul>' in flat
    assert "<em>it</em>" in out and "snake_case_name" in out and "<s>gone</s>" in out
    assert "<code>a&lt;b</code>" in out
    assert markdown_html("***a*** *b **c** d*") == "<p><em><strong>a</strong></em> <em>b <strong>c</strong> d</em></p>"
    assert markdown_html("###### deep") == "<h6>deep</h6>"  # headings go below the record's own, never past h6
    table = markdown_html("| a | b |\n|:-:|--:|\n| 1 | *2* |").replace("\n", "")
    assert table == ('<table><thead><tr><th style="text-align:center">a</th><th style="text-align:right">b</th>'
                     '</tr></thead><tbody><tr><td style="text-align:center">1</td><td style="text-align:right">'
                     "<em>2</em></td></tr></tbody></table>")


def test_superseded_pending_and_long_runs(full: dict[str, Any], waiting: dict[str, Any]) -> None:
    assert "Superseded" not in render_html(full)
    old = dict(full, superseded_by="01NEWRUN", status="superseded")
    assert "Superseded</strong> by run <code>01NEWRUN</code>" in render_html(old)
    assert "superseded by run 01NEWRUN" in render_text(old)

    out = render_html(waiting)
    assert "waiting for approval of plan" in out and "%agent approve" in out and "%agent refine" in out
    assert "nbr-risk-write_high_risk" in out and '<span class="nbr-del">-old line</span>' in out
    assert "waiting for approval" in render_text(waiting) and "%agent deny" in render_text(waiting)
    question = dict(waiting, pending={"kind": "human_input", "request_id": "r", "plan_id": None,
                                      "question": "Which year?"})
    assert "Which year?" in render_html(question) and "%agent answer" in render_html(question)
    # a superseded run keeps its pending request in the log, but nobody can answer it: no approve hint beside it
    stale = dict(waiting, superseded_by="01NEWRUN", status="superseded")
    for out in (render_html(stale), render_text(stale), render_markdown(stale)):
        assert "%agent approve" not in out and "waiting for approval" not in out and "uperseded" in out

    long = dict(full, steps=[dict(full["steps"][0], id=str(i)) for i in range(45)])
    out = render_html(long)
    assert "29 more entries" in out and '<ol class="nbr-steps" start="38">' in out
    assert "Timeline · 45 entries" in out
    assert "29 more entries" in render_text(long) and "timeline · 45 entries:" in render_text(long)

    big = copy.deepcopy(full)
    big["plans"][1]["steps"][0]["preview"] = "--- /dev/null\n+++ b/x\n" + "".join(f"+{i}\n" for i in range(40))
    out = render_html(big)
    assert re.search(r"<details><summary>diff of <code>report.md</code>: \+40 -0 \(42 lines\)", out)
    assert re.search(r"<details open><summary>diff of <code>report.md</code>: \+3 -0</summary>", out)


def test_text_markdown_and_bundle(full: dict[str, Any]) -> None:
    text = render_text(full)
    lines = text.splitlines()
    assert lines[0].startswith(f"nbagent run {full['run_id']}") and "completed_with_errors" in lines[0]
    assert "prompt: Load sales.csv" in text
    assert any(re.match(r"\s+\d+\. ✓ read sales\.csv, lines .* · read_file\(path=\"sales.csv\"\) \[READ_ONLY\]", ln)
               for ln in lines)  # what it did, then the call
    assert any("denied read_file .env" in ln for ln in lines)
    assert "refined by user" in text and "approved by user" in text and "denied by user" in text
    assert "answer:\n  ## Top regions" in text
    assert text.splitlines()[-2].startswith("totals: ") and text.endswith(f"log: {full['log_path']}")

    md = render_markdown(full)
    assert md.startswith(f"## nbagent run `{full['run_id']}`") and f"### Timeline · {len(full['steps'])} entries" in md
    assert "```diff\n--- /dev/null\n+++ b/report.md" in md and "#### Top regions" in md
    assert "<script>" not in md.split("```")[-1]  # outside code, the answer's HTML is neutralised
    assert "**Log:** `" in md and "reason: keep the raw data" in md

    b = bundle(full)
    assert set(b) == {"text/plain", "text/html", MIME} and b[MIME] is full
    assert json.loads(json.dumps(b[MIME])) == full  # the view is JSON as it is
    rec = RunRecord(full)
    assert rec._repr_mimebundle_() == b
    assert set(rec._repr_mimebundle_(include={"text/plain"})) == {"text/plain"}
    assert MIME not in rec._repr_mimebundle_(exclude={MIME})


def test_record_modules_import_no_ui_libraries() -> None:
    import subprocess
    import sys

    code = ("import sys, nbagent.ui.record, nbagent.ui.viewstate; "
            "print(','.join(m for m in ('IPython', 'ipywidgets', 'anywidget', 'traitlets') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


# ------------------------------------------------------------------------------------------------- the widget

def click(widget: Any, **decision: Any) -> None:
    """What the front end sends on a click: a custom comm message (`model.send`), never a state sync."""
    decision.setdefault("nonce", f"{time.monotonic_ns()}")
    widget._handle_msg({"content": {"data": {"method": "custom", "content": {"event": "decision", **decision}}},
                        "buffers": []})


def approval_view(request_id: str = "req-1") -> dict[str, Any]:
    return {"status": "waiting", "pending": {"kind": "approval", "request_id": request_id, "plan_id": "plan-1",
                                             "question": None}}


def question_view(request_id: str = "q-1") -> dict[str, Any]:
    return {"status": "waiting", "pending": {"kind": "human_input", "request_id": request_id, "plan_id": None,
                                             "question": "Which year?"}}


class Counting(InteractiveDecider):
    def __init__(self) -> None:
        super().__init__(poll=0.01)
        self.calls: list[tuple[str, Any, bool]] = []

    def resolve(self, request_id: str, value: Verdict | Answer, *, early: bool = False) -> bool:
        ok = super().resolve(request_id, value, early=early)
        self.calls.append((request_id, value, ok))
        return ok


async def _waiting_for(decider: InteractiveDecider, request: ApprovalRequest | QuestionRequest) -> asyncio.Task:
    task = asyncio.create_task(decider.decide(request) if isinstance(request, ApprovalRequest)
                               else decider.answer(request))
    while not decider.waiting():
        await asyncio.sleep(0.001)
    return task


@pytest.fixture
def widget_cls() -> Any:
    from nbagent.ui.widget import RunView

    return RunView


def test_widget_assets_and_traits(widget_cls: Any) -> None:
    w = widget_cls()
    # the ESM is the bundle of labextension/src/run_view/ (minified, with markdown-it and DOMPurify, whose sanitising
    # parses HTML): its default export is the widget; the checks on what the view's own code does read its sources
    assert re.search(r"export\s*\{[^}]*\bas default\b", w._esm) and "Approve" in w._esm and ".nbagent-live" in w._css
    sources = Path(__file__).resolve().parents[1] / "labextension" / "src" / "run_view"
    source = "\n".join(p.read_text() for p in sorted(sources.glob("*.js")))
    state = w.get_state()
    assert {"view", "streaming", "decided"} <= set(state) and "decision" not in state  # a click is no state
    assert "save_changes()" not in source and "model.set(" not in source  # the front end syncs no state at all
    for name in ('"Deny"', '"Refine"', '"Answer"'):
        assert name in w._esm and name in source
    assert "innerHTML" not in source  # text reaches the page as text nodes only (the answer: DOMPurify's DOM nodes)
    w.close()


@pytest.mark.parametrize(("action", "text", "expected"), [
    ("approve", "", Verdict.approve(by="user")),
    ("deny", " keep it ", Verdict.deny("keep it", by="user")),
    ("deny", "", Verdict.deny("", by="user")),
    ("refine", "use fewer rows", Verdict.refine("use fewer rows", by="user")),
])
def test_a_click_resolves_the_pending_approval_once(widget_cls: Any, action: str, text: str,
                                                    expected: Verdict) -> None:
    async def main() -> None:
        decider = Counting()
        w = widget_cls(decider=decider)
        task = await _waiting_for(decider, ApprovalRequest(run_id="r", request_id="req-1", plan_id="plan-1"))
        w.push(approval_view())
        w.flush()
        click(w, request_id="req-1", action=action, text=text)
        assert await asyncio.wait_for(task, 5) == expected
        assert w.decided == "req-1" and len(decider.calls) == 1 and decider.calls[0][2]
        click(w, request_id="req-1", action=action, text=text)  # a duplicate (a double click, a second view)
        click(w, request_id="req-1", action="deny", text="changed my mind")
        assert len(decider.calls) == 1 and len(w.accepted) == 1
        w.close()

    asyncio.run(main())


def test_stale_wrong_kind_and_empty_refine_are_ignored(widget_cls: Any) -> None:
    async def main() -> None:
        decider = Counting()
        w = widget_cls(decider=decider)
        task = await _waiting_for(decider, ApprovalRequest(run_id="r", request_id="req-2", plan_id="plan-1"))
        w.push(approval_view("req-2"))
        w.flush()
        click(w, request_id="req-1", action="approve")  # a click on an older card
        click(w, request_id="req-2", action="answer", text="yes")  # the wrong kind of decision
        click(w, request_id="req-2", action="refine", text="")  # refine needs feedback
        click(w, request_id="req-2", action="refine", text="   ")
        click(w, request_id="req-2", action="explode")
        click(w, request_id=None, action="approve")
        w._handle_msg({"content": {"data": {"method": "custom", "content": {"event": "decision", "x": [1]}}},
                       "buffers": []})
        w._handle_msg({"content": {"data": {"method": "custom", "content": ["not", "a", "dict"]}}, "buffers": []})
        await asyncio.sleep(0.05)
        assert not task.done() and decider.calls == [] and w.decided == ""
        click(w, request_id="req-2", action="refine", text="fewer rows")
        assert await asyncio.wait_for(task, 5) == Verdict.refine("fewer rows", by="user")
        w.close()

    asyncio.run(main())


def test_a_click_before_the_wait_begins_is_kept_for_it(widget_cls: Any) -> None:
    """The view shows a request as soon as it is logged; the run may ask its decider a moment later."""
    decider = Counting()
    w = widget_cls(decider=decider)
    w.push(approval_view("req-9"))  # the view says pending, but no decide() waits yet
    w.flush()
    click(w, request_id="req-9", action="approve")
    assert decider.calls == [("req-9", Verdict.approve(by="user"), True)] and w.decided == "req-9"
    request = ApprovalRequest(run_id="r", request_id="req-9", plan_id="p")
    assert asyncio.run(decider.decide(request)) == Verdict.approve(by="user")  # answered at once
    assert decider.resolve("req-9", Verdict.approve(), early=True) is False  # never twice
    w.decided = ""

    class Broken(InteractiveDecider):
        def resolve(self, request_id: str, value: Verdict | Answer, *, early: bool = False) -> bool:
            raise RuntimeError("boom")

    w.decider = Broken()
    click(w, request_id="req-9", action="approve")  # never raises into the comm handler
    w.decider = None
    click(w, request_id="req-9", action="approve")
    assert w.decided == ""
    w.close()


def test_a_question_is_answered_and_approve_does_not_answer_it(widget_cls: Any) -> None:
    async def main() -> None:
        decider = Counting()
        w = widget_cls(decider=decider)
        task = await _waiting_for(decider, QuestionRequest(run_id="r", request_id="q-1", question="Which year?"))
        w.push(question_view())  # not flushed yet: the latest view counts all the same
        click(w, request_id="q-1", action="approve")
        await asyncio.sleep(0.02)
        assert not task.done() and decider.calls == []
        click(w, request_id="q-1", action="answer", text="2024")
        assert await asyncio.wait_for(task, 5) == Answer(text="2024", by="user")
        assert w.decided == "q-1"
        w.close()

    asyncio.run(main())


def test_a_click_on_a_live_run_drives_it_to_the_end(tmp_path: Path, widget_cls: Any) -> None:
    """The whole path: the runtime asks, the attached view shows the pending plan, a click approves it."""
    decider = InteractiveDecider(poll=0.01)
    a = agent(tmp_path, turns([call("create_file", path="a.txt", content="hi")], "done"), decider=decider)
    w = widget_cls(decider=decider)
    unsubscribe = w.attach(a.bus, lambda rid: view_of(a, rid))

    async def clicker() -> None:
        while not (w.view.get("pending") or {}).get("request_id"):
            await asyncio.sleep(0.01)
        click(w, request_id=w.view["pending"]["request_id"], action="approve")

    async def main() -> Any:
        clicking = asyncio.create_task(clicker())
        result = await asyncio.wait_for(a.run("write a.txt"), 10)
        await clicking
        return result

    result = asyncio.run(main())
    w.flush()
    unsubscribe()
    assert result.status == RunStatus.COMPLETED and result.answer == "done"
    assert w.run_id == result.run_id and w.view["status"] == "completed" and w.view["pending"] is None
    assert [d["kind"] for d in w.view["decisions"]] == ["approved"] and w.view["decisions"][0]["by"] == "user"
    w.close()


# ------------------------------------------------------------------------------------------------- coalescing

def _count_syncs(w: Any) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    original = w.comm.send

    def send(data: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(data, dict) and data.get("method") == "update":
            sent.append(data["state"])
        return original(data, *args, **kwargs)

    w.comm.send = send
    return sent


def test_a_burst_of_pushes_costs_a_handful_of_syncs(widget_cls: Any) -> None:
    w = widget_cls(interval=0.1)
    changes: list[Any] = []
    w.observe(lambda c: changes.append(c["new"]), names=["view"])
    sent = _count_syncs(w)
    t0 = time.monotonic()
    for i in range(1000):
        w.push({"status": "running", "n": i})
    bound = 2 + (time.monotonic() - t0) / 0.1  # the first push syncs at once, then one per interval at most
    assert len(changes) <= bound and len(sent) <= bound
    w.flush()
    assert w.view["n"] == 999 and changes[-1]["n"] == 999
    assert len(changes) <= bound + 1
    w.close()


def test_pushes_spread_over_a_second_sync_about_once_per_interval(widget_cls: Any) -> None:
    w = widget_cls(interval=0.1)
    changes: list[Any] = []
    w.observe(lambda c: changes.append(c["new"]), names=["view"])
    t0 = time.monotonic()
    for i in range(1000):
        w.push({"n": i})
        if i % 10 == 0:
            time.sleep(0.01)
    elapsed = time.monotonic() - t0
    w.flush()
    assert len(changes) <= elapsed / 0.1 + 3
    assert w.view == {"n": 999}
    w.close()


def test_coalescing_in_a_running_loop_and_tokens(widget_cls: Any) -> None:
    async def main() -> None:
        w = widget_cls(interval=0.1)
        sent = _count_syncs(w)
        t0 = time.monotonic()
        for i in range(1000):
            w.push({"n": i})
            w.token(f"{i} ")
            if i % 50 == 0:
                await asyncio.sleep(0.01)  # the loop runs the timers
        elapsed = time.monotonic() - t0
        await asyncio.sleep(0.15)  # the trailing timer delivers the last state without a flush
        assert w.view == {"n": 999} and w.streaming.endswith("998 999 ")
        assert len(sent) <= elapsed / 0.1 + 3
        assert all(set(s) <= {"view", "streaming"} for s in sent)  # view and tokens travel in one message
        w.reset_tokens()
        w.flush()
        assert w.streaming == ""
        w.close()

    asyncio.run(main())


def test_pushes_from_another_thread(widget_cls: Any) -> None:
    w = widget_cls(interval=0.05)
    done = threading.Event()

    def feed() -> None:
        for i in range(300):
            w.push({"n": i})
        done.set()

    threading.Thread(target=feed).start()
    done.wait(5)
    deadline = time.monotonic() + 5
    while w.view != {"n": 299} and time.monotonic() < deadline:
        time.sleep(0.01)
    assert w.view == {"n": 299}
    w.close()


# ------------------------------------------------------------------------------- the front end, in a browser

HARNESS = """<!doctype html><html><head><meta charset="utf-8"></head><body>
<div id="full"></div><div id="waiting"></div><div id="question"></div><pre id="result"></pre>
<script type="module">
import widget from "./run_view.js";
const views = __VIEWS__;
const log = [];
function fakeModel(state) {
  const handlers = {};
  return {
    get: (k) => state[k],
    set: (k, v) => { state[k] = v; log.push(["set", k, v]); },
    save_changes: () => log.push(["save"]),
    send: (content) => log.push(["send", content]),
    on: (ev, f) => (handlers[ev] ||= []).push(f),
    off: () => {},
    fire(k, v) { state[k] = v; (handlers["change:" + k] || []).forEach((f) => f()); },
  };
}
const sent = (event) => log.filter((x) => x[0] === "send" && x[1].event === event).map((x) => x[1]);
const out = {};
try {
  const models = {};
  for (const id of ["full", "waiting", "question"]) {
    models[id] = fakeModel({view: views[id], streaming: id === "full" ? "<b>tok</b>" : "", decided: ""});
    widget.render({model: models[id], el: document.getElementById(id)});
  }
  out.rendered = sent("rendered").length;
  const buttons = (id) => [...document.querySelectorAll(`#${id} button`)];
  const btn = (id, name) => buttons(id).find((b) => b.textContent === name);
  const w = document.getElementById("waiting");
  out.names = buttons("waiting").filter((b) => !b.closest("[hidden]")).map((b) => b.textContent);
  out.approveClass = btn("waiting", "Overwrite notes.md").className;
  out.cardClass = w.querySelector(".nbv-plan").className;
  out.question = w.querySelector(".nbv-decide-q").textContent;
  out.danger = w.querySelector(".nbv-danger").textContent;
  out.purpose = w.querySelector(".nbv-purpose q") ? w.querySelector(".nbv-purpose q").textContent : null;
  out.panelInCard = !!w.querySelector(".nbv-plan .nbv-decide");
  btn("waiting", "Refine").click();
  const input = w.querySelector("input");
  input.dispatchEvent(new KeyboardEvent("keydown", {key: "Enter", bubbles: true}));
  out.sentAfterEmptyRefine = sent("decision").length;
  input.value = "only touch notes.md";
  input.dispatchEvent(new KeyboardEvent("keydown", {key: "Enter", bubbles: true}));
  out.decision = sent("decision")[0];
  out.disabled = buttons("waiting").every((b) => b.disabled);
  btn("waiting", "Overwrite notes.md").click();
  btn("waiting", "Overwrite notes.md").dispatchEvent(new MouseEvent("click"));  // even if the page missed "disabled"
  out.decisionsSent = sent("decision").length;
  const next = structuredClone(views.waiting);
  next.pending = {...next.pending, request_id: "req-2"};
  models.waiting.fire("view", next);
  out.enabledForNewRequest = !btn("waiting", "Overwrite notes.md").disabled;
  models.waiting.fire("decided", "req-2");
  out.disabledWhenDecided = btn("waiting", "Overwrite notes.md").disabled;
  const q = document.getElementById("question");
  out.answerDisabledWhenEmpty = btn("question", "Answer").disabled;
  const qi = q.querySelector("input");
  qi.value = "EUR";
  qi.dispatchEvent(new Event("input"));
  btn("question", "Answer").click();
  out.answer = sent("decision").at(-1);
  out.stateWrites = log.filter((x) => x[0] === "set" || x[0] === "save").length;
  const f = document.getElementById("full");
  out.scriptElements = document.querySelectorAll("script").length;
  out.injected = f.querySelectorAll("b, img, iframe").length;
  out.strong = [...f.querySelectorAll(".nbv-md strong")].map((x) => x.textContent);
  out.items = [...f.querySelectorAll(".nbv-md li")].map((x) => x.textContent);
  out.links = [...f.querySelectorAll(".nbv-md a")].map((x) => x.getAttribute("href"));
  out.risks = [...new Set([...f.querySelectorAll(".nbv-risk")].map((x) => x.textContent))].sort();
  out.diffAdds = [...document.querySelectorAll(".nbv-add")].map((x) => x.textContent);
  out.text = f.textContent;
} catch (e) {
  out.error = String(e && e.stack || e);
}
document.getElementById("result").textContent = JSON.stringify(out);
</script></body></html>"""


def _chromium() -> str | None:
    import shutil

    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


@pytest.mark.skipif(_chromium() is None, reason="no headless Chromium on this machine")
def test_run_view_js_renders_and_clicks_in_a_browser(tmp_path: Path, full: dict[str, Any],
                                                     waiting: dict[str, Any]) -> None:
    import functools
    import http.server
    import shutil
    import subprocess

    question = dict(waiting, plans=[], pending={"kind": "human_input", "request_id": "q-1", "plan_id": None,
                                                "question": "Which currency?"})
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "nbagent" / "ui" / "run_view.js", site / "run_view.js")
    views = json.dumps({"full": full, "waiting": waiting, "question": question}).replace("</", "<\\/")
    (site / "index.html").write_text(HARNESS.replace("__VIEWS__", views))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/index.html"
        dom = subprocess.run(
            [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--no-first-run", "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'p'}",
             "--virtual-time-budget=5000", "--dump-dom", url],
            capture_output=True, text=True, timeout=120, check=False,
        ).stdout
    finally:
        server.shutdown()
    match = re.search(r'<pre id="result">(.*?)</pre>', dom, re.S)
    assert match and match.group(1), dom[-2000:]
    out = json.loads(html_lib.unescape(match.group(1)))
    assert "error" not in out, out.get("error")
    assert out["rendered"] == 3
    # phrased from the plan, not the model; then the grants it offers (the same yes, for later calls like these)
    assert out["names"] == ["Overwrite notes.md", "Deny", "Refine", "Approve for this run", "Approve for this session"]
    assert "nbv-approve-danger" in out["approveClass"] and "nbv-plan-high" in out["cardClass"]
    assert out["question"] == "Overwrite notes.md?" and out["panelInCard"]  # from the plan: what, to what
    assert "High risk" in out["danger"] and "replaces the contents of notes.md" in out["danger"]
    assert out["sentAfterEmptyRefine"] == 0  # refine without feedback is refused in the page
    assert out["decision"]["request_id"] == waiting["pending"]["request_id"]
    assert out["decision"]["action"] == "refine" and out["decision"]["text"] == "only touch notes.md"
    assert out["decision"]["nonce"] and out["disabled"] and out["decisionsSent"] == 1
    assert out["enabledForNewRequest"] and out["disabledWhenDecided"]
    assert out["stateWrites"] == 0  # a click is a custom message; the view never syncs state
    assert out["answerDisabledWhenEmpty"]
    assert out["answer"]["action"] == "answer" and out["answer"]["text"] == "EUR"
    assert out["answer"]["request_id"] == "q-1"
    assert out["scriptElements"] == 1 and out["injected"] == 0  # model text stays text
    assert out["strong"] == ["North"] and out["items"] == ["North", "South", "East"]
    assert out["links"] == ["https://example.com/a?b=1&c=2"]
    assert out["risks"] == ["READ_ONLY", "WRITE_HIGH_RISK", "WRITE_LOW_RISK"]
    assert "+# Sales report" in out["diffAdds"] and "+new line" in out["diffAdds"]
    assert '<script>alert("x")</script>' in out["text"] and full["log_path"] in out["text"]


def test_records_phrase_plans_from_their_steps_and_mark_high_risk(waiting: dict[str, Any]) -> None:
    """The record says what a plan does in nbagent's words, quotes the model, and says what makes it high risk."""
    view = json.loads(json.dumps(waiting))
    plan = view["plans"][0]
    plan["purpose"] = "Just a harmless <b>tweak</b>"
    plan["steps"][0].update(tool="create_file", target="pandas.py", risk="WRITE_HIGH_RISK",
                            risk_reason="writes a Python module: `import pandas` would run it")
    out = render_html(view)
    assert "Plan 1: Create pandas.py" in out and "nbr-plan-high" in out
    assert "<q>Just a harmless &lt;b&gt;tweak&lt;/b&gt;</q>" in out  # quoted, escaped, not the title
    assert "creates pandas.py: writes a Python module: `import pandas` would run it" in out
    assert '<div class="nbr-risk-reason">writes a Python module' in out
    text = render_text(view)
    assert "create pandas.py" in text and "HIGH RISK: creates pandas.py: writes a Python module" in text
    assert "(create pandas.py)" in text  # the waiting line names the action, not the model's purpose
    md = render_markdown(view)
    assert "#### Plan 1: Create pandas.py" in md and "**⚠ High risk:** this plan creates pandas.py" in md
    assert "(writes a Python module" in md
    plan["purpose"] = "1 tool call(s): create_file"  # the runtime's stand-in when the model wrote nothing
    assert "the model says" not in render_html(view) and "the model says" not in render_text(view)



def test_a_tool_step_carries_its_risk_reason(tmp_path: Path) -> None:
    """A write Python would execute is raised to WRITE_HIGH_RISK by the runtime; its step says why."""
    a = agent(tmp_path, turns([call("create_file", path="pandas.py", content="print(1)\n")], "done"),
              tools=file_tools(tmp_path), decider=InOrder([Verdict.approve()], []))
    view = view_of(a, asyncio.run(a.run("plant a module")).run_id)
    step = next(s for s in view["steps"] if s["kind"] == "tool")
    assert step["risk"] == "WRITE_HIGH_RISK" and step["risk_reason"]
    assert f"high risk: {step['risk_reason']}" in html_lib.unescape(render_html(view))
