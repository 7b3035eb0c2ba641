"""What a failed model call says when litellm's words would not tell a person what to do.

`explained` gives the line for three failures: a model name whose provider litellm does not know (the provider
named, the nearest one litellm knows, how a model is written), a server that could not be reached (the address
tried and the setting that named it), and a reply litellm could not read (which field, what it held). Everything
here runs in the kernel without litellm: its provider and model tables are read from the files it ships, found
through its installed distribution's metadata (nothing is imported, nothing is run).
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from nbagent.models.reply import ModelSettings

EXAMPLES = "openai/gpt-4o-mini, anthropic/claude-sonnet-4-5 or ollama/llama3.2"
PROVIDERS_URL = "https://docs.litellm.ai/docs/providers"
# the addresses litellm's handlers fall back to, for the providers people most often run locally or name first
DEFAULT_BASES = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com",
                 "ollama": "http://localhost:11434", "ollama_chat": "http://localhost:11434",
                 "mistral": "https://api.mistral.ai/v1", "openrouter": "https://openrouter.ai/api/v1",
                 "groq": "https://api.groq.com/openai/v1"}
# the variables litellm reads for an address, in its order (main.py): for the rest, PROVIDER_API_BASE
BASE_VARIABLES = {"openai": ("OPENAI_BASE_URL", "OPENAI_API_BASE"),
                  "anthropic": ("ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"),
                  "ollama_chat": ("OLLAMA_API_BASE",), "vertex_ai": ("VERTEXAI_API_BASE", "VERTEX_API_BASE"),
                  "watsonx": ("WATSONX_API_BASE", "WATSONX_URL", "WX_URL", "WML_URL")}
# litellm's handler names its provider in its messages: "OpenAIException - Connection error."
_HANDLER = re.compile(r"\b([A-Z][A-Za-z]*)Exception\s+-")
_UNREACHED = re.compile(r"Connection error|Cannot connect to host|Connection refused|Name or service not known|"
                        r"nodename nor servname|No route to host|All connection attempts failed")
_FIELD = re.compile(r"^(\w+)\n\s+Input should be ([^\[\n]+?)\s*\[type=\w+, input_value=([^,\]]+)", re.M)


def explained(exc: BaseException, settings: ModelSettings) -> str | None:
    """The line for `exc` (a model call's failure, whole chain), or None where litellm's own says enough."""
    from nbagent.models.reply import causes

    chain = causes(exc)
    text = "\n".join(str(e) for e in chain)
    if "LLM Provider NOT provided" in text:
        return unknown_provider(settings.model)
    if (unreadable := unreadable_reply(text)) is not None:
        return unreadable
    # litellm calls more than a dropped connection an APIConnectionError (a handler's own failure, an offline
    # model's TypeError): only what says it could not connect names the address
    if not settings.model.startswith("nbagent/") and (
            any(isinstance(e, ConnectionError) or type(e).__name__ in ("ConnectError", "ConnectTimeout")
                for e in chain) or re.search(_UNREACHED, text) is not None):
        return unreachable(settings, text)
    return None


# ------------------------------------------------------------------------------------------------- the provider


@functools.cache
def _shipped(name: str) -> Any:
    """A JSON file litellm ships (its provider list, its model table), or None where it cannot be read."""
    try:
        from importlib.metadata import distribution

        with open(str(distribution("litellm").locate_file(f"litellm/{name}")), encoding="utf-8") as f:
            return json.load(f)
    except Exception:
        return None


def known_providers() -> list[str]:
    """The providers litellm can send a chat request to, from the list it ships."""
    listed = (_shipped("provider_endpoints_support_backup.json") or {}).get("providers") or {}
    return sorted(k for k, v in listed.items() if isinstance(v, dict) and (v.get("endpoints") or {}).get(
        "chat_completions"))


def unknown_provider(model: str) -> str:
    """"'opnai' in opnai/gpt-4o-mini is not a provider litellm knows: did you mean 'openai' (openai/gpt-4o-mini)?
    A model is written provider/name, e.g. ...": the provider, the nearest litellm knows, how to write a model."""
    how = f"A model is written provider/name, e.g. {EXAMPLES} (the providers: {PROVIDERS_URL})"
    provider, slash, name = model.partition("/")
    if not slash:
        table = _shipped("model_prices_and_context_window_backup.json") or {}
        near = difflib.get_close_matches(model, [k for k in table if "/" not in k and k != "sample_spec"], n=1)
        guess = f" (did you mean {near[0]}?)" if near else ""
        return f"litellm cannot tell which provider serves {model!r}{guess}. {how}"
    near = difflib.get_close_matches(provider.lower(), known_providers(), n=1, cutoff=0.6)
    guess = f": did you mean {near[0]!r} ({near[0]}/{name})?" if near else "."
    return f"{provider!r} in {model} is not a provider litellm knows{guess} {how}"


# ------------------------------------------------------------------------------------------------- the address


def shown(url: str) -> str:
    """`url` without what may carry a secret (a user and password, a query, a fragment)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(an address that is not a URL)"
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", "")) if parts.scheme else url.split("?")[0]


def provider_of(model: str, text: str) -> str | None:
    """The provider a call went to: the model's prefix, else the handler litellm's message names."""
    prefix, slash, _ = model.partition("/")
    if slash:
        return prefix.lower()
    handler = _HANDLER.search(text)
    return handler.group(1).lower() if handler else None


def address(settings: ModelSettings, text: str = "") -> tuple[str | None, str]:
    """(the address a call to `settings` goes to, where it came from); the address is None when only litellm's
    handler knows it."""
    if settings.api_base:
        return settings.api_base, "the api_base setting"
    for key in ("api_base", "base_url"):
        given = settings.params.get(key)
        if isinstance(given, str) and given:
            return given, f"model_params' {key}"
    provider = provider_of(settings.model, text)
    if provider is None:
        return None, "litellm's default for the model"
    for variable in BASE_VARIABLES.get(provider, (f"{provider.upper()}_API_BASE",)):
        value = os.environ.get(variable)
        if value:
            return value, f"{variable} in the environment"
    return DEFAULT_BASES.get(provider), f"{provider}'s default address"


def unreachable(settings: ModelSettings, text: str) -> str:
    """"Connection error: nothing answered at http://127.0.0.1:9/v1 (from OPENAI_BASE_URL in the environment)..."""
    url, source = address(settings, text)
    where = f"nothing answered at {shown(url)} (from {source})" if url else f"nothing answered at {source}"
    return f"Connection error: {where}; check that the server runs there, or change that setting to its address"


# ------------------------------------------------------------------------------------------------- the reply


def unreadable_reply(text: str) -> str | None:
    """"the server's reply is not a chat completion litellm can read: its usage has prompt_tokens='abc' (should be a
    valid integer)", for pydantic's validation errors in litellm's parsing of a reply; else None."""
    what = re.search(r"validation errors? for (\w+)", text)
    if what is None:
        return None
    fields = dict.fromkeys(f"{m.group(1)}={m.group(3)} (should be {m.group(2).rstrip(', ')})"
                           for m in _FIELD.finditer(text))
    part = what.group(1).lower()
    return (f"the server's reply is not a chat completion litellm can read: its {part} has "
            + "; ".join(list(fields)[:3]) if fields else
            f"the server's reply is not a chat completion litellm can read (its {part} is malformed)") + \
        "; the server is not fully OpenAI-compatible"
