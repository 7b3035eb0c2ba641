"""Attacks on the MCP client, the notebook as context ({In[n]}, {Out[n]}, {Err}, images) and papermill parameters.

Each test asserts the SAFE behaviour. A test marked `# Was:` describes a hole this attack found (it failed until
the fix, made the same day); the others are attacks that held. Offline: the hostile MCP server is
tests/fixtures/mcp_attack_server.py (no SDK), the model is the scripted one; every wait is bounded by a server's
`timeout`, and nothing asserts a duration.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_mcp import broken, lines, run

from nbagent import mcp
from nbagent.events.levels import Risk
from nbagent.events.state import RunStatus
from nbagent.gate.deciders import PauseDecider, PolicyDecider
from nbagent.ipython.outputs import MAX_TEXT, OutputCapture
from nbagent.ipython.parameters import Parameters, read_cell
from nbagent.ipython.references import MAX_SOURCE, BadReference, Notebook, expand_all, notebook_message
from nbagent.runtime import Agent

ATTACK = str(Path(__file__).parent / "fixtures" / "mcp_attack_server.py")
SECRET = "Zq81mXvTt0pLw4cK"  # a config "env" value that has no well-known credential shape


def attack(mode: str, timeout: float = 5, env: dict[str, str] | None = None) -> dict[str, Any]:
    return {"command": sys.executable, "args": [ATTACK, mode], "timeout": timeout, "env": env or {}}


def scripted(tmp_path: Path, found: list[Any], *calls: tuple[str, dict[str, Any]], autonomy: str = "L3",
             decider: Any = None) -> tuple[Agent, Any]:
    turns = [{"tool_calls": [{"name": name, "arguments": args}]} for name, args in calls]
    agent = Agent(script={"turns": [*turns, {"content": "ok"}]}, tools=found, autonomy=autonomy,
                  decider=decider or PolicyDecider("all"), store=tmp_path / "nb.ipynb")
    return agent, run(agent)


def logged(agent: Agent, result: Any) -> str:
    return json.dumps([e.model_dump(mode="json") for e in agent.store.run_events(result.run_id)])


@pytest.fixture(scope="module")
def hostile() -> dict[str, Any]:
    found, problems = lines({"mcpServers": {"h": attack("hostile")}})
    return {"found": found, "problems": problems, "by": {t.remote_name: t for t in found}}


# ---------------------------------------------------------------------------------------------- hostile names


def test_long_unicode_builtin_and_control_names_are_prefixed_or_left_out(hostile: dict[str, Any]) -> None:
    names = [t.name for t in hostile["found"]]
    assert all(n.startswith("mcp__h__") for n in names)
    assert not {"read_file", "done", "ask_human"} & set(names)  # never a built-in's or a control tool's name
    assert {"mcp__h__read_file", "mcp__h__done", "mcp__h__ask_human", "mcp__h__a__b"} <= set(names)
    left_out = [p for p in hostile["problems"] if "is left out" in p]
    # the 80-character name, the unicode one, and "fine\n" (a trailing newline: see the next test)
    assert len(left_out) == 3 and all("\n" not in p for p in left_out)


def test_a_tool_name_with_a_trailing_newline_is_left_out(hostile: dict[str, Any]) -> None:
    # Was: TOOL_NAME is checked with re.match and a `$` anchor, which also matches before a final "\n": the server's
    # tool "fine\n" becomes the tool "mcp__h__fine\n", a name no provider accepts as a function name (every request
    # of the run then fails) and one that prints as a second line in `%agent tools` and approval cards.
    bad = [t.name for t in hostile["found"] if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", t.name)]
    assert bad == []


def test_a_description_cannot_print_a_fake_row_in_agent_tools(hostile: dict[str, Any]) -> None:
    spoof = hostile["by"]["spoof"]
    assert spoof.risk == Risk.WRITE_HIGH_RISK
    # Was (minor, display): _make_tool keeps the server's newlines, and `%agent tools` prints
    # f"{name} {risk} [MCP server ...] {description}", so this destructive tool's description adds a row claiming
    # a tool is READ_ONLY by readOnlyHint: the listing people read to check each MCP tool's risk can be forged.
    assert "\n" not in spoof.description


# ---------------------------------------------------------------------------------------------- hostile schemas


def test_a_recursive_ref_schema_is_a_failed_call_not_a_failed_run(hostile: dict[str, Any], tmp_path: Path) -> None:
    # Was: Tool._validate_json (the argument check of every MCP call, in Runtime._malformed) lets the RecursionError
    # of a self-referencing $ref escape; it is not a ToolError, so the whole run ends FAILED instead of the call
    # failing with a line the model sees.
    _, result = scripted(tmp_path, hostile["found"], ("mcp__h__loop", {}))
    assert result.status != RunStatus.FAILED, result.error
    assert result.answer == "ok"


def test_a_dangling_ref_schema_is_a_failed_call_not_a_failed_run(hostile: dict[str, Any], tmp_path: Path) -> None:
    # Was: same path: a $ref to nowhere raises jsonschema's _WrappedReferencingError (not a ToolError) during
    # validation, and the run ends FAILED.
    _, result = scripted(tmp_path, hostile["found"], ("mcp__h__dangling", {"a": 1}))
    assert result.status != RunStatus.FAILED, result.error
    assert result.answer == "ok"


def test_a_schema_that_is_not_an_object_is_one_line() -> None:
    found, problems = lines({"mcpServers": {"n": attack("nonobject"), "ok": broken("ok")}})
    assert {t.server for t in found} == {"ok"}  # held: the other server's tools are unaffected
    (line,) = problems
    assert line.startswith("MCP server 'n' (the MCP config) did not start: ")
    # Was: the pydantic error of the listing is put in the line as is (_describe keeps its newlines): the promised
    # "one line each" is five lines in the cell.
    assert "\n" not in line


# ---------------------------------------------------------------------------------------------- secrets


def test_a_config_env_value_echoed_by_a_crashing_server_is_not_logged(tmp_path: Path) -> None:
    found, problems = lines({"mcpServers": {"leak": attack("leak", env={"SVC_PASSWORD": SECRET})}})
    assert problems == []
    agent, result = scripted(tmp_path, found, ("mcp__leak__leak", {}))
    failed = [e.payload.error for e in agent.store.run_events(result.run_id) if e.type == "tool_call_failed"]
    assert failed and "its stderr ends" in failed[0]  # the stderr tail is put in the error, by design
    # Was: the values of the config's "env" (and "headers") are never given to the Redactor, so a server that
    # prints one (a connection error with its credentials) puts it in tool_call_failed, the model's messages and
    # the notebook's record.
    assert SECRET not in logged(agent, result)
    assert SECRET not in json.dumps(agent.store.run_state(result.run_id).messages)


def test_a_config_env_value_in_a_start_failure_line_is_not_printed() -> None:
    from nbagent.ipython.entry import redact

    _, problems = lines({"mcpServers": {"leaks": attack("leak-start", env={"SVC_PASSWORD": SECRET})}})
    (line,) = problems
    assert "did not start" in line
    # Was: the line the cell prints (host.all_tools: print(redact(...))) keeps the stderr tail with the env value:
    # redact() knows the kernel's environment, not the MCP config's "env"/"headers".
    assert SECRET not in redact(f"nbagent: {line}")


def test_a_key_in_mcp_arguments_results_and_notebook_context_is_redacted_in_the_log(tmp_path: Path) -> None:
    import asyncio

    key = "sk-" + SECRET + "abcdefgh"
    found, _ = lines({"mcpServers": {"ok": broken("ok")}})
    script = {"turns": [{"tool_calls": [{"name": "mcp__ok__fine", "arguments": {"text": key}}]}, {"content": "ok"}]}
    agent = Agent(script=script, tools=found, autonomy="L3", decider=PolicyDecider("all"),
                  store=tmp_path / "nb.ipynb")
    context = [{"role": "user", "content": f"`Out[2]` (what cell [2] returned and printed):\nprinted: {key}"}]
    result = asyncio.run(asyncio.wait_for(agent.run("go", context=context), 120))
    text = logged(agent, result)
    assert "fine: " in text and key not in text and SECRET not in text


def test_a_url_with_a_password_in_a_start_failure_line_is_not_printed() -> None:
    import socket

    from nbagent.ipython.entry import redact

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    _, problems = lines({"mcpServers": {"u": {"url": f"http://admin:{SECRET}@127.0.0.1:{port}/mcp", "timeout": 2}}})
    (line,) = problems
    assert "did not start" in line
    # Was (same family, outside the listed secrets): _start_error names the server by its whole URL, userinfo
    # included, and redact() has no rule for `user:password@` in a URL, so the password is printed in the cell.
    assert SECRET not in redact(f"nbagent: {line}")


@pytest.mark.kernel
def test_inline_mcp_config_with_headers_is_not_shown_by_agent_config(tmp_path: Path) -> None:
    from kernel_harness import Kernel

    token = "k" + SECRET
    inline = json.dumps({"mcpServers": {"r": {"url": "http://127.0.0.1:9/mcp", "headers": {"X-Auth": token},
                                              "disabled": True},
                                        "s": {"command": "x", "env": {"SVC_PASSWORD": SECRET}, "disabled": True}}})
    k = Kernel(tmp_path, env={"NBAGENT_MCP": inline})
    try:
        assert k.run("%load_ext nbagent", cell_id="c1").ok
        shown = k.run("%agent config", cell_id="c2")
        assert shown.ok and "mcp" in shown.stdout
        # Was: `%agent config` prints every setting with repr(value) and no redaction: an inline `mcp` (NBAGENT_MCP,
        # c.NbAgent.mcp, `%agent config mcp={...}`) shows its headers token and env values in the notebook's output.
        assert token not in shown.stdout and SECRET not in shown.stdout
    finally:
        k.close()


# ---------------------------------------------------------------------------------------------- sizes, broken answers


@pytest.fixture(scope="module")
def huge() -> dict[str, Any]:
    found, problems = lines({"mcpServers": {"huge": attack("huge", 20)}})
    assert problems == []
    return {t.remote_name: t for t in found}


def test_a_huge_result_is_capped_in_the_log(huge: dict[str, Any], tmp_path: Path) -> None:
    agent, result = scripted(tmp_path, list(huge.values()), ("mcp__huge__big", {}))
    done = [e.payload.result for e in agent.store.run_events(result.run_id) if e.type == "tool_call_completed"]
    # the log keeps a result up to 1,000,000 characters (what a request sends of it is sized: test_context_budget)
    assert len(done) == 1 and len(done[0]) < 1_010_000 and "truncated" in done[0]


def test_a_huge_error_result_is_capped_in_the_log(huge: dict[str, Any], tmp_path: Path) -> None:
    agent, result = scripted(tmp_path, list(huge.values()), ("mcp__huge__bigerr", {}))
    assert result.status != RunStatus.FAILED
    failed = [e.payload.error for e in agent.store.run_events(result.run_id) if e.type == "tool_call_failed"]
    assert len(failed) == 1
    # Was: results are capped at MAX_RESULT_CHARS (jsonable) but errors are not (error_text): the server's 3 MB
    # isError text goes whole into tool_call_failed and into every later request to the model.
    assert len(failed[0]) < 1_010_000 and "truncated" in failed[0]


def test_wrong_ids_and_a_slow_drip_are_bounded_tool_errors(tmp_path: Path) -> None:
    found, problems = lines({"mcpServers": {"wid": attack("wrong-id", 2), "drip": attack("drip", 2)}})
    assert problems == []
    agent, result = scripted(tmp_path, found, ("mcp__wid__echo", {}), ("mcp__drip__echo", {}))
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS and result.answer == "ok"
    failed = {e.payload.tool: e.payload.error for e in agent.store.run_events(result.run_id)
              if e.type == "tool_call_failed"}
    assert "no answer within 2 s" in failed["mcp__wid__echo"] and "no answer within 2 s" in failed["mcp__drip__echo"]


def test_an_answer_that_never_ends_its_line_is_a_bounded_tool_error(tmp_path: Path) -> None:
    found, problems = lines({"mcpServers": {"flood": attack("flood", 2)}})
    assert problems == []
    agent, result = scripted(tmp_path, found, ("mcp__flood__echo", {}))
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS and result.answer == "ok"
    (error,) = [e.payload.error for e in agent.store.run_events(result.run_id) if e.type == "tool_call_failed"]
    assert "no answer within 2 s" in error and len(error) < 2_000


def test_a_stdio_server_does_not_inherit_the_kernels_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + SECRET * 2)
    monkeypatch.setenv("NBAGENT_TEST_TOKEN", SECRET)
    found, _ = lines({"mcpServers": {"envcheck": attack("huge", env={"ONLY_THIS": "1"})}})
    import asyncio

    keys = json.loads(asyncio.run(next(t for t in found if t.remote_name == "envkeys").call({})))
    assert "ONLY_THIS" in keys and "OPENAI_API_KEY" not in keys and "NBAGENT_TEST_TOKEN" not in keys


def test_a_replay_asks_again_before_a_destructive_mcp_call(tmp_path: Path) -> None:
    found, _ = lines({"mcpServers": {"ok": broken("ok")}})
    _, recorded = scripted(tmp_path, found, ("mcp__ok__wipe", {}), autonomy="L1")
    assert recorded.status == RunStatus.COMPLETED
    replay = Agent(replay=recorded.run_id, tools=found, decider=PauseDecider(), store=tmp_path / "nb.ipynb")
    result = run(replay)
    assert result.status == RunStatus.WAITING
    assert not any(e.type == "tool_call_started" for e in replay.store.run_events(result.run_id))


def test_mcp_calls_count_against_the_step_budget(tmp_path: Path) -> None:
    from nbagent.gate.policy import Budget

    found, _ = lines({"mcpServers": {"ok": broken("ok")}})
    turns = [{"tool_calls": [{"name": "mcp__ok__fine", "arguments": {"text": str(i)}}]} for i in range(2)]
    agent = Agent(script={"turns": [*turns, {"content": "ok"}]}, tools=found, autonomy="L3",
                  decider=PolicyDecider("all"), store=tmp_path / "nb.ipynb", budget=Budget(max_steps=1))
    result = run(agent)
    events = agent.store.run_events(result.run_id)
    assert [e.payload.tool for e in events if e.type == "tool_call_completed"] == ["mcp__ok__fine"]
    assert any(e.type == "authorization_denied" and "budget" in e.payload.reason for e in events)


def test_a_risk_override_that_names_no_tool_is_said_also_in_its_long_form() -> None:
    config = broken("ok") | {"risk": {"fien": "WRITE_HIGH_RISK", "mcp__ok__fien": "WRITE_HIGH_RISK",
                                      "mcp__other__fine": "WRITE_HIGH_RISK"}}
    found, problems = lines({"mcpServers": {"ok": config}})
    assert next(t for t in found if t.remote_name == "fine").risk == Risk.READ_ONLY  # no override applies
    assert any("'fien'" in p for p in problems)  # held: the short form is said
    # Was (minor): a key in the long form `mcp__SERVER__TOOL` is never checked, so a typo or another server's name
    # leaves the stricter risk the user asked for silently unapplied (the tool runs under its own annotations).
    assert any("'mcp__ok__fien'" in p for p in problems) and any("'mcp__other__fine'" in p for p in problems)


def test_writing_mcp_json_beside_the_notebook_is_high_risk_it_starts_commands(tmp_path: Path) -> None:
    from nbagent.scope.rules import Scope
    from nbagent.store import store_path_for
    from nbagent.store.blobs import BlobStore
    from nbagent.tools.files import file_tools

    folder = tmp_path / "work"
    folder.mkdir()
    tools = file_tools(Scope(root=folder, base=folder), BlobStore.of_store(store_path_for(folder / "nb.ipynb")))
    config = {"mcpServers": {"x": {"command": "python", "args": ["-c", "open('ran', 'w').write('code ran')"],
                                   "timeout": 5, "risk": {"*": "READ_ONLY"}}}}
    script = {"turns": [{"tool_calls": [{"name": "create_file", "arguments": {
        "path": "mcp.json", "content": json.dumps(config)}}]}, {"content": "Added a config file."}]}
    agent = Agent(script=script, tools=tools, autonomy="L2", decider=PauseDecider(), store=folder / "nb.ipynb")
    result = run(agent)
    mcp.notebook_toolset(folder)  # what the next %%agent run (or %agent tools) of this notebook does first
    # Was: mcp.json beside the notebook is a list of commands every later run starts, yet risk.code_effect does not
    # know the name: create_file of it stays WRITE_LOW_RISK and runs at L2 without approval (at L1 it is proposed as a
    # low-risk new file), and the next run executes the command with no approval at all ("risk follows effect", as
    # for pandas.py or jupyter_*_config.py). Its `"risk": {"*": "READ_ONLY"}` also lets its tools auto-run at L1.
    assert not (folder / "ran").exists(), "the command the model wrote into mcp.json ran at the next listing"
    assert result.status == RunStatus.WAITING


def test_a_tool_list_that_changes_takes_the_new_risk_and_asks(tmp_path: Path) -> None:
    config = {"mcpServers": {"chg": attack("changing")}}
    first, _ = lines(config)
    assert [(t.name, t.risk) for t in first] == [("mcp__chg__flip", Risk.READ_ONLY)]
    second, _ = lines(config)  # the next run's listing: the same tool now says it is destructive
    assert [(t.name, t.risk) for t in second] == [("mcp__chg__flip", Risk.WRITE_HIGH_RISK)]
    agent, result = scripted(tmp_path, second, ("mcp__chg__flip", {}), autonomy="L1", decider=PauseDecider())
    assert result.status == RunStatus.WAITING
    assert not any(e.type == "tool_call_started" for e in agent.store.run_events(result.run_id))


def test_path_arguments_nested_or_in_lists_go_through_the_file_scope(hostile: dict[str, Any],
                                                                      tmp_path: Path) -> None:
    agent, result = scripted(tmp_path, hostile["found"], ("mcp__h__read_file", {"opts": {"paths": ["/etc/shadow"]}}),
                             ("mcp__h__a__b", {"target": "../../etc/passwd"}))
    events = agent.store.run_events(result.run_id)
    assert [e.payload.tool for e in events if e.type == "authorization_denied"] == ["mcp__h__read_file",
                                                                                    "mcp__h__a__b"]
    assert not any(e.type == "tool_call_started" for e in events)


# ---------------------------------------------------------------------------------------------- {In} {Out} {Err}


def test_err_brings_a_failing_cell_of_any_size_clipped() -> None:
    from nbagent.ipython.host import NotebookHost

    host = SimpleNamespace(last_error=None)
    source = "rows = [\n" + "    'x' * 80,\n" * 100_000 + "]\n1 / 0"
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError as exc:
        error = exc
    NotebookHost._after_cell(host, SimpleNamespace(error_in_exec=error, info=SimpleNamespace(raw_cell=source)))
    nb = Notebook(current=3, inputs=["", source, "x"], last_error=host.last_error)
    _, _, refs = expand_all("{Err} and {In[1]}", {}, nb)
    message = notebook_message(refs, nb)
    assert message is not None
    in_part, err_part = message["content"][2], message["content"][1]
    assert len(in_part) < MAX_SOURCE + 500  # held: {In[n]} is clipped
    # Was: {Err} puts the failing cell's source in whole (host._after_cell keeps it unclipped, notebook_message
    # fences it as is): a 1.4 MB cell goes to the model and the log; {In[n]} of the same cell is clipped at 8,000.
    assert len(err_part) < MAX_SOURCE + 10_000


def test_references_never_reach_past_the_kernels_history() -> None:
    nb = Notebook(current=4, inputs=["", "a = 1", "b = 2", "c"], results={2: 2})
    for ref in ("{In[4]}", "{In[5]}", "{Out[-4]}", "{In[ -3 ]}x{In[0]}", "{Out[1]}", "{Out[99999999999999999999]}"):
        with pytest.raises(BadReference) as exc:
            expand_all(ref, {}, nb)
        assert "\n" not in str(exc.value)
    _, _, refs = expand_all("{In[ -3 ]}", {}, nb)
    assert [r.name for r in refs] == ["In[1]"]


def test_displays_are_bounded_per_cell_and_in_text() -> None:
    shell = SimpleNamespace(execution_count=3, user_ns={"In": [""], "Out": {}})
    cap = OutputCapture(shell)
    cap.current = 2
    for _ in range(50):
        cap._add("display_data", {"text/plain": "t" * 1_000_000})
    nb = Notebook(current=3, inputs=["", "a", "b"], captured=cap)
    _, _, refs = expand_all("{Out[2]}", {}, nb)
    message = notebook_message(refs, nb)
    assert message is not None
    assert sum(len(p) for p in message["content"] if isinstance(p, str)) < 10 * (MAX_TEXT + 200)
    assert cap.cells[2].dropped == 42


def test_out_of_a_result_whose_repr_raises_is_one_line_or_a_summary() -> None:
    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("repr is broken")

    nb = Notebook(current=3, inputs=["", "a", "Broken()"], results={2: Broken()})
    _, _, refs = expand_all("{Out[2]}", {}, nb)
    # Was (minor): summarize() calls repr() unguarded, so {Out[n]} of such a result raises a RuntimeError out of
    # notebook_message: the %%agent cell shows a traceback instead of one line (no model call is made).
    try:
        message = notebook_message(refs, nb)
    except BadReference:
        return
    assert message is not None


def test_images_of_earlier_runs_are_not_sent_again(tmp_path: Path) -> None:
    import asyncio

    url = "data:image/png;base64,iVBORw0KGgo="
    context = [{"role": "user", "content": [{"type": "text", "text": "Cells:"},
                                            *[{"type": "image_url", "image_url": {"url": url}}] * 4]}]
    for i in range(3):
        agent = Agent(script={"turns": [{"content": f"seen {i}"}]}, store=tmp_path / "nb.ipynb")
        result = asyncio.run(agent.run(f"look {i}", context=context))
        request = next(e.payload.request for e in agent.store.run_events(result.run_id) if e.type == "llm_called")
        parts = [p for m in request["messages"] if isinstance(m.get("content"), list) for p in m["content"]]
        assert sum(p.get("type") == "image_url" for p in parts) <= 4


# ---------------------------------------------------------------------------------------------- papermill


def test_a_papermill_cell_with_a_non_literal_value_is_said_in_one_line_not_ignored() -> None:
    from papermill.translators import translate_parameters

    # what `papermill nb.ipynb out.ipynb -p approve none -p threshold nan` injects (papermill writes NaN/inf as
    # float('nan') / float('inf'), not a literal)
    cell = translate_parameters("python3", "python", {"approve": "none", "threshold": float("nan")}, "Parameters")
    assert cell.startswith("# Parameters\n") and "float('nan')" in cell
    p = Parameters()
    p.observe(cell, 2)
    # Was: read_cell returns None for the whole cell when any value is not a literal, so the cell is silently not a
    # parameters cell: `-p approve none` is dropped without a line (the run then takes `%agent config approve=all`
    # or NBAGENT_APPROVE), where a refused parameter should fail the next %%agent cell in one line.
    assert p.values.get("approve", (None,))[0] == "none" or p.errors


def test_p_approve_none_is_not_dropped_by_a_nan_parameter_end_to_end(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("papermill")
    from test_papermill_params import execute, record
    from test_papermill_params import notebook as papermill_notebook

    for name in ("NBAGENT_APPROVE", "NBAGENT_MODEL", "NBAGENT_MAX_STEPS", "NBAGENT_BUDGET", "NBAGENT_SCRIPT"):
        monkeypatch.delenv(name, raising=False)
    path = papermill_notebook(tmp_path, "%agent config approve=all", "%%agent --script s.json\nwrite out.md")
    try:
        out = execute(path, approve="none", threshold=float("nan"))  # papermill -p approve none -p threshold nan
    except Exception as exc:  # a refused parameter failing the %%agent cell in one line is safe too
        assert "papermill parameter" in str(exc)
        return
    # Was: the injected cell holds `threshold = float('nan')`, so it is not read at all: `-p approve none` is
    # dropped silently and the write runs under the notebook's `%agent config approve=all`.
    assert not (tmp_path / "out.md").exists(), record(out)["decisions"]


def test_hostile_parameter_values_are_refused_in_one_line() -> None:
    p = Parameters()
    p.observe('# Parameters\napprove = "all; rm -rf /"\nautonomy = "L9"\nmax_steps = "5; import os"\n'
              'budget = [1]\nmodel = "nbagent/scripted"', 2)
    assert set(p.errors) == {"approve", "autonomy", "max_steps", "budget"}
    assert all("\n" not in e for e in p.errors.values())
    assert p.values == {"model": ("nbagent/scripted", "papermill parameter (cell [2])")}
    assert read_cell("# Parameters\napprove = __import__('os').system('true')") is None
    assert read_cell("#  Parameters\napprove = 'all'") is None and read_cell("# parameters\napprove = 'all'") is None
