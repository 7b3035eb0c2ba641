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

import array
import ast
import asyncio
import collections
import contextlib
import ctypes
import io
import itertools
import reprlib
import sys
import threading
import traceback
import types
from collections.abc import Iterator, Sized
from typing import Any, AnyStr

from nbagent.events.levels import Risk
from nbagent.tools.base import Tool, ToolError

HIDDEN = {"In", "Out", "exit", "quit", "get_ipython", "open"}
MAX_REPR = 2_000
MAX_OUTPUT = 20_000


def _clip(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit], True)


_CONTAINERS: tuple[tuple[type[Sized], str], ...] = ((dict, "dict"), (list, "list"), (tuple, "tuple"), (set, "set"),
                                             (frozenset, "frozenset"), (collections.deque, "deque"),
                                             (array.array, "array"))


class _Bounded(reprlib.Repr):
    """reprlib's repr, bounded before anything is built: strings sliced, containers cut at 20 items and 4 levels, and
    no more leaves once `limit` characters are written (what is shown is cut there anyway). Also for what reprlib
    would repr whole: bytes, bytearrays and memoryviews, subclasses of str and of the containers. `cut` says
    whether anything was left out. Other objects keep their own repr (numpy's and pandas' are bounded), cut."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.fillvalue = "…"  # what was left out, as a clipped text ends (reprlib counts 3 characters for it: +2)
        self.maxstring = self.maxlong = self.maxother = limit + 2
        self.budget = limit
        self.maxtuple = self.maxlist = self.maxarray = self.maxdict = self.maxset = self.maxfrozenset = 20
        self.maxdeque = 20
        self.maxlevel = 4
        self.cut = False

    def repr1(self, x: Any, level: int) -> str:
        if self.budget <= 0:
            self.cut = True
            return self.fillvalue
        if isinstance(x, memoryview):
            text = self._memoryview(x, level)
        elif isinstance(x, str | bytes | bytearray):
            # slices first; works as well for bytes (reprlib has no repr_bytes; typeshed types it for str only)
            text = self.repr_str(x, level)  # type: ignore[arg-type]
            self.cut |= len(x) > self.maxstring or text != repr(x)
        else:
            names = getattr(type(x), "_fields", None) if isinstance(x, tuple) else None
            if isinstance(x, tuple) and isinstance(names, tuple) and level > 0:
                self.cut |= len(x) > self.maxtuple  # a named tuple: Point(x=1, y=2), its fields bounded
                fields = itertools.islice(zip(names, x, strict=False), self.maxtuple)
                return f"{type(x).__name__}({', '.join(f'{f}={self.repr1(v, level - 1)}' for f, v in fields)})"
            for kind, name in _CONTAINERS:
                if isinstance(x, kind):
                    self.cut |= len(x) > self.maxlist or (level <= 0 and len(x) > 0)
                    text = getattr(self, "repr_" + name)(x, level)
                    return text if type(x) is kind else f"{type(x).__name__}({text})"
            try:
                text = super().repr1(x, level)
            except Exception as exc:  # an int over Python's digit limit, a __repr__ that raises
                text = f"<{type(x).__name__}: repr failed: {type(exc).__name__}>"
            self.cut |= len(text) >= self.maxother and self.fillvalue in text
        self.budget -= len(text)
        return text

    def _memoryview(self, x: memoryview, level: int) -> str:
        try:
            flat = x.cast("B") if x.c_contiguous else None
        except (TypeError, ValueError):
            flat = None
        if flat is None:
            return repr(x)
        head = flat[:self.maxstring + 1].tobytes()  # the slice is a view: only these bytes are copied
        self.cut |= flat.nbytes > self.maxstring
        return f"memoryview({self.repr_str(head, level)})"  # type: ignore[arg-type]  # (bytes: as in repr1)

    def repr_dict(self, x: Any, level: int) -> str:  # reprlib sorts every key first: a sample of the first
        return super().repr_dict(dict(itertools.islice(x.items(), self.maxdict + 1)), level)

    def repr_set(self, x: Any, level: int) -> str:
        return super().repr_set(set(itertools.islice(x, self.maxset + 1)), level)

    def repr_frozenset(self, x: Any, level: int) -> str:
        return super().repr_frozenset(frozenset(itertools.islice(x, self.maxfrozenset + 1)), level)


def _repr_length(value: str | bytes | bytearray) -> int:
    """len(repr(value)), counted a chunk at a time, never building the whole repr. A chunk is quoted as the whole
    is, except one holding ' and no " in a whole that holds both: the whole escapes each of its ' (as a bytearray's
    repr always does)."""
    step = 1 << 16
    if isinstance(value, str):
        chunks = (value[at:at + step] for at in range(0, len(value), step))
        return 2 + _chunks_length(chunks, "'", '"', "'" in value and '"' in value)  # ''
    both = isinstance(value, bytearray) or (b"'" in value and b'"' in value)
    data = (value[at:at + step] for at in range(0, len(value), step))
    byte_chunks = (bytes(chunk) if isinstance(chunk, bytearray) else chunk for chunk in data)
    quotes = 14 if isinstance(value, bytearray) else 3  # bytearray(b''), b''
    return quotes + _chunks_length(byte_chunks, b"'", b'"', both)


def _chunks_length(chunks: Iterator[AnyStr], single: AnyStr, double: AnyStr, both: bool) -> int:
    """What `_repr_length`'s chunks add to the quotes: each chunk's repr without its own quotes, and an escape for
    each ' of a chunk that would not escape it when the whole does (`both`: the whole holds ' and ")."""
    total = 0
    for chunk in chunks:
        total += len(repr(chunk)) - (2 if isinstance(chunk, str) else 3)
        if both and single in chunk and double not in chunk:
            total += chunk.count(single)
    return total


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
    """A compact, bounded description of any object: never the whole thing, and never a representation much larger
    than what it shows (a 25 MB bytes object is not turned into a 100 MB repr to show 2,000 characters of it)."""
    out: dict[str, Any] = {"type": f"{type(value).__module__}.{type(value).__qualname__}".removeprefix("builtins.")}
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple):
        out["shape"] = list(shape)
    dtypes = getattr(value, "dtypes", None)
    if dtypes is not None and hasattr(dtypes, "items"):
        with contextlib.suppress(Exception):
            items = list(itertools.islice(dtypes.items(), 51))
            out["dtypes"] = {str(k): str(v) for k, v in items[:50]}
            if len(items) > 50:
                out["dtypes_truncated"] = f"{len(dtypes)} columns; the first 50 shown"
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
            rows = head(head_rows)
            if hasattr(rows, "to_string"):
                try:  # pandas' own bounds (to_string shows every column, each cell whole, unless told)
                    text = rows.to_string(max_cols=20, max_colwidth=50)
                except TypeError:
                    text = rows.to_string()
            else:
                text = repr(rows)
            out["head"], cut = _clip(text, max_repr)
            if cut:
                out["head_truncated"] = True
            return out
    if isinstance(value, dict):
        pairs = [(_short_repr(k), _short_repr(value[k])) for k in itertools.islice(value, 20)]
        out["items"] = {k: v for (k, _), (v, _) in pairs}
        if any(cut for pair in pairs for _, cut in pair):
            out["items_shortened"] = "long keys or values are cut ('…')"
        if len(value) > 20:
            out["items_truncated"] = f"{len(value)} keys; the first 20 shown"
        return out
    if isinstance(value, list | tuple) and len(value) > 20:
        out["repr"] = _safe_repr(value[:20], max_repr)[:max_repr]
        out["repr_truncated"] = f"{len(value)} items; the first 20 shown"
        return out
    if isinstance(value, str | bytes | bytearray | memoryview) or any(isinstance(value, k) for k, _ in _CONTAINERS):
        bounded = _Bounded(max_repr)
        text = _safe_repr(value, max_repr, bounded)
        out["repr"], clipped = _clip(text, max_repr)
        if isinstance(value, str | bytes | bytearray) and (bounded.cut or clipped):
            shown = "its start and its end" if bounded.cut else "the start"
            out["repr_truncated"] = f"{_repr_length(value):,} characters; {len(out['repr']):,} shown ({shown})"
        elif bounded.cut or clipped:
            out["repr_truncated"] = (f"cut where long ({bounded.fillvalue!r}: strings, past 20 items or 4 levels); "
                                     f"{len(out['repr']):,} characters shown")
        return out
    text = _safe_repr(value)  # the object's own repr (numpy's and pandas' are bounded)
    out["repr"], cut = _clip(text, max_repr)
    if cut:
        out["repr_truncated"] = f"{len(text):,} characters; the first {max_repr:,} shown"
    return out


def _safe_repr(value: Any, limit: int | None = None, bounded: _Bounded | None = None) -> str:
    """repr() of the user's object, whose __repr__ may raise: then a line that says so, never a traceback. With a
    `limit`, reprlib's bounded repr (`_Bounded`): strings, bytes and containers are cut before anything is built."""
    try:
        if limit is None and bounded is None:
            return repr(value)
        return (bounded or _Bounded(limit or MAX_REPR)).repr(value)
    except Exception as exc:
        return f"<{type(value).__name__}: repr failed: {type(exc).__name__}: {str(exc)[:200]}>"


def _short_repr(value: Any, limit: int = 120) -> tuple[str, bool]:
    """(a repr of at most `limit` characters, whether anything was left out)."""
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple):
        return f"<{type(value).__name__} shape={shape}>", False
    bounded = _Bounded(limit)
    text = _safe_repr(value, limit, bounded)
    return (text, bounded.cut) if len(text) <= limit else (text[: limit - 1] + "…", True)


def _visible(name: str, value: Any) -> bool:
    return not (name.startswith("_") or name in HIDDEN or isinstance(value, types.ModuleType)
                or (isinstance(value, type) and value.__module__ in ("builtins", "typing")))


def _raise_in_thread(thread_id: int, exc: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc))


class KernelTools:
    def __init__(self, namespace: dict[str, Any], *, run_timeout: float = 60.0) -> None:
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
        if tree.body and isinstance(expr := tree.body[-1], ast.Expr):
            tree.body.pop()
            last = ast.Expression(expr.value)
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


def kernel_tools(namespace: dict[str, Any], *, run_timeout: float = 60.0) -> list[Tool]:
    """The three kernel tools (list_variables, inspect_variable, run_python) over one namespace.

    Args:
        namespace: the variables the agent sees and `run_python` runs in (the `%%agent` magic passes the kernel's
            `user_ns`); names starting with `_` are not listed.
        run_timeout: seconds a `run_python` call may run before `TimeoutError` is raised in its thread.
    """
    return KernelTools(namespace, run_timeout=run_timeout).tools()


__all__ = ["KernelTools", "kernel_tools", "summarize"]
