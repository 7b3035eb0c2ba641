"""Kernel tools on a plain dict namespace (what the magic passes in is the kernel's user_ns)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from nbagent.events.state import RunStatus
from nbagent.gate.deciders import PolicyDecider
from nbagent.runtime import Agent
from nbagent.tools.base import ToolError
from nbagent.tools.kernel import KernelTools, summarize


class FakeFrame:
    """Quacks like a DataFrame: shape, dtypes, head().to_string(), memory_usage()."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.shape = (rows, 2)
        self.dtypes = {"region": "object", "revenue": "int64"}

    def head(self, n: int) -> FakeFrame:
        return FakeFrame(min(n, self.rows))

    def to_string(self) -> str:
        return "\n".join(["  region  revenue"] + [f"{i} R{i} {i * 10}" for i in range(self.rows)])

    def memory_usage(self, deep: bool = False) -> int:
        return self.rows * 16


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_list_and_inspect_never_dump_a_huge_object() -> None:
    ns: dict[str, Any] = {"df": FakeFrame(1_000_000), "xs": list(range(100_000)), "_private": 1,
                          "asyncio": asyncio, "cfg": {f"k{i}": i for i in range(50)}}
    k = KernelTools(ns)
    names = {v["name"]: v for v in k.list_variables()["variables"]}
    assert set(names) == {"df", "xs", "cfg"} and names["df"]["shape"] == [1_000_000, 2]
    df = k.inspect_variable("df", rows=3)
    assert df["shape"] == [1_000_000, 2] and df["dtypes"] == {"region": "object", "revenue": "int64"}
    assert df["head"].count("\n") == 3 and df["size_bytes"] == 16_000_000
    xs = k.inspect_variable("xs")
    assert xs["len"] == 100_000 and "100000 items; the first 20 shown" in xs["repr_truncated"]
    cfg = k.inspect_variable("cfg")
    assert len(cfg["items"]) == 20 and "50 keys" in cfg["items_truncated"]
    with pytest.raises(ToolError, match="no variable named 'DF'; did you mean 'df'"):
        k.inspect_variable("DF")


def test_summarize_states_truncation() -> None:
    s = summarize("x" * 5000)
    assert len(s["repr"]) == 2000 and "5,002 characters" in s["repr_truncated"]


def test_run_python_captures_output_value_and_changes_the_namespace() -> None:
    ns: dict[str, Any] = {"a": 2}
    k = KernelTools(ns)
    out = run(k.run_python("import sys\nprint('hello')\nprint('warn', file=sys.stderr)\nb = a * 21\nb + 0"))
    assert out["stdout"] == "hello\n" and out["stderr"] == "warn\n" and out["value"]["repr"] == "42"
    assert ns["b"] == 42  # visible to the user afterwards


def test_run_python_reports_exceptions_with_traceback() -> None:
    k = KernelTools({})
    out = run(k.run_python("def f():\n    return 1 / 0\nprint('before')\nf()"))
    assert out["stdout"] == "before\n" and out["error"] == "ZeroDivisionError: division by zero"
    assert 'File "<agent>", line 2, in f' in out["traceback"] and "nbagent" not in out["traceback"]
    assert run(k.run_python("def broken(:"))["error"].startswith("SyntaxError")


def test_run_python_timeout_stops_a_busy_loop_and_keeps_earlier_state() -> None:
    ns: dict[str, Any] = {}
    k = KernelTools(ns)
    out = run(k.run_python("progress = 'started'\nwhile True:\n    pass", timeout=0.2))
    assert out["error"].startswith("TimeoutError: stopped after 0.2 s") and ns["progress"] == "started"
    assert run(k.run_python("1 + 1"))["value"]["repr"] == "2"  # the tool still works afterwards


def test_run_python_is_high_risk_and_needs_approval_at_l2(tmp_path: Path) -> None:
    ns: dict[str, Any] = {"df": FakeFrame(3)}
    script = {"turns": [
        {"tool_calls": [{"name": "inspect_variable", "arguments": {"name": "df"}}]},
        {"tool_calls": [{"name": "run_python", "arguments": {"code": "total = df.shape[0] * 10\ntotal"}}]},
        {"content": "total is 30"},
    ]}
    for decider, expected in ((PolicyDecider("low"), None), (PolicyDecider("all"), 30)):
        ns.pop("total", None)
        agent = Agent(script=script, tools=KernelTools(ns).tools(), autonomy="L2", decider=decider,
                      store=tmp_path / "nb.ipynb")
        result = asyncio.run(agent.run("total?", previous_run_id=None))
        denied = expected is None  # --approve low denies run_python (WRITE_HIGH_RISK): the run did not do it all
        assert result.status == (RunStatus.COMPLETED_WITH_ERRORS if denied else RunStatus.COMPLETED)
        assert ns.get("total") == expected
        plan = next(e for e in agent.store.run_events(result.run_id) if e.type == "plan_proposed").payload
        assert plan.max_risk == "WRITE_HIGH_RISK" and plan.steps[0].preview.startswith("total = ")
