"""What a model call is taken to have used: never less than nbagent's own count of it.

A provider's usage report is data from a server, and budgets are counted from it (`policy.TreeUsage`). A negative
number would refill a run tree's budget, a missing one would leave it unspent, a huge one would be priced as
such. So each count a server reports is read as a whole number in [0, MAX_TOKENS] (`count_of`), and the runtime
raises it to its own count of what the call sent and received (`floored`, runtime/fitting.py). A report above
nbagent's count is kept: the provider's tokenizer is the one that bills.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from nbagent.events.model import Usage

# no model call is this big (windows are ~10M tokens at most); a larger report is a lie, and capped it still ends
# any budget at once
MAX_TOKENS = 1_000_000_000


def count_of(value: Any) -> int | None:
    """A reported token count as a whole number in [0, MAX_TOKENS] (a fraction rounded up, a numeric string read),
    or None when it is no number at all (null, text, a list, NaN, a bool)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip()) if value.strip() else None
        except ValueError:
            return None
    if isinstance(value, int):
        return min(max(value, 0), MAX_TOKENS)
    if isinstance(value, float) and math.isfinite(value):
        return min(max(math.ceil(value), 0), MAX_TOKENS)
    if isinstance(value, float) and value == math.inf:
        return MAX_TOKENS
    return None


def floored(reported: Usage, *, sent: int, received: int) -> Usage:
    """`reported` with each count in [0, MAX_TOKENS] and at least nbagent's count (`sent` input tokens, `received`
    output tokens). When the floor raised a count, `counted` records nbagent's own numbers, so the record can say
    whose count it is; the provider's words stay in the recorded response."""
    prompt = count_of(reported.prompt_tokens) or 0
    completion = count_of(reported.completion_tokens) or 0
    total = count_of(reported.total_tokens) or 0
    sent, received = min(max(sent, 0), MAX_TOKENS), min(max(received, 0), MAX_TOKENS)
    raised = prompt < sent or completion < received
    prompt, completion = max(prompt, sent), max(completion, received)
    extra = {k: v for k, v in (reported.model_extra or {}).items() if k not in ("cached_tokens", "counted")}
    cached = count_of(getattr(reported, "cached_tokens", None))
    if cached:
        extra["cached_tokens"] = min(cached, prompt)
    if raised:
        extra["counted"] = {"prompt_tokens": sent, "completion_tokens": received}
    return Usage(prompt_tokens=prompt, completion_tokens=completion,
                 total_tokens=max(total, prompt + completion), **extra)


def priced(cost: float | None, reported: Usage, usage: Usage,
           prices: Callable[[], tuple[float | None, float | None]]) -> float | None:
    """The cost recorded for a call litellm priced at `cost` from the `reported` usage, recorded as `usage`: the
    provider's price (cached input at its rate) plus what nbagent's count added, at the model's `prices` (per input
    and output token, asked only when needed). A price litellm made of counts out of range, or one below zero, is
    made again from the counts. Never negative, never infinite: a cost that cannot be known is None, never free."""
    said = (reported.prompt_tokens, reported.completion_tokens)
    kept = tuple(count_of(n) or 0 for n in said)
    sane = cost is not None and math.isfinite(cost) and cost >= 0 and kept == said
    added = (usage.prompt_tokens - kept[0], usage.completion_tokens - kept[1])
    if sane and added == (0, 0):
        return cost
    per_in, per_out = prices()
    if per_in is None or per_out is None:
        return cost if sane else None
    base = cost if sane and cost is not None else kept[0] * per_in + kept[1] * per_out
    return base + added[0] * per_in + added[1] * per_out
