"""What the notebooks and the docs name exists (issue 45): the tools they teach are tools the agent has, and the
settings they point to are settings nbagent (or litellm, for a base URL) reads. The names come from the code and
from a real kernel, never from a list kept here.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
sys.path.insert(0, str(Path(__file__).parent))


def markdown(nb_path: Path) -> str:
    return "\n".join(c.source for c in nbformat.read(nb_path, as_version=4).cells if c.cell_type == "markdown")


# ------------------------------------------------------------------------------------------ tools


def kernel_offered(folder: Path) -> dict[str, str]:
    """The tools a notebook's agent is offered, as `%agent tools` lists them in a real kernel: name -> risk."""
    from kernel_harness import Kernel

    k = Kernel(folder)
    try:
        assert k.run("%load_ext nbagent").ok
        listed = k.run("%agent tools")
    finally:
        k.close()
    assert listed.ok, listed.stderr
    return {line.split()[0]: line.split()[1] for line in listed.stdout.splitlines() if line.strip()}


def every_tool() -> dict[str, str]:
    """Every tool nbagent's code defines, in a kernel or through the Python API: name -> risk."""
    from nbagent.runtime.results import read_result_tool
    from nbagent.scope.rules import Scope
    from nbagent.tools.control import CONTROL_TOOLS
    from nbagent.tools.files import file_tools
    from nbagent.tools.kernel import kernel_tools

    tools = [*file_tools(Scope(root=ROOT, base=ROOT)), *kernel_tools({}), *CONTROL_TOOLS.values()]
    tools.append(read_result_tool(None, lambda: None))  # type: ignore[arg-type]  # (its store is used by a call)
    return {t.name: t.risk.value for t in tools}


def own_tools(nb_path: Path) -> set[str]:
    """The tools a notebook defines itself (`@tool` / `@nbagent.tool`)."""
    code = "\n".join(c.source for c in nbformat.read(nb_path, as_version=4).cells if c.cell_type == "code")
    return set(re.findall(r"@(?:nbagent\.)?tool\b[^\n]*\n(?:@[^\n]*\n)*(?:async )?def (\w+)", code))


@pytest.mark.kernel
def test_notebooks_and_docs_name_only_tools_the_agent_has(tmp_path: Path) -> None:
    offered = kernel_offered(tmp_path)
    defined = every_tool() | offered
    assert {"read_file", "run_cell", "done"} <= set(offered)  # (the listing was read)
    notebooks = sorted(NOTEBOOKS.glob("*.ipynb"))
    mine = set().union(*(own_tools(p) for p in notebooks))
    assert "growth" in mine
    # what the notebooks teach: a tool named in their text is one their agent is offered
    for path in notebooks:
        named = set(re.findall(r"`(\w+)(?:\([^`]*\))?`", markdown(path)))
        stale = {n for n in named & set(defined) if n not in offered}
        assert not stale, f"{path.name} teaches {sorted(stale)}, which the agent in a notebook is not offered"
    # what the scripted model calls in them: an offered tool, a notebook's own tool or an MCP server's
    for path in sorted((NOTEBOOKS / "scripts").glob("*.json")):
        for turn in json.loads(path.read_text()).get("turns", []):  # (mcp-servers.json is an MCP configuration)
            for call in turn.get("tool_calls") or []:
                name = call["name"]
                assert name in offered or name in mine or name.startswith("mcp__"), \
                    f"scripts/{path.name} calls {name!r}, which the agent in a notebook does not have"
    # the docs' tool tables: each row a tool the code defines, with the risk the code gives it
    for doc in DOCS:
        for name, risk in re.findall(r"^\| `(\w+)\([^`]*\)` \| (READ_ONLY|WRITE_LOW_RISK|WRITE_HIGH_RISK) \|",
                                     doc.read_text(), re.M):
            assert defined.get(name) == risk, f"{doc.name} lists {name} as {risk}; the code: {defined.get(name)}"
        for name in re.findall(r'"tool_calls": \[\{"name": "(\w+)"', doc.read_text()):
            assert name in defined, f"{doc.name} shows a call of {name!r}, a tool nbagent does not have"


# ------------------------------------------------------------------------------------------ settings


def code_env_names() -> set[str]:
    """The NBAGENT_* variables nbagent reads: the names in its code, and one per setting (options.resolve)."""
    from nbagent.ipython.options import SETTINGS

    text = "\n".join(p.read_text() for p in (ROOT / "nbagent").rglob("*.py"))
    return set(re.findall(r"NBAGENT_[A-Z_]+[A-Z]", text)) | {f"NBAGENT_{s.upper()}" for s in SETTINGS}


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_every_setting_the_docs_name_exists() -> None:
    from nbagent.cli.commands import build_parser
    from nbagent.ipython.options import SETTINGS, NbAgent, cell_parser
    from nbagent.runtime import Agent

    env = code_env_names()
    traits = set(NbAgent.class_trait_names(config=True))
    keywords = set(inspect.signature(Agent).parameters)
    cell_flags = {s for a in cell_parser()._actions for s in a.option_strings}
    run = build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    run_flags = {s for a in run._actions for s in a.option_strings}
    for doc in DOCS:
        if doc.name == "performance.md":  # measurements as they were taken, of setups since removed too
            continue
        text = doc.read_text()
        for name in set(re.findall(r"\bNBAGENT_[A-Z_]*[A-Z]\b", text)) - {"NBAGENT_"}:
            assert name in env, f"{doc.name} names {name}, which nbagent does not read"
        for name in re.findall(r"\bNbAgent\.(\w+)", text):
            assert name in traits or name == "name", f"{doc.name} names NbAgent.{name}, not a setting"
        for name in set(re.findall(r"%agent config (\w+)=", text)) - {"key"}:  # (`key=value`: the form)
            assert name in SETTINGS, f"{doc.name} names `%agent config {name}=`, not a setting"
        for name in re.findall(r"`Agent\((\w+)=", text):
            assert name in keywords, f"{doc.name} names Agent({name}=...), which Agent does not take"
        for block in python_blocks(text):
            try:
                tree = ast.parse(block)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Agent":
                    for kw in node.keywords:
                        assert kw.arg is None or kw.arg in keywords, f"{doc.name}: Agent({kw.arg}=...) is not taken"
        for snippet in re.findall(r"`(%%agent [^`]*)`", text):
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", snippet):
                assert flag in cell_flags, f"{doc.name}: `{snippet}` names {flag}, not an option of %%agent"
        for snippet in re.findall(r"`(nbagent run [^`]*)`", text):
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", snippet):
                assert flag in run_flags, f"{doc.name}: `{snippet}` names {flag}, not an option of nbagent run"


def base_url_ways() -> tuple[list[str], list[str]]:
    """How docs/jupyter.md says a model's base URL is set in a notebook: the environment variables it names, and
    the Python API's keyword, from the sentence about `litellm.api_base` (which does not reach the model process)."""
    text = (ROOT / "docs" / "jupyter.md").read_text()
    (sentence,) = [p for p in re.split(r"\n(?=- )", text) if "litellm.api_base" in p]
    return re.findall(r"`(?:os\.environ\[\")?([A-Z][A-Z0-9_]*_(?:BASE_URL|API_BASE))\b", sentence), \
        re.findall(r"`Agent\((\w+)=", sentence)


@pytest.mark.kernel
def test_the_docs_say_how_a_base_url_is_set_and_it_is_so(tmp_path: Path) -> None:
    """Each way docs/jupyter.md gives, done as it says in a real kernel: the variable set in a cell after loading
    sends the agent's request to that server (an OpenAI-compatible one on 127.0.0.1; without it, the request
    would go to api.openai.com, which this machine cannot reach)."""
    from kernel_harness import Kernel
    from stub_openai import Reply, StubOpenAI

    from nbagent.runtime import Agent

    variables, keywords = base_url_ways()
    assert variables, "docs/jupyter.md does not say which variable sets a base URL"
    assert keywords and set(keywords) <= set(inspect.signature(Agent).parameters)
    with StubOpenAI() as stub:
        stub.fallback = Reply(content="hello from the stub")
        k = Kernel(tmp_path, env={"OPENAI_API_KEY": "sk-test"})
        try:
            assert k.run("%load_ext nbagent").ok
            for n, name in enumerate(variables):
                assert k.run(f"import os\nfor v in {variables!r}:\n    os.environ.pop(v, None)\n"
                             f"os.environ[{name!r}] = {stub.base_url!r}").ok
                cell = k.run(f"%%agent --new --model openai/gpt-4o-mini\nsay hello {n}", timeout=180)
                assert cell.ok, cell.stderr + str(cell.outputs)
                (record,) = cell.records
                assert record["status"] == "completed" and "hello from the stub" in record["answer"], name
                assert len(stub.requests) == n + 1, name
        finally:
            k.close()


if __name__ == "__main__":
    pytest.main([__file__])
