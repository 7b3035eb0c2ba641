"""`run_python` in a kernel: the code runs as `run_cell`'s does, and answers as `run_python` always answered.

`run_python` is no longer offered to the model (`run_cell` is), but scripts and logs that name it still run and
replay. In a kernel it must behave as a guest: the runtime's own `run_python` (tools/kernel.py, for a plain Python
process) runs the code in a thread under `contextlib.redirect_stdout`, which swaps `sys.stdout` for the whole
process, so another thread's prints would land in the agent's result. Here the code goes through run_cell's
executor (`run_cell.run_in_shell`): on the kernel's main thread, through IPython (`In`/`Out`, the execution count,
magics, display hooks), its outputs under a parent message of its own, read through ipykernel's hooks filtered by
that parent; nothing process-wide is replaced.

It shows no cell of its own: no front end is told of it (its outputs go out under a parent no cell has, so a
notebook shows none of them), and its step in the run's record holds what it printed and returned, as before. Its
result has `run_python`'s shape (stdout, stderr, the last expression's value summarised, or the error and its
traceback), so a replay of a run that called it asks what the recording asked. `timeout` stops it as the person's
■ would (KeyboardInterrupt in synchronous code), within the run's `tool_timeout`.
"""

from __future__ import annotations

import ast
import uuid
from collections.abc import Callable
from typing import Any

from nbagent.events.levels import Risk
from nbagent.ipython.run_cell import cell_source, run_in_shell
from nbagent.tools.base import TIME_LIMIT, Tool
from nbagent.tools.kernel import MAX_OUTPUT, summarize

DEFAULT_TIMEOUT = 60.0  # seconds, as the runtime's run_python; a call may ask for up to ten times that


def _texts(out: dict[str, Any], result: dict[str, Any]) -> None:
    for key in ("stdout", "stderr"):
        text = out.get(key)
        head, total = (text.head, text.total) if text is not None else ("", 0)
        result[key] = head[:MAX_OUTPUT]
        if total > len(result[key]):
            result[f"{key}_truncated"] = f"{total:,} characters; the first {len(result[key]):,} shown"


def _value(shell: Any, out: dict[str, Any]) -> Any:
    """The last expression's value, as IPython's display hook kept it (`Out[n]`), when the cell showed one."""
    count = out.get("execution_count")
    shown = any(o.get("output_type") == "execute_result" for o in out.get("outputs") or [])
    cache = shell.user_ns.get("Out") if shown else None
    return cache.get(count) if isinstance(cache, dict) else None


def run_python_tool(shell: Any, where: Callable[[], tuple[str | None, str | None]]) -> Tool:
    """The kernel's `run_python` (not offered; `where() -> (cell_id, run_id)` as for run_cell)."""

    async def run_python(code: str, timeout: float | None = None) -> dict[str, Any]:
        """Run Python code in the user's session; returns stdout, stderr, the last expression's value, or the error.

        Args:
            code: the code; variables it defines stay in the user's session
            timeout: seconds before it is stopped (default 60)
        """
        from nbagent.gate.effects import current_call
        from nbagent.secrets.redactor import Redactor

        try:
            ast.parse(code, mode="exec")
        except SyntaxError as exc:  # as the runtime's run_python says it, and nothing runs
            return {"error": f"SyntaxError: {exc.msg} (line {exc.lineno})", "stdout": "", "stderr": ""}
        limit = min(timeout or DEFAULT_TIMEOUT, DEFAULT_TIMEOUT * 10)
        run_limit = TIME_LIMIT.get()
        call = current_call()
        run_id = call.run_id if call is not None else where()[1]
        token = TIME_LIMIT.set(min(limit, run_limit) if run_limit else limit)  # run_in_shell's watchdog reads it
        try:
            out = await run_in_shell(shell, cell_source(code, run_id, "run_python"), uuid.uuid4().hex,
                                     uuid.uuid4().hex)
        finally:
            TIME_LIMIT.reset(token)
        result: dict[str, Any] = {}
        _texts(out, result)
        if out.get("interrupted"):
            timed_out = "its time limit passed" in str(out.get("error"))
            result["error"] = (f"TimeoutError: stopped after {min(limit, run_limit or limit):g} s; variables it set "
                               "before that remain") if timed_out else str(out.get("error"))
        elif out.get("error"):
            result["error"] = str(out["error"])
            tb = out.get("traceback")
            result["traceback"] = tb.head[:MAX_OUTPUT] if tb is not None else ""
        else:
            value = _value(shell, out)
            if value is not None:
                result["value"] = summarize(value)
        redacted: dict[str, Any] = Redactor().redact(result)
        return redacted

    return Tool(run_python, risk=Risk.WRITE_HIGH_RISK, preview=lambda a: a.get("code"))


__all__ = ["run_python_tool"]
