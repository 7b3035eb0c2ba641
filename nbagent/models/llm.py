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

import contextlib
import json
import os
import re
import time
from collections.abc import Callable
from typing import Any

from nbagent.events.model import Usage
from nbagent.models.library import import_litellm
from nbagent.models.reply import (
    ModelError,
    ModelReply,
    ModelSettings,
    causes,
    is_transient,
)
from nbagent.models.stream import call, cost_of, deadline, response_dict
from nbagent.models.tool_calls import parse_tool_calls
from nbagent.retrying import with_retries

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


# ------------------------------------------------------------------------------------------- the call


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
            resp = await call(litellm, kwargs, messages, on_token)
        return response_dict(resp), cost_of(litellm, resp, settings.model)

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

        script_error = next((e for e in causes(exc) if isinstance(e, ModelScriptError)), None)
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


def accepts_images(model: str) -> bool:
    """Whether a model takes image parts, as litellm's local table knows it. nbagent's offline models are text
    models; a model litellm does not know is treated as one (the safe side: the image is described)."""
    if not model or model.startswith("nbagent/"):
        return False
    try:
        return bool(library("supports_vision", model=model))
    except Exception:
        return False
