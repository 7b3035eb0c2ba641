"""Issue 28's Must show: a long session against a real model's context limit.

A notebook of 60 `%%agent` cells, each asking to read another ~200 KB CSV, run whole by `nbagent run` against an
OpenAI-compatible server that counts tokens as OpenAI does, refuses a request over 16,000 tokens as OpenAI does and
caches prompt prefixes as OpenAI does (tests/stub_openai.py), its model played by tests/session_model.py. With
`NBAGENT_CONTEXT_WINDOW=16000` every cell completes, every request fits (or a refusal is followed by a compaction
and a retry that fits), the log keeps every tool result whole, the session was compacted at least once, and running
the executed notebook again (`--approve recorded`) sends the very same requests, byte for byte.

The session model and the notebook are checked on their own, quickly, first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import nbformat
import pytest
import session_model as sm
from stub_openai import Recorded, Respond, StubOpenAI

from nbagent.scope.rules import Scope
from nbagent.store import Store, store_path_for
from nbagent.tools.files import FileTools

CELLS = 60
WINDOW = 16_000
MODEL = "openai/gpt-4o-mini"
RUN_MIME = "application/vnd.nbagent.run+json"


def session_notebook(folder: Path, cells: int = CELLS) -> Path:
    """`%load_ext nbagent`, then one `%%agent` cell per data file (cell ids JupyterLab-like and stable)."""
    sm.write_data(folder, cells)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbagent")]
    nb.cells[0].id = "load"
    for n in range(1, cells + 1):
        cell = nbformat.v4.new_code_cell(f"%%agent\n{sm.prompt(n)}")
        cell.id = f"ask-{n:02d}"
        nb.cells.append(cell)
    path = folder / "session.ipynb"
    nbformat.write(nb, path)
    return path


def nbagent_run(path: Path, approve: str, stub: StubOpenAI) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("nbagent")
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-long-session", "OPENAI_API_BASE": stub.base_url,
           "NBAGENT_CONTEXT_WINDOW": str(WINDOW)}
    for name in ("NBAGENT_APPROVE", "NBAGENT_MODEL", "NBAGENT_SCRIPT", "NBAGENT_BUDGET", "NBAGENT_MAX_STEPS"):
        env.pop(name, None)
    # the timeout is a guard against a hang, not a timing assertion
    return subprocess.run([str(exe), "run", str(path), "--approve", approve, "--model", MODEL], capture_output=True,
                          text=True, cwd=path.parent, env=env, timeout=1800, check=False)


def session_stub() -> StubOpenAI:
    stub = StubOpenAI(max_input_tokens=WINDOW, cache=True)
    stub.fallback = Respond(sm.respond)
    return stub


def bodies(requests: list[Recorded]) -> list[str]:
    return [json.dumps(r.body, sort_keys=True) for r in requests]


def records(path: Path) -> list[dict[str, Any]]:
    """The run record each `%%agent` cell of the saved notebook shows."""
    nb = nbformat.read(path, as_version=4)
    out = []
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith("%%agent"):
            found = [o["data"][RUN_MIME] for o in cell.get("outputs", []) if RUN_MIME in o.get("data", {})]
            out.append(found[-1] if found else {"status": "no record", "cell": cell.id})
    return out


def all_events(store: Store) -> list[Any]:
    return [e for rid in store.run_ids() for e in store.run_events(rid)]


def file_reads(store: Store) -> dict[str, Any]:
    """Each file read_file read, and the result the log holds for it (call ids are per run: matched run by run)."""
    out: dict[str, Any] = {}
    for rid in store.run_ids():
        events = store.run_events(rid)
        paths = {e.payload.call_id: e.payload.arguments.get("path") for e in events if e.type == "tool_call_started"}
        out.update({paths[e.payload.call_id]: e.payload.result for e in events
                    if e.type == "tool_call_completed" and e.payload.tool == "read_file"})
    return out


# ------------------------------------------------------------------------------------------- quick checks


def test_the_data_and_the_notebook_are_the_same_on_every_machine(tmp_path: Path) -> None:
    text = sm.csv_text(7)
    assert text == sm.csv_text(7) != sm.csv_text(8)
    assert 190_000 < len(text.encode()) < 215_000 and text.startswith("date,station,")
    path = session_notebook(tmp_path, cells=3)
    nb = nbformat.read(path, as_version=4)
    assert [c.id for c in nb.cells] == ["load", "ask-01", "ask-02", "ask-03"]
    assert nb.cells[2].source == "%%agent\nRead data/part_02.csv and tell me its first row and how many lines it has."
    assert (tmp_path / "data" / "part_03.csv").read_text() == sm.csv_text(3)


def _read(folder: Path, rel: str) -> dict[str, Any]:
    return FileTools(Scope(root=folder, base=folder)).read_file(rel)


def _body(*messages: dict[str, Any], tools: tuple[str, ...] = ("read_file", "read_result")) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "You are nbagent."}, *messages],
            "tools": [{"type": "function", "function": {"name": t, "description": t, "parameters": {}}}
                      for t in tools]}


def _ask(n: int) -> dict[str, Any]:
    return {"role": "user", "content": sm.prompt(n)}


def _called(n: int, tool: str = "read_file") -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"nb1_{n}", "type": "function", "function": {"name": tool, "arguments": "{}"}}]}


def _result(content: str, n: int = 0) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"nb1_{n}", "content": content}


def test_the_session_model_reads_answers_pages_and_summarises(tmp_path: Path) -> None:
    sm.write_data(tmp_path, 8)
    asked = sm.respond(_body(_ask(7)))
    assert asked.tool_calls == [{"id": "call_07_read", "name": "read_file", "arguments": {"path": "data/part_07.csv"}}]
    assert sm.respond(_body(_ask(7))) == asked  # the same request, the same reply

    whole = json.dumps(_read(tmp_path, "data/part_03.csv"), ensure_ascii=False)
    first_row = sm.csv_text(3).split("\n")[1]
    answer = sm.respond(_body(_ask(3), _called(3), _result(whole))).content
    assert answer == f"data/part_03.csv: its first row is {json.dumps(first_row)} and it has 3951 lines."

    # a result cut to its first page (the head of the JSON text and a note): cell 7 reads page 2, cell 8 does not
    clipped = whole[:3000] + ('\n[nbagent: this result has 22,000 tokens; the first 4,000 are above (6 pages of '
                              '4,000). Read on with read_result(handle="01RUN/nb1_0", page=2).]')
    assert sm.HANDLE.search(clipped)
    paged = sm.respond(_body(_ask(7), _called(7), _result(clipped, 7)))
    assert paged.tool_calls == [{"id": "call_07_page", "name": "read_result",
                                 "arguments": {"handle": "01RUN/nb1_0", "page": 2}}]
    assert sm.respond(_body(_ask(7), _called(7), _result(clipped, 7), tools=("read_file",))).content  # no tool: answer
    cut = sm.respond(_body(_ask(8), _called(8), _result(clipped, 8))).content or ""
    assert cut.startswith("data/part_08.csv: its first row is ") and "Only the first page" in cut
    after = sm.respond(_body(_ask(7), _called(7), _result(clipped, 7), _called(9, "read_result"),
                             _result("2026-02-01,Basel,1.0\n...", 9))).content
    assert after == 'data/part_07.csv: page 2 of its result begins "2026-02-01,Basel,1.0".'

    # a result compacted to a reference (page 1)
    ref = ('[nbagent: this tool result (22,101 tokens) was compacted to keep the conversation within the model\'s '
           'context; it is kept whole in the log. It began: "{\\"path\\": ...". Read it again with '
           'read_result(handle="01RUN/nb1_0", page=1).]')
    assert "compacted to a handle, 01RUN/nb1_0" in (sm.respond(_body(_ask(4), _called(4), _result(ref, 4))).content
                                                    or "")

    summary = sm.respond({"model": "gpt-4o-mini", "messages": [
        {"role": "system", "content": "You summarise a conversation."},
        {"role": "user", "content": "Researcher: Read data/part_01.csv ...\n\nResearcher: Read data/part_02.csv ..."}]})
    assert summary.content == ("The researcher asked for 2 files to be read (data/part_01.csv, data/part_02.csv); "
                               "each answer gave the file's first row and its number of lines.")


# ------------------------------------------------------------------------------------------- the session


@pytest.mark.kernel
@pytest.mark.kernel
@pytest.mark.slow
def test_sixty_cells_of_200_kb_files_fit_a_16k_window_and_rerun_byte_identical(tmp_path: Path) -> None:
    path = session_notebook(tmp_path)
    with session_stub() as stub:
        done = nbagent_run(path, "all", stub)
        first = list(stub.completion_requests)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    # every cell completed
    shown = records(path)
    assert len(shown) == CELLS
    assert [r.get("status") for r in shown] == ["completed"] * CELLS, [r.get("status") for r in shown]

    store = Store(store_path_for(path), readonly=True)
    events = all_events(store)
    compactions = [e.payload for e in events if e.type == "context_compacted"]
    assert compactions, "the session was never compacted"
    # the saved notebook says so: the record's timeline, and the text a reader without the extension sees
    assert any(st.get("title") == "context compacted" for r in shown for st in r.get("steps") or [])
    nb = json.loads(path.read_text())
    texts = ["".join(o["data"].get("text/plain", "")) for c in nb["cells"] for o in c.get("outputs", [])
             if "data" in o]
    assert any("context compacted, " in t and " sent as " in t for t in texts)

    # every request fit; a refusal must have been followed by a compaction ("refused") and a retry that fit
    refused = [i for i, r in enumerate(first) if r.refused]
    if refused:
        warnings.warn(f"finding for nbagent's token count: the server refused {len(refused)} request(s) "
                      f"(counted {[first[i].input_tokens for i in refused]}) that nbagent let through", stacklevel=1)
        assert all(i + 1 < len(first) and not first[i + 1].refused for i in refused)
        assert sum(1 for c in compactions if c.reason == "refused") >= len(refused)
    assert max(r.input_tokens or 0 for r in first if not r.refused) <= WINDOW

    # the log holds every tool result whole: what read_file returned, not the part sent to the model
    reads = file_reads(store)
    for n in range(1, CELLS + 1):
        rel = f"data/part_{n:02d}.csv"
        assert json.loads(json.dumps(reads[rel])) == json.loads(json.dumps(_read(tmp_path, rel))), rel

    # again, under the recorded approvals, against a fresh server: the very same requests
    with session_stub() as again_stub:
        again = nbagent_run(path, "recorded", again_stub)
        second = list(again_stub.completion_requests)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert [r.get("status") for r in records(path)] == ["completed"] * CELLS
    assert len(second) == len(first)
    assert bodies(second) == bodies(first)
    served = [r for r in first if not r.refused]
    print(f"{len(first)} requests, {len(refused)} refused, largest {max(r.input_tokens or 0 for r in served):,} "
          f"tokens, {sum(r.cached_tokens or 0 for r in served):,} of {sum(r.input_tokens or 0 for r in served):,} "
          f"input tokens cached, {len(compactions)} compactions")  # for the record (pytest -s)
