"""Kernel tools: the agent looks at, and (with approval) changes, the user's Python namespace.

The namespace is passed in by whoever hosts the runtime (the `%%agent` magic passes the kernel's `user_ns`),
so this module imports no IPython. Summaries are duck-typed (anything with `shape`, `dtypes`, `head`...), so
pandas, numpy, polars or xarray objects are described without importing any of them here.

- `list_variables`, `inspect_variable` (READ_ONLY): type, shape, dtypes, a head, size; never the whole
  object, and any truncation is stated.
- `run_python` (WRITE_HIGH_RISK): runs code in the namespace, capturing stdout, stderr, the value of the
  last expression and any exception with its traceback. A timeout stops pure-Python code by raising
  `TimeoutError` in the thread running it (code blocked inside a C call stops when that call returns).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import ctypes
import io
import sys
import threading
import traceback
import types
from collections.abc import MutableMapping
from typing import Any

from ..levels import Risk
from .base import Tool, ToolError

HIDDEN = {"In", "Out", "exit", "quit", "get_ipython", "open"}
MAX_REPR = 2_000
MAX_OUTPUT = 20_000


def _clip(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit], True)


def _size(value: Any) -> int | None:
    for attr in ("nbytes",):
        n = getattr(value, attr, None)
        if isinstance(n, int):
            return n
    memory_usage = getattr(value, "memory_usage", None)
    if callable(memory_usage):
        with contextlib.suppress(Exception):
            total = memory_usage(deep=False)
            return int(total.sum()) if hasattr(total, "sum") else int(total)
    with contextlib.suppress(Exception):
        return sys.getsizeof(value)
    return None


def summarize(value: Any, *, head_rows: int = 5, max_repr: int = MAX_REPR) -> dict[str, Any]:
    """A compact, bounded description of any object: never the whole thing."""
    out: dict[str, Any] = {"type": f"{type(value).__module__}.{type(value).__qualname__}".removeprefix("builtins.")}
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple):
        out["shape"] = list(shape)
    dtypes = getattr(value, "dtypes", None)
    if dtypes is not None and hasattr(dtypes, "items"):
        with contextlib.suppress(Exception):
            items = list(dtypes.items())
            out["dtypes"] = {str(k): str(v) for k, v in items[:50]}
            if len(items) > 50:
                out["dtypes_truncated"] = f"{len(items)} columns; the first 50 shown"
    elif getattr(value, "dtype", None) is not None:
        out["dtype"] = str(value.dtype)
    size = _size(value)
    if size is not None:
        out["size_bytes"] = size
    if isinstance(value, dict | list | tuple | set | frozenset | str | bytes):
        out["len"] = len(value)
    head = getattr(value, "head", None)
    if callable(head) and shape is not None:
        with contextlib.suppress(Exception):
            text = head(head_rows).to_string() if hasattr(head(head_rows), "to_string") else repr(head(head_rows))
            out["head"], cut = _clip(text, max_repr)
            if cut:
                out["head_truncated"] = True
            return out
    if isinstance(value, dict):
        keys = list(value)[:20]
        preview = {_safe_repr(k): _short_repr(value[k]) for k in keys}
        out["items"] = preview
        if len(value) > 20:
            out["items_truncated"] = f"{len(value)} keys; the first 20 shown"
        return out
    if isinstance(value, list | tuple) and len(value) > 20:
        out["repr"] = _safe_repr(value[:20])[:max_repr]
        out["repr_truncated"] = f"{len(value)} items; the first 20 shown"
        return out
    text = _safe_repr(value)
    out["repr"], cut = _clip(text, max_repr)
    if cut:
        out["repr_truncated"] = f"{len(text):,} characters; the first {max_repr:,} shown"
    return out


def _safe_repr(value: Any) -> str:
    """repr() of the user's object, whose __repr__ may raise: then a line that says so, never a traceback."""
    try:
        return repr(value)
    except Exception as exc:
        return f"<{type(value).__name__}: repr failed: {type(exc).__name__}: {str(exc)[:200]}>"


def _short_repr(value: Any, limit: int = 120) -> str:
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple):
        return f"<{type(value).__name__} shape={shape}>"
    text = _safe_repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _visible(name: str, value: Any) -> bool:
    return not (name.startswith("_") or name in HIDDEN or isinstance(value, types.ModuleType)
                or (isinstance(value, type) and value.__module__ in ("builtins", "typing")))


def _raise_in_thread(thread_id: int, exc: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc))


class KernelTools:
    def __init__(self, namespace: MutableMapping[str, Any], *, run_timeout: float = 60.0) -> None:
        self.ns = namespace
        self.run_timeout = run_timeout

    def list_variables(self) -> dict[str, Any]:
        """List the variables of the user's Python session (name, type, shape or length)."""
        rows = []
        for name, value in list(self.ns.items()):
            if not _visible(name, value):
                continue
            row: dict[str, Any] = {"name": name, "type": type(value).__name__}
            shape = getattr(value, "shape", None)
            if isinstance(shape, tuple):
                row["shape"] = list(shape)
            elif isinstance(value, dict | list | tuple | set | str):
                row["len"] = len(value)
            elif callable(value):
                row["type"] = "function" if isinstance(value, types.FunctionType) else row["type"]
            rows.append(row)
        return {"variables": rows[:200], **({"truncated": f"{len(rows)} variables; 200 shown"}
                                            if len(rows) > 200 else {})}

    def inspect_variable(self, name: str, rows: int = 5) -> dict[str, Any]:
        """Describe one variable: type, shape, dtypes, a head, size. Never prints the whole object.

        Args:
            name: the variable's name
            rows: how many rows of a table to show
        """
        if name not in self.ns:
            close = [n for n in self.ns if n.lower() == name.lower() and _visible(n, self.ns[n])]
            hint = f"; did you mean {close[0]!r}?" if close else "; list_variables shows what exists"
            raise ToolError(f"no variable named {name!r}{hint}")
        return {"name": name, **summarize(self.ns[name], head_rows=max(1, min(rows, 50)))}

    async def run_python(self, code: str, timeout: float | None = None) -> dict[str, Any]:
        """Run Python code in the user's session; returns stdout, stderr, the last expression's value, or the error.

        Args:
            code: the code; variables it defines stay in the user's session
            timeout: seconds before it is stopped (default 60)
        """
        limit = min(timeout or self.run_timeout, self.run_timeout * 10)
        try:
            tree = ast.parse(code, mode="exec")
        except SyntaxError as exc:
            return {"error": f"SyntaxError: {exc.msg} (line {exc.lineno})", "stdout": "", "stderr": ""}
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        body = compile(tree, "<agent>", "exec")
        tail = compile(last, "<agent>", "eval") if last is not None else None
        out, err = io.StringIO(), io.StringIO()
        state: dict[str, Any] = {}
        done = threading.Event()

        def work() -> None:
            state["thread"] = threading.get_ident()
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    exec(body, self.ns)
                    if tail is not None:
                        state["value"] = eval(tail, self.ns)
            except BaseException as exc:  # the user's code may raise anything; report it, do not propagate
                state["error"] = exc
                tb = exc.__traceback__.tb_next if exc.__traceback__ else None  # without this frame
                state["traceback"] = "".join(traceback.format_exception(type(exc), exc, tb))
            finally:
                done.set()

        thread = threading.Thread(target=work, name="nbagent-run_python", daemon=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        thread.start()
        while not done.is_set():
            await asyncio.sleep(0.01)
            if loop.time() >= deadline and "thread" in state:
                _raise_in_thread(state["thread"], TimeoutError)
                done.wait(2.0)
                break
        result: dict[str, Any] = {}
        for key, buf in (("stdout", out), ("stderr", err)):
            text, cut = _clip(buf.getvalue(), MAX_OUTPUT)
            result[key] = text
            if cut:
                result[f"{key}_truncated"] = f"{len(buf.getvalue()):,} characters; the first {MAX_OUTPUT:,} shown"
        error = state.get("error")
        if isinstance(error, TimeoutError) or not done.is_set():
            result["error"] = f"TimeoutError: stopped after {limit:g} s; variables it set before that remain"
        elif error is not None:
            result["error"] = f"{type(error).__name__}: {error}"
            result["traceback"], _ = _clip(state.get("traceback", ""), MAX_OUTPUT)
        elif "value" in state and state["value"] is not None:
            result["value"] = summarize(state["value"])
        return result

    def tools(self) -> list[Tool]:
        return [
            Tool(self.list_variables, risk=Risk.READ_ONLY),
            Tool(self.inspect_variable, risk=Risk.READ_ONLY),
            Tool(self.run_python, risk=Risk.WRITE_HIGH_RISK, preview=lambda a: a.get("code")),
        ]


def kernel_tools(namespace: MutableMapping[str, Any], *, run_timeout: float = 60.0) -> list[Tool]:
    return KernelTools(namespace, run_timeout=run_timeout).tools()
