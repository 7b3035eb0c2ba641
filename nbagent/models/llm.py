"""The model layer: one async call to any model through litellm, with retries, streaming and accounting.

- litellm is imported lazily (2-3 s, and it would fetch a price map over the network unless
  `LITELLM_LOCAL_MODEL_COST_MAP` is set first): never at package import or `%load_ext`, and never for the
  offline models (`nbagent/scripted`, `function`, `replay`), which are called directly with the same recorded
  result (see `complete`). In a kernel it is not imported at all: the kernel's model process makes the calls
  (nbagent/models/process.py: `complete` sends it the call, `library` the token counts and model information).
- litellm's MCP gateway is skipped on every call (`_skip_mcp_handler`): nbagent's tools are never litellm-proxy
  MCP tools, and checking for them imports mcp's server, starlette and uvicorn on the first call (~1 s, ~20 MiB).
- A provider that lacks a parameter gets the call without it (`drop_params` per call, not litellm's global).
- Retries: transient failures (timeouts, connection errors, HTTP 408/429/5xx) are retried with exponential
  backoff and a cap (retrying.py: tenacity's, as for tool calls); litellm's own retries are turned off so they
  do not multiply. Anything else fails at once. The number of retries is returned with the reply (and recorded in
  `llm_called`). A call that fails while the model's API key is not set (litellm's `validate_environment`) is an
  AuthenticationError naming the variable, never retried (litellm reports OpenAI's as a server error).
- Errors keep the provider's message and drop litellm's wrapping (`error_message`).
- Fingerprints identify a request for replay: a hash of the tool schemas and every message, computed
  incrementally per run (`Fingerprint`) so a long run does not re-hash its whole history at every step.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import time
from collections.abc import AsyncIterator, Callable
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from nbagent.events.model import Usage, canonical_json
from nbagent.models.tool_calls import ToolCallRequest, parse_tool_calls
from nbagent.retrying import with_retries


class ModelTimeout(TimeoutError):
    """A model call that ran past its deadline (`ModelSettings.timeout`, on the whole call, streamed or not): it was
    cancelled, and is not retried (`is_transient`): a retry would wait as long again on a server that has just shown
    it cannot answer in time, and the person's bound on a call would become (retries + 1) times itself."""


class ModelError(Exception):
    """A model call failed for good (after retries, or at once for a non-transient error)."""

    def __init__(self, message: str, *, retry_count: int = 0, transient: bool = False,
                 error_type: str | None = None) -> None:
        super().__init__(message)
        self.retry_count = retry_count
        self.transient = transient
        self.error_type = error_type


# Read by litellm when it is imported: the price map from its own package, not fetched over the network; no
# telemetry; and no walk of every message to shorten base64 payloads for logs nbagent does not use (6 ms a call at
# 1,000 steps and growing). Set for the import only, unless set already: the environment is left as it was.
_IMPORT_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
               "MAX_BASE64_LENGTH_FOR_LOGGING": "0"}
# Set for the import whatever they were, then put back: litellm's `__init__` calls python-dotenv's `load_dotenv()`
# in its "DEV" mode (the default), which fills the environment from the first `.env` found walking up from the
# working folder (a kernel) or from litellm's own install (a `.venv/` inside a project), so a cloned repository's
# `OPENAI_BASE_URL` would carry the person's key to another server. No dotfile steers the model layer:
# docs/configuration.md, "What nbagent reads". Not python-dotenv's own switch (PYTHON_DOTENV_DISABLED): where the
# import runs in a thread of the kernel, a cell's own `load_dotenv()` during those seconds would load nothing, and
# litellm's is its only call at import (tests/test_surroundings.py plants a `.env` at every level to hold it so).
_NO_DOTENV = {"LITELLM_MODE": "PRODUCTION"}


# what litellm's first call imports beyond `import litellm` (its proxy's file-id helpers, the stream builder's types,
# the openai client and handler): ~0.4 s that a first call would otherwise spend, imported ahead by whoever loads
# the library for a kernel (nbagent/models/process.py, nbagent/ipython/loading.py). Internal names of litellm 1.106.2,
# so each is best-effort. Not its tokenizer: importing that sets TIKTOKEN_CACHE_DIR in os.environ for good.
FIRST_CALL = ("litellm.proxy.openai_files_endpoints.common_utils",
              "litellm.types.litellm_core_utils.streaming_chunk_builder_utils", "litellm.llms.openai.openai",
              "litellm.llms.openai_like.dynamic_config", "openai.resources.chat")


_TABLE = frozenset({"get_model_info", "supports_vision"})
_looked_up: dict[tuple[str, str], str] = {}  # (name, arguments) -> the result's JSON


def library(name: str, **kwargs: Any) -> Any:
    """`litellm.NAME(**kwargs)`: in the kernel's model process when there is one (nbagent/models/process.py), else
    in-process. Only the calls `modelproc.CALLS` lists, with JSON arguments and results."""
    from nbagent.models.process import CALLS, current

    if name not in CALLS:
        raise ValueError(f"not a model library call nbagent makes: {name}")
    process = current()
    if process is not None:
        if name not in _TABLE:
            return process.call(name, **kwargs)
        # a lookup in the process's litellm tables, which nothing can change there (no cell reaches it): asked
        # once per kernel, not once per cell (each is a round trip)
        key = (name, json.dumps(kwargs, sort_keys=True, default=str))
        if key not in _looked_up:
            _looked_up[key] = json.dumps(process.call(name, **kwargs))
        return json.loads(_looked_up[key])  # a copy of its own for each caller (a model's table is ~100 keys)
    value = getattr(import_litellm(), name)(**kwargs)
    return list(value) if name == "encode" else value


def import_litellm() -> ModuleType:
    """litellm, imported on first use (in a kernel's model process, or in plain Python; nbagent/models/process.py)."""
    import sys

    if "litellm" in sys.modules and hasattr(sys.modules["litellm"], "acompletion"):
        return sys.modules["litellm"]
    from nbagent.shadowing import check

    check()  # a litellm.py (or openai/, httpx.py...) in the working folder would run here: refused, in one line
    added = {k: v for k, v in _IMPORT_ENV.items() if k not in os.environ}
    forced = {k: os.environ.get(k) for k in _NO_DOTENV}
    try:
        os.environ.update(added)
        os.environ.update(_NO_DOTENV)
        import litellm
    finally:
        for key, value in {**added, **_NO_DOTENV}.items():  # unless the person set it meanwhile (another cell)
            if os.environ.get(key) == value:
                before = forced.get(key)
                if before is None:
                    del os.environ[key]
                else:
                    os.environ[key] = before
    import logging

    if not os.environ.get("NBAGENT_LITELLM_DEBUG"):
        # litellm's own warnings (its logging worker, cost-map notes) are noise in a notebook; our events
        # record what matters. NBAGENT_LITELLM_DEBUG=1 brings them back.
        logging.getLogger("LiteLLM").setLevel(logging.ERROR)
    litellm.suppress_debug_info = True
    litellm.telemetry = False
    return litellm


class ModelSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str
    api_base: str | None = None
    api_key: SecretStr | None = None
    # seconds the whole call may take (each attempt, from the request to the reply's end, streamed or not: `deadline`);
    # litellm bounds each read by it too. `timeout_setting` is how the person sets it, named when it passes.
    timeout: float = 120.0
    timeout_setting: str = "Agent(timeout=...)"
    max_retries: int = 4
    retry_base: float = 0.5  # seconds; waits 0.5, 1, 2, 4... capped at retry_cap
    retry_cap: float = 20.0
    params: dict[str, Any] = Field(default_factory=dict)  # temperature, max_tokens...


class ModelReply(BaseModel):
    content: str | None = None
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    cost: float | None = None
    latency_ms: float = 0.0
    retry_count: int = 0
    finish_reason: str | None = None
    response: dict[str, Any] = Field(default_factory=dict)


# ------------------------------------------------------------------------------------------- transient


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = getattr(cur, "original_exception", None) or cur.__cause__ or cur.__context__
    return seen


def is_transient(exc: BaseException) -> bool:
    from nbagent.models.base import ModelScriptError

    chain = _chain(exc)
    if any(isinstance(e, ModelScriptError | ModelTimeout) for e in chain):
        return False
    for e in chain:
        if isinstance(e, ConnectionError | TimeoutError):
            return True
        name = type(e).__name__
        if name in ("Timeout", "APITimeoutError", "APIConnectionError", "RateLimitError", "InternalServerError",
                    "ServiceUnavailableError", "BadGatewayError", "TimeoutError", "ConnectError", "ReadTimeout"):
            return True
        status = getattr(e, "status_code", None)
        if isinstance(status, int) and (status in (408, 409, 429) or status >= 500):
            return True
    return False


# ------------------------------------------------------------------------------------------- fingerprint


def sha(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


class Fingerprint:
    """Rolling hash over a run's messages: O(new messages) per call, not O(all messages)."""

    def __init__(self, tools: list[dict[str, Any]], prefix: list[dict[str, Any]]) -> None:
        self.tools_sha = sha(tools)
        self.prefix_sha = sha(prefix)
        self.prefix_len = len(prefix)
        self._own_hashed = 0
        self._rolling = self.prefix_sha

    def of(self, own: list[dict[str, Any]]) -> str:
        if len(own) < self._own_hashed:
            raise ValueError("messages shrank between calls")
        h = self._rolling
        for m in own[self._own_hashed:]:
            h = hashlib.sha256((h + canonical_json(m)).encode("utf-8")).hexdigest()
        self._rolling, self._own_hashed = h, len(own)
        return hashlib.sha256((self.tools_sha + h).encode("utf-8")).hexdigest()


# ------------------------------------------------------------------------------------------- the call


def _response_dict(resp: Any) -> dict[str, Any]:
    data = resp.model_dump() if hasattr(resp, "model_dump") else dict(resp)
    keep = {k: data.get(k) for k in ("id", "model", "created", "object", "system_fingerprint", "usage")}
    keep["choices"] = [
        {"index": c.get("index", 0), "finish_reason": c.get("finish_reason"),
         "message": {k: v for k, v in (c.get("message") or {}).items()
                     if k in ("role", "content", "tool_calls", "reasoning_content") and v is not None}}
        for c in data.get("choices") or []
    ]
    plain: dict[str, Any] = json.loads(json.dumps(keep, default=str))
    return plain


def _process() -> Any:
    from nbagent.models.process import current

    return current()


def via_litellm() -> bool:
    """`NBAGENT_LOCAL_VIA_LITELLM=1` sends the offline models' calls through litellm, as before the direct path."""
    return os.environ.get("NBAGENT_LOCAL_VIA_LITELLM", "").strip().lower() in ("1", "true", "yes", "on")


def _is_local(settings: ModelSettings, metadata: dict[str, Any] | None) -> bool:
    """An offline model's call (`nbagent/...` with its registry key) that can skip litellm."""
    return settings.model.startswith("nbagent/") and metadata is not None and "nbagent_model" in metadata \
        and not via_litellm()


async def complete(
    settings: ModelSettings,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    metadata: dict[str, Any] | None = None,
    on_token: Callable[[str], None] | None = None,
    on_retry: Callable[[int, BaseException], None] | None = None,
) -> ModelReply:
    """One model turn, retried on transient failures; streams text to `on_token` when given.

    The offline models (`nbagent/scripted`, `function`, `replay`) are called directly, without importing
    litellm: `models.provider.local_completion` builds the same response, usage and cost as litellm did with
    our provider, so the recorded `llm_called` events are the same either way (tests/test_offline_path.py);
    `NBAGENT_LOCAL_VIA_LITELLM=1` sends them through litellm. Every other model goes through litellm.
    """
    local = _is_local(settings, metadata)
    litellm: Any = None
    kwargs: dict[str, Any] = {}
    # a kernel's model process takes the call (nbagent/models/process.py); nbagent's own models stay in this process
    process = None if local or settings.model.startswith("nbagent/") else _process()
    if not local:
        if process is None:
            litellm = import_litellm()
        if settings.model.startswith("nbagent/"):
            from nbagent.models.provider import ensure_registered

            ensure_registered()
        kwargs = {
            "model": settings.model, "messages": messages, "timeout": settings.timeout, "num_retries": 0,
            "max_retries": 0, "drop_params": True, **settings.params,
        }
        if tools:
            kwargs["tools"] = tools
            # nbagent's tools are never litellm-proxy MCP tools; without this litellm imports its MCP gateway
            # (mcp's server, starlette, uvicorn, opentelemetry: ~1 s and ~40 MiB) to check on the first call
            kwargs["_skip_mcp_handler"] = True
        if settings.api_base:
            kwargs["api_base"] = settings.api_base
        if settings.api_key is not None:
            kwargs["api_key"] = settings.api_key.get_secret_value()
        if metadata:
            kwargs["metadata"] = metadata
        if on_token is not None:
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}

    started = time.perf_counter()
    missing: list[str] = []
    retries = 0

    def within() -> contextlib.AbstractAsyncContextManager[None]:
        return deadline(settings.timeout, settings.timeout_setting)

    async def attempt(n: int) -> Any:
        nonlocal started
        meta = metadata
        if metadata and "nbagent_turn" in metadata:
            # local models count attempts: a scripted error turn is consumed, the retry gets the next
            meta = {**metadata, "nbagent_turn": metadata["nbagent_turn"] + n - 1}
        started = time.perf_counter()
        if local:
            from nbagent.models.provider import local_completion

            assert meta is not None
            return await local_completion(settings.model, messages, tools, meta, on_token)
        if meta is not None:
            kwargs["metadata"] = meta
        if process is not None:  # again each attempt: one that ended (killed, out of memory) is started again
            return await (_process() or process).complete(kwargs, on_token, within=within)
        async with within():
            resp = await _call(litellm, kwargs, messages, on_token)
        return _response_dict(resp), _cost(litellm, resp, settings.model)

    def first_failed(exc: BaseException) -> None:
        if not local:
            missing.extend(missing_keys(settings))
            if missing:  # litellm may call it a server error (openai: InternalServerError), retried in vain
                raise exc

    try:
        # the retries every model and tool call gets (retrying.py: tenacity's)
        resp, retries = await with_retries(attempt, retries=settings.max_retries, base=settings.retry_base,
                                           cap=settings.retry_cap, transient=is_transient, first_failed=first_failed,
                                           on_retry=on_retry)
    except Exception as exc:
        from nbagent.models.base import ModelScriptError

        script_error = next((e for e in _chain(exc) if isinstance(e, ModelScriptError)), None)
        if script_error is not None:  # our own offline model's message, without litellm's wrapping
            raise ModelError(str(script_error), error_type=type(script_error).__name__) from exc
        if missing:
            raise ModelError(f"model call to {settings.model} failed (not retried): AuthenticationError: no API key: "
                             f"{' or '.join(missing)} is not set; set it where the kernel (or `nbagent run`) starts, "
                             "or pass Agent(api_key=...)", error_type="AuthenticationError") from exc
        transient = is_transient(exc)
        retries = getattr(exc, "retry_count", 0)
        # a provider may echo the key it rejected: scrub it (and other known secrets) before truncating
        from nbagent.models.errors import explained
        from nbagent.secrets.redactor import Redactor

        key = settings.api_key.get_secret_value() if settings.api_key is not None else None
        detail = Redactor([key]).text(explained(exc, settings) or error_message(exc))[:500]
        what = f"after {retries} retr{'y' if retries == 1 else 'ies'}" if transient or retries else "(not retried)"
        name = type(exc).__name__
        raise ModelError(f"model call to {settings.model} failed {what}: {name}" + (f": {detail}" if detail else ""),
                         retry_count=retries, transient=transient, error_type=name) from exc
    latency = (time.perf_counter() - started) * 1000
    response, cost = resp
    choice = (response.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    usage = response.get("usage") or {}
    return ModelReply(
        content=message.get("content"),
        tool_calls=parse_tool_calls(message),
        usage=Usage(prompt_tokens=usage.get("prompt_tokens") or 0,
                    completion_tokens=usage.get("completion_tokens") or 0,
                    total_tokens=usage.get("total_tokens") or 0, **cached_of(usage)),
        cost=cost,
        latency_ms=latency,
        retry_count=retries,
        finish_reason=choice.get("finish_reason"),
        response=response,
    )


def cached_of(usage: dict[str, Any]) -> dict[str, int]:
    """`{"cached_tokens": n}` when the provider read n input tokens from its prompt cache (OpenAI's
    `prompt_tokens_details.cached_tokens`, Anthropic's `cache_read_input_tokens`), else {}: the field is left out
    when there is nothing to say, so usage recorded before caching reads the same."""
    details = usage.get("prompt_tokens_details") or {}
    n = (details.get("cached_tokens") if isinstance(details, dict) else None) or usage.get("cache_read_input_tokens")
    return {"cached_tokens": int(n)} if isinstance(n, int) and n > 0 else {}


# litellm's wrapping of a provider's message: "litellm.BadRequestError: BadRequestError: OpenAIException - ...",
# "litellm.Timeout: APITimeoutError - ..." (class names, repeated, before the part that says what is wrong)
_WRAPPER = re.compile(r"(?:litellm\.)?[A-Z]\w*(?:Error|Exception|Timeout)\s*(?::|\s-)\s*|litellm\.\w+:\s*")


def error_message(exc: BaseException) -> str:
    """The first line of what `exc` says is wrong, without litellm's wrapping (the caller names the class once)."""
    for line in str(exc).splitlines():
        line = line.strip()
        while (wrapper := _WRAPPER.match(line)) is not None and wrapper.end() > 0:
            line = line[wrapper.end():].lstrip()
        if line:
            return line
    return ""


def missing_keys(settings: ModelSettings) -> list[str]:
    """The API-key variables litellm says `settings.model` needs and the environment lacks (`validate_environment`);
    [] when a key is passed. Only `*_API_KEY` names: the other settings litellm lists (a region, a project, Ollama's
    address) have defaults or other sources, and their absence is not what failed."""
    if settings.api_key is not None or settings.params.get("api_key"):
        return []
    try:
        found = library("validate_environment", model=settings.model, api_base=settings.api_base)
    except Exception:
        return []
    return [k for k in found.get("missing_keys") or [] if isinstance(k, str) and k.endswith("_API_KEY")]


@contextlib.asynccontextmanager
async def deadline(seconds: float, setting: str) -> AsyncIterator[None]:
    """The whole of a model call within `seconds`: past them it is cancelled (its stream closed, `_call`; in the
    model process, cancelled there) and fails as a ModelTimeout naming the deadline and `setting`. A read's own
    timeout cannot do this: a server that sends a piece every second never makes one read wait long."""
    scope = asyncio.timeout(seconds)
    try:
        async with scope:
            yield
    except TimeoutError:
        if not scope.expired():
            raise  # a timeout of the call's own (litellm's, on a read): retried as before
        raise ModelTimeout(f"no complete reply within {seconds:g} s, the model call's deadline; a slower model "
                           f"needs a longer one: {setting}") from None


async def _call(litellm: Any, kwargs: dict[str, Any], messages: list[dict[str, Any]],
                on_token: Callable[[str], None] | None,
                rest: Callable[[Any], object] | None = None) -> Any:
    """One litellm call, streamed when there is `on_token`. `rest` (a long-lived loop's: the model process's) is
    handed a stream whose reply is whole (finish reason and usage in), to read to its end after the answer."""
    if on_token is None:
        return await litellm.acompletion(**kwargs)
    stream = await litellm.acompletion(**kwargs)
    chunks = []
    finished = False
    try:
        async for chunk in stream:
            chunks.append(chunk)
            choice = chunk.choices[0] if chunk.choices else None
            if choice is not None and choice.delta.content:
                on_token(choice.delta.content)
            finished = finished or bool(choice is not None and choice.finish_reason)
            if rest is not None and finished and getattr(chunk, "usage", None) is not None:
                rest(stream)  # litellm's end of stream (its logging, ~1 ms) no longer delays the answer
                break
    except BaseException:  # cancelled (the deadline, an interrupt) or failed: the connection is closed now, not
        with contextlib.suppress(Exception):  # whenever the stream is collected, so the server stops sending
            await stream.aclose()
        raise
    if getattr(stream, "received_finish_reason", "unknown") is None:
        # the body ended without a finish chunk: litellm would invent finish_reason "stop" and pass a cut reply
        # off as complete, so this is treated as a dropped connection (and retried)
        raise IncompleteStream(f"the stream ended after {len(chunks)} chunk(s) without a finish reason")
    return litellm.stream_chunk_builder(chunks, messages=messages)


class IncompleteStream(ConnectionError):
    """A streamed reply that stopped before its end (transient: retried)."""


def _cost(litellm: Any, resp: Any, model: str) -> float | None:
    hidden = getattr(resp, "_hidden_params", None) or {}
    cost = hidden.get("response_cost")
    if isinstance(cost, int | float):
        return float(cost)
    try:
        return float(litellm.completion_cost(completion_response=resp, model=model))
    except Exception:
        return None  # a model without a known price: reported as unknown, never as free


def accepts_images(model: str) -> bool:
    """Whether a model takes image parts, as litellm's local table knows it. nbagent's offline models are text
    models; a model litellm does not know is treated as one (the safe side: the image is described)."""
    if not model or model.startswith("nbagent/"):
        return False
    try:
        return bool(library("supports_vision", model=model))
    except Exception:
        return False
