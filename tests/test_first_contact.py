"""A newcomer's first hour (issue 24, "First contact"): what the docs show works as written, and what nbagent
advises is what works. The command-line cases are in test_cli.py and test_runner.py, the model errors in
test_llm_http.py, the install in test_firststeps_clone.py."""

from __future__ import annotations

import ast
import asyncio
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")


def python_blocks(markdown: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown.read_text(), re.S)


def run_as_written(code: str, namespace: dict[str, Any], name: str) -> None:
    """Top-level `await` as in a notebook cell or `python -m asyncio`."""
    compiled = compile(code, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    pending = eval(compiled, namespace)
    if asyncio.iscoroutine(pending):
        asyncio.run(pending)


# ------------------------------------------------------------------------------------------- the Python API


def test_the_runtime_docs_first_example_works_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/runtime.md's first example, verbatim, in a folder with a sales.csv: the scripted model's read_file
    reaches the file. Before, an Agent given no tools had none, and the call failed as an unknown tool."""
    shutil.copy(ROOT / "notebooks" / "data" / "sales.csv", tmp_path / "sales.csv")
    monkeypatch.chdir(tmp_path)
    first, tools_example = python_blocks(ROOT / "docs" / "runtime.md")[:2]
    ns: dict[str, Any] = {}
    run_as_written(first, ns, "docs/runtime.md")
    result, agent = ns["result"], ns["agent"]
    events = agent.store.run_events(result.run_id)
    agent.store.close()

    assert result.status.value == "completed", result.error
    assert result.answer == "sales.csv has three columns: region, revenue and last_year."
    (done,) = [e for e in events if e.type == "tool_call_completed"]
    assert done.payload.tool == "read_file" and "region,revenue,last_year" in json.dumps(done.payload.result)
    assert not [e for e in events if e.type in ("tool_call_failed", "authorization_denied")]
    assert result.log_path is not None and (tmp_path / "analysis.nbagent").is_dir()

    # the next block: tools= gives exactly the tools listed, the file tools kept with file_tools(".")
    run_as_written(tools_example, ns, "docs/runtime.md (tools)")
    assert set(ns["agent"].tools) == {"read_file", "list_files", "search_content", "get_file_metadata",
                                      "create_file", "write_file", "delete_file", "row_count"}
    ns["agent"].store.close()


def test_an_agent_without_tools_gets_its_folders_file_tools_and_tools_empty_gets_none(tmp_path: Path) -> None:
    """The default file tools are the notebook's: scoped to the store's folder (a path outside it is refused)."""
    from nbagent import Agent, PolicyDecider

    folder = tmp_path / "project"
    folder.mkdir()
    (tmp_path / "outside.txt").write_text("not the project's\n")
    script = {"turns": [{"tool_calls": [{"name": "read_file", "arguments": {"path": "../outside.txt"}}]},
                        {"content": "done"}]}
    default = Agent(script=script, store=folder / "nb.ipynb", decider=PolicyDecider("all"))
    try:
        assert {"read_file", "write_file", "delete_file"} <= set(default.tools)
        result = asyncio.run(default.run("read it"))
        events = default.store.run_events(result.run_id)
    finally:
        default.store.close()
    assert [e.payload.tool for e in events if e.type == "authorization_denied"] == ["read_file"]
    assert "not the project's" not in json.dumps([e.model_dump(mode="json") for e in events])
    none = Agent(script=script, store=folder / "nb.ipynb", tools=[])
    none.store.close()
    assert none.tools == {}


# ------------------------------------------------------------------------------------------- the notebook


@pytest.mark.kernel
def test_the_no_model_advice_works_and_the_old_name_is_noted_once(tmp_path: Path) -> None:
    """`%config Agent.model = ...` set before `%load_ext`: the rename note was once printed on the warm-up's thread
    (into a log, not the cell) and never again; and "no model" and `%agent models` advised `%config Agent.model =
    ...`, which nbagent does not read. Now the note reaches the cell that first reads the settings (`%load_ext`,
    which looks for a configured model), once, and the advice, followed as printed, sets the model."""
    from kernel_harness import Kernel

    k = Kernel(tmp_path, env={**{key: "" for key in KEYS}, "OLLAMA_API_BASE": "http://127.0.0.1:9"})
    try:
        assert k.run('%config Agent.model = "openai/gpt-4o-mini"', cell_id="c0").ok
        load = k.run("%load_ext nbagent", cell_id="c1")
        assert load.ok
        assert "Agent.model in the IPython config is not read by nbagent" in load.stderr, load.stderr
        # nothing was loaded ahead: the old section's model is not read
        assert k.run("from nbagent.ipython import loading\nassert loading.status()['state'] == 'not started'",
                     cell_id="c2").ok
        cell = k.run("%%agent\nWhich region sold most?", cell_id="c3")
        assert not cell.ok
        assert "Agent.model in the IPython config" not in cell.stderr, cell.stderr  # said once
        (error,) = [o["error"] for o in cell.outputs if "error" in o]
        advice = re.search(r'%config (\w+)\.model = "\.\.\."', error)
        assert advice is not None and advice.group(1) == "NbAgent", error
        models = k.run("%agent models", cell_id="c4")
        assert "%config NbAgent.model" in models.stdout and "%config Agent." not in models.stdout

        # follow the advice as printed, with a model in place of "..."
        assert k.run(advice.group(0).replace("...", "nbagent/scripted"), cell_id="c5").ok
        models = k.run("%agent models", cell_id="c6")
        assert "model: nbagent/scripted (from %config NbAgent)" in models.stdout, models.stdout
    finally:
        k.close()


def test_notebooks_and_docs_advise_the_nbagent_section() -> None:
    """Wherever a reader is told to `%config` a setting, the section is NbAgent (`Agent` is read by nobody; the
    only mentions of it say so)."""
    texts = {str(p.relative_to(ROOT)): "".join("".join(c["source"]) + "\n" for c in json.loads(p.read_text())["cells"])
             for p in (ROOT / "notebooks").glob("*.ipynb")}
    texts |= {str(p.relative_to(ROOT)): p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]}
    from nbagent.models.detect import NO_MODEL

    texts["NO_MODEL"] = NO_MODEL
    wrong = [(name, line) for name, text in texts.items() for line in text.splitlines()
             if re.search(r"(%config|c\.)\s*Agent\.", line) and "not read" not in line
             and "not honoured" not in line]
    assert wrong == []
    assert '%config NbAgent.model = "' in texts["notebooks/real-models.ipynb"]
