"""The context window: how many tokens a request may hold, and how many it holds.

A `Window` is decided once per run and recorded in the run's options (`options["context"]`), so a re-run or a
replay of the run compacts at the same points and sends the same requests:

- `limit`: the model's input limit in tokens: the person's setting (`context_window`), else litellm's model
  information (`max_input_tokens`), else unknown (None: nothing is compacted until a provider refuses a request
  for its length, and the limit it names is used from then on).
- `share`: compaction starts when a request would pass this share of the limit; `target`: it aims below this one.
- `result_tokens`: the most tokens one tool result takes in a request; the rest stays in the log, behind a
  handle the model can page through (`read_result`).

`Counter` counts with the model's own tokenizer through litellm (`token_counter`, `encode`, `decode`). Loading a
tokenizer costs 40-70 MiB, so a request is first bounded by its UTF-8 size (a BPE token is at least one byte)
and counted exactly only when that bound says it might matter. nbagent's offline models have no tokenizer:
they count four bytes as a token, the same on every machine.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from pydantic import BaseModel, ConfigDict

# offline models, per message: the role and the separators a chat template adds (OpenAI's documented 3, 1 more for
# a name); every request ends with the reply's priming (3)
MESSAGE_OVERHEAD = 4
PRIMING = 3


class Window(BaseModel):
    """The context budget of a run (recorded in its options, so a re-run keeps it)."""

    model_config = ConfigDict(extra="forbid")
    limit: int | None = None
    source: str = "unknown"  # "config", "litellm", "unknown", or "refused" (learned from a provider's refusal)
    share: float = 0.75
    target: float = 0.5
    result_tokens: int = 8_000

    @property
    def active(self) -> bool:
        return self.limit is not None

    def threshold(self) -> int | None:
        return None if self.limit is None else int(self.limit * self.share)

    def aim(self) -> int | None:
        return None if self.limit is None else int(self.limit * self.target)


def result_tokens_for(limit: int | None) -> int:
    """A quarter of the window, at most 8,000 tokens: a few results fit, and one never crowds out the rest."""
    return 8_000 if limit is None else max(200, min(8_000, limit // 4))


def window_for(model: str, setting: int | None, *, offline: bool) -> Window:
    """The window of `model`: the setting if given, else litellm's table (real models only)."""
    if setting:
        return Window(limit=int(setting), source="config", result_tokens=result_tokens_for(int(setting)))
    if offline:
        return Window(limit=None, source="unknown", result_tokens=result_tokens_for(None))
    limit = model_limit(model)
    return Window(limit=limit, source="litellm" if limit else "unknown", result_tokens=result_tokens_for(limit))


def model_limit(model: str) -> int | None:
    """litellm's `max_input_tokens` of `model` (its `max_tokens` for older entries), None when it does not know."""
    from nbagent.models.llm import library

    try:
        info = library("get_model_info", model=model)
    except Exception:
        return None
    for key in ("max_input_tokens", "max_tokens"):
        value = info.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


def price_in(model: str) -> tuple[float | None, float | None]:
    """(dollars per input token, per cached input token) from litellm's table; None where unknown."""
    from nbagent.models.llm import library

    try:
        info = library("get_model_info", model=model)
    except Exception:
        return None, None
    full, cached = info.get("input_cost_per_token"), info.get("cache_read_input_token_cost")
    return (float(full) if isinstance(full, int | float) else None,
            float(cached) if isinstance(cached, int | float) else None)


def prices(model: str) -> tuple[float | None, float | None]:
    """(dollars per input token, per output token) from litellm's table; None where unknown."""
    from nbagent.models.llm import library

    try:
        info = library("get_model_info", model=model)
    except Exception:
        return None, None
    per_in, per_out = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    return (float(per_in) if isinstance(per_in, int | float) else None,
            float(per_out) if isinstance(per_out, int | float) else None)


class Counter:
    """Tokens of messages and texts for one model; counts of messages already seen are kept (by content)."""

    def __init__(self, model: str, *, offline: bool) -> None:
        self.model = model
        self.offline = offline
        self._seen: dict[str, int] = {}

    # ---------------------------------------------------------------- texts

    def text(self, text: str) -> int:
        if self.offline:
            return math.ceil(len(text.encode("utf-8")) / 4)
        if not text:
            return 0
        key = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()
        n = self._seen.get(key)
        if n is None:
            from nbagent.models.llm import library

            n = self._seen[key] = int(library("token_counter", model=self.model, text=text))
        return n

    def head(self, text: str, tokens: int) -> str:
        """The longest start of `text` of at most `tokens` tokens."""
        if len(text.encode("utf-8")) <= tokens:
            return text
        if self.offline:
            return text.encode("utf-8")[:4 * tokens].decode("utf-8", "ignore")
        from nbagent.models.llm import library

        encoded = library("encode", model=self.model, text=text)
        return str(library("decode", model=self.model, tokens=list(encoded)[:tokens]))

    def page(self, text: str, tokens: int, page: int) -> tuple[str, int]:
        """Page `page` (from 1) of `text` cut in pieces of `tokens` tokens, and how many pages there are."""
        if self.offline:
            data = text.encode("utf-8")
            size = 4 * tokens
            pages = max(1, math.ceil(len(data) / size))
            return data[(page - 1) * size:page * size].decode("utf-8", "ignore"), pages
        from nbagent.models.llm import library

        encoded = list(library("encode", model=self.model, text=text))
        pages = max(1, math.ceil(len(encoded) / tokens))
        return str(library("decode", model=self.model, tokens=encoded[(page - 1) * tokens:page * tokens])), pages

    # ---------------------------------------------------------------- requests

    def message(self, message: dict[str, Any]) -> int:
        """A message's tokens as the chat template counts them: litellm's count of it alone, less the reply's
        priming (real models); its text and MESSAGE_OVERHEAD (offline ones)."""
        key = _key(message)
        n = self._seen.get(key)
        if n is None:
            if self.offline:
                n = MESSAGE_OVERHEAD + self.text(_message_text(message))
            else:
                from nbagent.models.llm import library

                n = max(1, int(library("token_counter", model=self.model, messages=[message])) - PRIMING)
            self._seen[key] = n
        return n

    def tools(self, tools: list[dict[str, Any]]) -> int:
        """The tool schemas' tokens: litellm counts them as providers render them (about half their JSON)."""
        if not tools:
            return 0
        key = _key(tools)
        n = self._seen.get(key)
        if n is None:
            if self.offline:
                n = self.text(json.dumps(tools, sort_keys=True))
            else:
                from nbagent.models.llm import library

                n = int(library("token_counter", model=self.model, messages=[], tools=tools))
            self._seen[key] = n
        return n

    def request(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        """The request's input tokens: its messages, its tool schemas, and the reply's priming."""
        return sum(self.message(m) for m in messages) + self.tools(tools) + PRIMING

    @staticmethod
    def estimate(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        """A rough count without a tokenizer (four bytes a token), for what is shown before a call when nothing
        needed the exact count: never used to decide."""
        return math.ceil(Counter.bound(messages, tools) / 4)

    @staticmethod
    def bound(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        """An upper bound of `request` without a tokenizer: every token is at least one byte of the text."""
        size = sum(len(_message_text(m).encode("utf-8")) + MESSAGE_OVERHEAD for m in messages)
        return size + (len(json.dumps(tools, sort_keys=True).encode("utf-8")) if tools else 0) + 3


def _key(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode("utf-8", "replace")).hexdigest()


def _message_text(message: dict[str, Any]) -> str:
    """What a message puts into the prompt, as text: its content (text parts; an image counts as its URL's
    size, generous for a base64 picture), its tool calls, its role."""
    content = message.get("content")
    if isinstance(content, list):
        parts = [p.get("text") or json.dumps(p.get("image_url") or "") for p in content if isinstance(p, dict)]
        content = "\n".join(str(p) for p in parts)
    text = str(message.get("role") or "") + "\n" + (content if isinstance(content, str) else "")
    calls = message.get("tool_calls")
    if calls:
        text += json.dumps(calls, sort_keys=True)
    return text
