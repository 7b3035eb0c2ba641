"""Tools: typed Python functions the model may call.

`@tool(risk=...)` turns any sync or async function into a `Tool`. Its JSON schema comes from the signature
(type hints, defaults) and the docstring (first paragraph = description; `Args:` lines = parameter
descriptions), through a pydantic model built from the signature, so the model sees exactly what Python will
validate. Arguments are validated before the call; a mismatch is a `ToolArgumentError` whose message is meant
for the model ("argument 'n': Input should be a valid integer"), so it can correct itself.

A tool without a declared risk counts as WRITE_HIGH_RISK: the approval table then asks before running it.

Paths are found four ways (`Tool.paths`; how, in paths.py), and the runtime puts every one through the file
scope.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import functools
import inspect
import re
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from nbagent.events.levels import Risk
from nbagent.tools.paths import (
    NOT_A_PATH,
    PATH_NAME,
    WEAK_PATH_NAME,
    local_path,
    named_paths,
    path_key,
    path_shaped,
    schema_paths,
    typed_paths,
    valued_paths,
)

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters)\s*:\s*$")
_ARG_LINE = re.compile(r"^\s*(\w+)\s*(\([^)]*\))?\s*:\s*(.+)$")


class ToolError(Exception):
    """An error whose message the model sees as the tool's result."""


class ToolArgumentError(ToolError):
    """Arguments that do not fit the tool's schema (the message names each one)."""


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {param: description}) from a Google-style docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    params: dict[str, str] = {}
    arg_indent: int | None = None  # indentation of parameter lines inside an Args: section
    current: str | None = None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if _ARGS_HEADER.match(line):
            arg_indent, current = -1, None
            continue
        if arg_indent is None:
            description.append(line)
            continue
        if not line.strip():
            continue
        if indent == 0 and not _ARG_LINE.match(line):
            arg_indent = None  # the next section (Returns:, Raises:) ends the arguments
            continue
        m = _ARG_LINE.match(line)
        if m and (arg_indent == -1 or indent == arg_indent):
            arg_indent, current = indent, m.group(1)
            params[current] = m.group(3).strip()
        elif current is not None:
            params[current] += " " + line.strip()
    text = "\n".join(description).strip().split("\n\n")[0]
    return " ".join(text.split()), params


TIME_LIMIT: contextvars.ContextVar[float | None] = contextvars.ContextVar("nbagent_tool_time_limit", default=None)


def time_limit() -> float | None:
    """Seconds the running tool call may take (the run's `tool_timeout`), None for no limit. The runtime stops an
    awaiting tool itself (`asyncio.wait_for`); a tool whose work can block the event loop (run_cell's synchronous
    code) must stop itself, since nothing on the blocked loop can."""
    return TIME_LIMIT.get()


class Tool:
    """A callable the agent may use, with its schema, risk and argument validation."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        risk: Risk | str = Risk.WRITE_HIGH_RISK,
        target_arg: str | None = None,
        preview: Callable[[dict[str, Any]], str | None] | None = None,
        authorize: Callable[[dict[str, Any]], None] | None = None,
        shell_like: bool = False,
        parameters: dict[str, Any] | None = None,
        runs_later: str | None = None,
        resolver: Callable[[dict[str, Any]], list[Any]] | None = None,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        doc_description, param_docs = parse_docstring(fn.__doc__)
        self.description = description if description is not None else doc_description
        self.risk = Risk(risk)
        self.is_async = inspect.iscoroutinefunction(fn)
        self.args_model = _args_model(fn, self.name, param_docs)
        # a JSON schema given as is (an MCP server's tool): the model sees it, and arguments are checked against it
        self.parameters = parameters
        self._validator = _json_validator(parameters) if parameters is not None else None
        params = list(self.args_model.model_fields) if parameters is None else list(parameters.get("properties") or {})
        # the argument that names what the tool touches (shown in events and checked for traversal)
        self.target_arg = target_arg or next((p for p in ("path", "file", "filename", "target") if p in params), None)
        self._preview = preview
        self._authorize = authorize
        self.shell_like = shell_like
        # why every call of this tool makes code that runs later (a notebook cell it writes): such a call is
        # WRITE_HIGH_RISK with this reason, whatever its arguments, and no grant covers it (effects.py)
        self.runs_later = runs_later
        # what the call touches, resolved (effects.Target list), for a tool that knows its own operations (the
        # file tools); others have their path arguments resolved by the runtime (effects.resolve)
        self.resolver = resolver
        # the folder its relative paths are relative to, when not the notebook's (an MCP server's cwd): str, relative
        # to the notebook's folder or absolute; effects.resolve joins it before the file scope judges the path
        self.base: str | None = None
        self._schema: dict[str, Any] | None = None
        # offered to the model; a tool kept only so that recordings naming it still run (the kernel's run_python
        # beside run_cell) is callable by name but not offered
        self.offered = True

    def __repr__(self) -> str:
        return f"Tool({self.name!r}, risk={self.risk.value})"

    def schema(self) -> dict[str, Any]:
        """OpenAI-format tool schema (built once: pydantic's schema generation costs ~0.3 ms a tool)."""
        if self._schema is None:
            self._schema = self._build_schema()
        return self._schema

    def _build_schema(self) -> dict[str, Any]:
        if self.parameters is not None:
            return {"type": "function",
                    "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}
        parameters = _SCHEMAS.get(self.args_model)
        if parameters is None:
            parameters = _SCHEMAS[self.args_model] = self.args_model.model_json_schema()
            parameters.pop("title", None)
            for prop in parameters.get("properties", {}).values():
                prop.pop("title", None)
            parameters.setdefault("properties", {})
        parameters = copy.deepcopy(parameters)
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": parameters},
        }

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        if self.parameters is not None:
            return self._validate_json(arguments)
        try:
            model = self.args_model.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"argument {'.'.join(str(x) for x in err['loc']) or '(all)'!r}: {err['msg']}" for err in exc.errors()
            )
            raise ToolArgumentError(f"invalid arguments for {self.name}: {problems}") from None
        return {k: getattr(model, k) for k in self.args_model.model_fields}

    def _validate_json(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Arguments checked against the given JSON schema (passed through as they are when it cannot be read)."""
        if not isinstance(arguments, dict):
            raise ToolArgumentError(f"invalid arguments for {self.name}: expected an object")
        if self._validator is not None:
            try:
                errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))[:5]
            except Exception as exc:  # a schema that loops on itself, or refers to nothing: the call fails, not the run
                raise ToolArgumentError(f"{self.name}: its schema cannot be used to check arguments "
                                        f"({type(exc).__name__}: {str(exc)[:200]})") from None
            if errors:
                problems = "; ".join(f"argument {'.'.join(str(x) for x in e.absolute_path) or '(all)'!r}: "
                                     f"{e.message[:300]}" for e in errors)
                raise ToolArgumentError(f"invalid arguments for {self.name}: {problems}")
        return dict(arguments)

    def paths(self, arguments: dict[str, Any]) -> list[tuple[str, str]]:
        """Every path in the arguments, with where it sits: typed values, then those the schema declares, then
        those under path-like names, then strings shaped as paths; a `file:` URI as the local path it names."""
        found: list[tuple[str, str]] = []
        if self._typed_paths:
            try:
                found = [(w, local_path(v)) for w, v in typed_paths(self.validate(arguments))]
            except ToolError:
                pass  # invalid arguments never run; the schema, names and values still say what the call would touch
        seen = {w for w, _ in found}
        schema = self.parameters if self.parameters is not None else self.schema()["function"]["parameters"]
        for w, v in [*schema_paths(schema, arguments), *named_paths(arguments)]:
            if w not in seen:
                seen.add(w)
                found.append((w, local_path(v)))
        have = set(found)
        for w, v in valued_paths(arguments):  # also where a name found the string as written (" /etc/x")
            if (w, local_path(v)) not in have:
                have.add((w, local_path(v)))
                found.append((w, local_path(v)))
        return found

    @functools.cached_property
    def _typed_paths(self) -> bool:
        """Whether validated arguments can hold a PurePath (pydantic marks such fields `"format": "path"`): only
        then are the arguments validated to find them (a validation per call is most of what `paths` costs)."""
        import json

        return self.parameters is None and '"format": "path"' in json.dumps(self.schema())

    def path_values(self, arguments: dict[str, Any]) -> list[str]:
        return [v for _, v in self.paths(arguments)]

    def target(self, arguments: dict[str, Any]) -> str | None:
        """What the call touches, for the log and the views: clipped, since the model may send megabytes."""
        value = arguments.get(self.target_arg) if self.target_arg else None
        if value is None:
            return None
        text = str(value)
        return text if len(text) <= 300 else f"{text[:300]}… ({len(text):,} characters)"

    def preview(self, arguments: dict[str, Any]) -> str | None:
        """What the approval card shows for this call (a diff for a file write); never raises."""
        if self._preview is None:
            return None
        try:
            return self._preview(arguments)
        except Exception as exc:  # a preview is a courtesy: its failure must not block the plan
            return f"(no preview: {exc})"

    @property
    def has_own_authorization(self) -> bool:
        """A tool with its own scope check (the file tools); others get the runtime's path check."""
        return self._authorize is not None

    def authorize(self, arguments: dict[str, Any]) -> None:
        """The tool's own check before it runs (a file tool's scope); raises a ToolError with a `rule`."""
        if self._authorize is not None:
            self._authorize(arguments)

    async def call(self, arguments: dict[str, Any]) -> Any:
        """Validate, then run (a sync function runs in a worker thread so the event loop stays live)."""
        kwargs = self.validate(arguments)
        if self.is_async:
            return await self.fn(**kwargs)
        result = await asyncio.to_thread(self.fn, **kwargs)
        if inspect.isawaitable(result):
            return await result
        return result


def _json_validator(schema: dict[str, Any]) -> Any:
    """A jsonschema validator for `schema`, or None when jsonschema is missing or the schema is not valid."""
    try:
        from jsonschema import validators
    except ImportError:
        return None
    try:
        cls = validators.validator_for(schema)
        cls.check_schema(schema)
        return cls(schema)
    except Exception:
        return None


# Every run makes its tools anew (bound to its folder, its guard), from the same few functions. A pydantic model made
# per tool and run was ~30 KB of reference cycles a run, which only a full garbage collection frees, and ~1 ms of
# time: so a function's arguments get their model made once, and each model its schema once. What decides the model
# is the function's code, its defaults and its annotations, never the closure it was made in, so the tools a host
# makes per run as closures (bound to that run's cell) share one model too. A default or annotation that cannot be
# hashed makes a model of its own.
_MODELS: dict[tuple[Any, ...], type[BaseModel]] = {}
_SCHEMAS: weakref.WeakKeyDictionary[type[BaseModel], dict[str, Any]] = weakref.WeakKeyDictionary()


def _model_key(fn: Callable[..., Any], name: str, docs: dict[str, str]) -> tuple[Any, ...] | None:
    func = getattr(fn, "__func__", fn)  # a bound method: its function
    code = getattr(func, "__code__", None)
    if code is None:  # a callable object: its own model
        return None
    key = (code, func.__module__, name, tuple(sorted(docs.items())), func.__defaults__,
           tuple(sorted((func.__kwdefaults__ or {}).items())), tuple(func.__annotations__.items()))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _args_model(fn: Callable[..., Any], name: str, docs: dict[str, str]) -> type[BaseModel]:
    key = _model_key(fn, name, docs)
    if key is not None and key in _MODELS:
        return _MODELS[key]
    model = _new_args_model(fn, name, docs)
    if key is not None:
        if len(_MODELS) >= 1024:  # functions redefined cell after cell: the oldest go
            del _MODELS[next(iter(_MODELS))]
        _MODELS[key] = model
    return model


def _new_args_model(fn: Callable[..., Any], name: str, docs: dict[str, str]) -> type[BaseModel]:
    from pydantic import Field

    try:
        hints = get_type_hints(fn)
    except Exception:
        hints = {}
    fields: dict[str, Any] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        annotation = hints.get(p.name, Any)
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (annotation, Field(default, description=docs.get(p.name)))
    return create_model(
        f"{name}_args", __config__=ConfigDict(extra="forbid"), **fields
    )


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    risk: Risk | str = Risk.WRITE_HIGH_RISK,
    name: str | None = None,
    description: str | None = None,
    **options: Any,
) -> Any:
    """Decorator: `@tool` or `@tool(risk="READ_ONLY")` makes a function (sync or async) a `Tool`.

    The function stays callable as before. Its schema comes from the signature and the docstring (first paragraph:
    the description; `Args:` lines: the parameters').

    Args:
        fn: the function (given when used as `@tool` without parentheses).
        risk: READ_ONLY, WRITE_LOW_RISK or WRITE_HIGH_RISK (the default: the approval table asks before it runs).
        name: the name the model calls it by (default: the function's name).
        description: what the model is told it does (default: the docstring's first paragraph).
        **options: further `Tool` settings: `target_arg` (the argument naming what it touches), `preview` (a
            function of the arguments giving the card's preview), `authorize` (a scope check of its own, raising
            ToolError), `shell_like`, `parameters` (a JSON schema given as is), `runs_later`, `resolver`.

    Returns:
        The `Tool`, or (without `fn`) the decorator that makes one.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(f, name=name, description=description, risk=risk, **options)

    return wrap(fn) if fn is not None else wrap


ToolLike = Tool | Callable[..., Any] | Callable[..., Awaitable[Any]]


def as_tools(items: Iterable[ToolLike]) -> dict[str, Tool]:
    out: dict[str, Tool] = {}
    for item in items:
        t = item if isinstance(item, Tool) else Tool(item)
        if t.name in out:
            raise ValueError(f"two tools are named {t.name!r}; give one another name with @tool(name=...)")
        out[t.name] = t
    return out


__all__ = ["NOT_A_PATH", "PATH_NAME", "TIME_LIMIT", "WEAK_PATH_NAME", "Tool", "ToolArgumentError", "ToolError",
           "ToolLike", "as_tools", "local_path", "named_paths", "parse_docstring", "path_key", "path_shaped",
           "schema_paths", "time_limit", "tool", "typed_paths", "valued_paths"]
