"""What the view says about a run, and that the record and the CLI say the same: counts that agree, cell labels
that never collide, nominal prices, and errors that are not denials (also in logs written before the runtime
recorded a missing file as an error)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from agents import InOrder, agent, call, turns
from helpers import response

from nbagent.cli.commands import main
from nbagent.events import model as E
from nbagent.gate.deciders import Verdict
from nbagent.store import Store
from nbagent.tools.files import file_tools
from nbagent.ui.record import render_html, render_markdown, render_text
from nbagent.ui.viewstate import FILE_FACT_RULES, cell_labels, is_nominal, run_view

# ------------------------------------------------------------------------------------------------ cell labels


def test_cell_labels_are_the_shortest_unique_form() -> None:
    labels = cell_labels(["quickstart-03", "quickstart-05", "cell-1", None, "cell-1"])
    assert labels == {"quickstart-03": "quickstart-03", "quickstart-05": "quickstart-05", "cell-1": "cell-1"}
    a, b, c = ("3f2a9c41-0b7e-4c55-9d21-6a1e2b3c4d5e", "3f2a9c41-77aa-4c55-9d21-6a1e2b3c4d5e",
               "9b1d0e22-1111-2222-3333-444455556666")
    labels = cell_labels([a, b, c])
    assert labels[c] == "9b1d0e22"  # a UUID alone in its prefix: 8 characters, as git shortens hashes
    assert labels[a] == "3f2a9c41-0" and labels[b] == "3f2a9c41-7"
    assert len(set(labels.values())) == 3
    long_ids = ["analysis-of-the-regions-part-one", "analysis-of-the-regions-part-two", "x" * 40]
    labels = cell_labels(long_ids)
    assert labels["x" * 40] == "x" * 16
    assert labels[long_ids[0]].endswith("-o") and labels[long_ids[1]].endswith("-t")
    # an id that is a prefix of another: the longer one's label grows past it, so the two never read the same
    labels = cell_labels(["abcdefghijklmnop", "abcdefghijklmnopq"])
    assert labels == {"abcdefghijklmnop": "abcdefghijklmnop", "abcdefghijklmnopq": "abcdefghijklmnopq"}


@pytest.mark.parametrize("ids", [
    [f"{i:08x}-0000-4000-8000-{j:012x}" for i in range(3) for j in range(3)],
    [f"cell-{i}" for i in range(12)] + [f"cell-{i}{i}" for i in range(12)],
    ["a" * n for n in range(1, 40)],
])
def test_cell_labels_never_collide_and_are_prefixes(ids: list[str]) -> None:
    labels = cell_labels(ids)
    assert len(set(labels.values())) == len(set(ids))
    assert all(cid.startswith(label) for cid, label in labels.items())
    # no label is a prefix of another cell's id (so none reads as naming another cell)
    assert all(not other.startswith(label) for cid, label in labels.items() for other in ids
               if other != cid and label != cid)


# ---------------------------------------------------------------------------------------------- hand-made logs


def _run(store: Store, prompt: str, *, model: str, cell_id: str | None = None) -> str:
    session = store.session(notebook="analysis.ipynb")
    return store.create_run(session.id, prompt, model=model, cell_id=cell_id).id


def _llm(content: str | None = None, calls: list[tuple[str, str, dict[str, Any]]] | None = None,
         ids: list[str] | None = None, model: str = "gpt-4o-mini") -> E.LlmCalled:
    return E.LlmCalled(model=model, response=response(content, calls), call_ids=ids,
                       usage=E.Usage(prompt_tokens=10, completion_tokens=5, total_tokens=15), cost=0.00043,
                       latency_ms=1.0)


@pytest.fixture
def legacy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Store, str]:
    """A log as nbagent wrote it before a missing file was an error: `authorization_denied`, rule `scope.missing`,
    beside a real policy denial and a tool that ran."""
    (tmp_path / "analysis.ipynb").write_text("{}")
    store = Store(tmp_path / "analysis.ipynb")
    run = _run(store, "read the data", model="gpt-4o-mini", cell_id="quickstart-03")
    _run(store, "other", model="gpt-4o-mini", cell_id="quickstart-05")
    reply = store.append(_llm(None, [("m1", "read_file", {"path": "nothere.csv"}),
                                     ("m2", "read_file", {"path": ".env"}),
                                     ("m3", "read_file", {"path": "sales.csv"})], ids=["nb1_0", "nb1_1", "nb1_2"]),
                         run_id=run)
    store.append(E.AuthorizationDenied(call_id="nb1_0", tool="read_file", target="nothere.csv",
                                       reason="argument 'path': 'nothere.csv' does not exist", rule="scope.missing"),
                 run_id=run, parent_event_id=reply.id)
    store.append(E.AuthorizationDenied(call_id="nb1_1", tool="read_file", target=".env",
                                       reason="'.env' is excluded from the agent's reach", rule="scope.excluded"),
                 run_id=run, parent_event_id=reply.id)
    started = store.append(E.ToolCallStarted(call_id="nb1_2", tool="read_file", arguments={"path": "sales.csv"},
                                             risk="READ_ONLY"), run_id=run, parent_event_id=reply.id)
    store.append(E.ToolCallCompleted(call_id="nb1_2", tool="read_file", duration_ms=2.0, result="region"),
                 run_id=run, parent_event_id=started.id)
    store.append(_llm("Wrote report.md"), run_id=run)
    store.append(E.AnswerReady(content="Wrote report.md"), run_id=run)
    store.append(E.CompletedWithErrors(errors=[
        "read_file: denied: argument 'path': 'nothere.csv' does not exist",
        "read_file: denied: '.env' is excluded from the agent's reach"]), run_id=run)
    monkeypatch.chdir(tmp_path)
    return store, run


def test_an_old_logs_missing_file_is_an_error_not_a_denial(legacy: tuple[Store, str]) -> None:
    store, run = legacy
    view = run_view(store, run)
    missing = next(s for s in view["steps"] if s.get("call_id") == "nb1_0")
    assert missing["kind"] == "tool" and missing["status"] == "failed" and missing["error_type"] == "scope.missing"
    assert missing["arguments"] == {"path": "nothere.csv"}  # from the model's reply, by nbagent's call id
    excluded = next(s for s in view["steps"] if s.get("call_id") == "nb1_1")
    assert excluded["kind"] == "denied" and excluded["status"] == "denied" and excluded["rule"] == "scope.excluded"
    assert view["errors"] == ["read_file: argument 'path': 'nothere.csv' does not exist",
                              "read_file: denied: '.env' is excluded from the agent's reach"]
    assert view["totals"]["failed"] == 1 and view["totals"]["denied"] == 1
    text = render_text(view)
    line = next(ln for ln in text.splitlines() if "nothere.csv" in ln and re.match(r"\s+\d+\.", ln))
    assert "failed" in line and "denied" not in line.lower()
    assert "denied read_file .env" in text
    assert "1 tool call failed and 1 tool call was denied" in text
    out = render_html(view)
    assert "scope.missing" not in out  # no "(rule scope.missing)" beside a denial mark
    assert out.count('class="nbr-step nbr-k-denied') == 1 and "(rule scope.excluded)" in out
    md = render_markdown(view)
    assert "denied: argument 'path'" not in md and "denied read\\_file .env" in md


def test_file_fact_rules_match_the_runtime() -> None:
    """The view's list of fact rules is the runtime's (so old and new logs read alike)."""
    from nbagent import runtime

    assert set(runtime.FILE_FACTS) == set(FILE_FACT_RULES)


def test_a_missing_file_today_is_a_failed_tool_call(tmp_path: Path) -> None:
    """The live path: the runtime records the missing file, the record shows an error with the call's arguments."""
    a = agent(tmp_path, turns([call("read_file", path="nothere.csv")], "done"), tools=file_tools(tmp_path),
              decider=InOrder([Verdict.approve()], []))
    view = run_view(a.store, asyncio.run(a.run("read it", cell_id="c-1")).run_id)
    step = next(s for s in view["steps"] if s["kind"] in ("tool", "denied"))
    assert step["kind"] == "tool" and step["status"] == "failed" and step["arguments"] == {"path": "nothere.csv"}
    assert step["duration_ms"] is None  # it never ran: no "0.00 ms"
    assert view["totals"] == {**view["totals"], "tool_calls": 1, "failed": 1, "denied": 0}
    text = render_text(view)
    assert 'read_file(path="nothere.csv") failed' in text and "denied" not in text
    assert view["status"] == "completed_with_errors" and "1 tool call failed:" in text


# ---------------------------------------------------------------------------------------- counts and prices


def test_counts_agree_between_timeline_totals_and_cli(legacy: tuple[Store, str],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    store, run = legacy
    view = run_view(store, run)
    t = view["totals"]
    assert t["tool_calls"] == t["steps"] == 3 and t["model_calls"] == 2
    entries = len(view["steps"])
    assert entries == 5  # 2 model calls, a failed call, a denial, a call that ran
    out = render_html(view)
    assert f"Timeline · {entries} entries" in out and "3 tool calls · 2 model calls · 30 tokens" in out
    text = render_text(view)
    assert f"timeline · {entries} entries:" in text and "totals: 3 tool calls · 2 model calls" in text
    assert not re.search(r"\bsteps?\b", text.split("totals:")[1])
    assert main(["show", run]) == 0
    shown = capsys.readouterr().out
    assert "3 tool calls · 2 model calls · 30 tokens" in shown and "step(s)" not in shown
    missing = next(ln for ln in shown.splitlines() if "authorization_denied" in ln and "nothere.csv" in ln)
    excluded = next(ln for ln in shown.splitlines() if "authorization_denied" in ln and ".env" in ln)
    assert "an error, not a denial" in missing and "an error" not in excluded
    assert main(["runs"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert "TOOL CALLS" in table[0] and "STEPS" not in table[0]
    row = next(r for r in table if r.startswith(run[:12]))
    assert re.search(r"\bquickstart-03\s+completed_with_errors\s+gpt-4o-mini\s+3\s+30\s", row)


def test_real_prices_are_not_marked_nominal(legacy: tuple[Store, str]) -> None:
    store, run = legacy
    view = run_view(store, run)
    assert view["cost_nominal"] is False
    assert "nominal" not in render_html(view) and "nominal" not in render_text(view)


def test_offline_models_costs_are_marked_nominal(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert is_nominal("nbagent/scripted") and is_nominal("nbagent/replay") and is_nominal("nbagent/function")
    assert not is_nominal("gpt-4o-mini") and not is_nominal(None) and not is_nominal("openai/nbagent/x")
    a = agent(tmp_path, turns([call("read_file", path="a.txt")], "done"), tools=file_tools(tmp_path))
    (tmp_path / "a.txt").write_text("hi")
    run = asyncio.run(a.run("read a.txt", cell_id="c-1")).run_id
    view = run_view(a.store, run)
    assert view["model"] == "nbagent/scripted" and view["cost_nominal"] is True
    for out in (render_text(view), render_markdown(view)):
        assert "nominal: an offline model's made-up prices" in out and "no money was spent" in out
        assert re.search(r"\$[\d.,e+-]+ nominal", out)  # every dollar amount says it is nominal
        assert not [m for m in re.finditer(r"\$[\d.,e+-]+", out) if not out[m.end():].startswith(" nominal")]
    html = render_html(view)
    assert "no money was spent" in html
    assert not [m for m in re.finditer(r"\$[\d.,e+-]+", html) if not html[m.end():].startswith(" nominal")]
    monkeypatch.chdir(tmp_path)
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\$[\d.e+-]+ nominal", out) and "no money was spent" in out
    assert main(["show", run]) == 0
    out = capsys.readouterr().out
    assert re.search(r"cost \$[\d.e+-]+ nominal", out) and "no money was spent" in out
    assert main(["runs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cost_nominal"] is True


def test_the_header_shows_the_cell_label(tmp_path: Path) -> None:
    uuid = "3f2a9c41-0b7e-4c55-9d21-6a1e2b3c4d5e"
    a = agent(tmp_path, turns("done"))
    run = asyncio.run(a.run("hi", cell_id=uuid)).run_id
    view = run_view(a.store, run)
    assert view["cell_id"] == uuid and view["cell_label"] == "3f2a9c41"
    assert f'cell <code title="{uuid}">3f2a9c41</code>' in render_html(view)
    assert "· cell 3f2a9c41" in render_text(view).splitlines()[0]
    # another cell of the same notebook shares those 8 characters: both labels grow until they differ
    other = "3f2a9c41-77aa-4c55-9d21-6a1e2b3c4d5e"
    a2 = agent(tmp_path, turns("done"))
    run2 = asyncio.run(a2.run("hi again", cell_id=other)).run_id
    assert run_view(a2.store, run)["cell_label"] == "3f2a9c41-0"
    assert run_view(a2.store, run2)["cell_label"] == "3f2a9c41-7"


def test_arguments_keep_the_models_order_through_a_saved_notebook(tmp_path: Path) -> None:
    """The log's JSON and a saved notebook's sort keys; the record shows a call's arguments as the model wrote them."""
    a = agent(tmp_path, turns([call("create_file", path="z.md", content="# Z\n")], "done"),
              tools=file_tools(tmp_path), decider=InOrder([Verdict.approve()], []))
    view = run_view(a.store, asyncio.run(a.run("write z.md")).run_id)
    step = next(s for s in view["steps"] if s["kind"] == "tool")
    assert step["arg_keys"] == ["path", "content"] and view["plans"][0]["steps"][0]["arg_keys"] == ["path", "content"]
    saved = json.loads(json.dumps(view, sort_keys=True))  # nbformat writes outputs with sorted keys
    for out in (render_text(saved), render_html(saved), render_markdown(saved)):
        assert re.search(r'path=(&quot;|")z\.md(&quot;|"), content=', out), out
