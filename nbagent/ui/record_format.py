"""The small formatters every rendering of a run shares (HTML, text, Markdown, the command line): escaping,
clipping, durations, costs, counts, times, a call's arguments. Apart from `record_words`, which words the sentences
from them, so each can be read in one sitting."""

from __future__ import annotations

import html
import json
from datetime import datetime
from typing import Any

from nbagent.events.outcomes import duration

LONG_TEXT_CHARS = 300  # a longer result or thinking text is collapsed


LONG_TEXT_LINES = 6


def esc(value: Any) -> str:
    """Text made safe to place in HTML (attributes too)."""
    return html.escape("" if value is None else str(value), quote=True)


def fmt_ms(ms: Any) -> str:
    """A duration as every record writes it (one rule: outcomes.duration, which a step's outcome uses too)."""
    return "" if ms is None else duration(ms)


NOMINAL_NOTE = "nominal: an offline model's made-up prices, so cost tracking can be tried; no money was spent"


def fmt_cost(cost: Any, nominal: bool = False) -> str:
    """A dollar amount; `nominal` (an offline model) says so beside it, so it never reads as money spent."""
    if cost is None:
        return "cost unknown"
    cost = float(cost)
    if cost == 0:
        text = "$0"
    elif cost < 0.01:
        text = f"${cost:.2g}" if cost >= 0.0001 else f"${cost:.1e}"
    else:
        text = f"${cost:,.2f}"
    return f"{text} nominal" if nominal else text


def plural(n: Any, one: str, many: str) -> str:
    n = int(n or 0)
    return f"{n} {one if n == 1 else many}"


def fmt_tokens(n: Any) -> str:
    return f"{int(n or 0):,}"


def fmt_ts(ts: Any) -> str:
    if not ts:
        return ""
    try:
        t = datetime.fromisoformat(str(ts).replace("Z", "+00:00"))
    except ValueError:
        return str(ts)
    return t.strftime("%Y-%m-%d %H:%M:%S") + (" UTC" if t.utcoffset() is not None and not t.utcoffset() else "")


def short_id(run_id: Any) -> str:
    return str(run_id or "")[:12]


def clip(text: str, n: int) -> str:
    """One line of at most `n` characters, "…" where it was cut."""
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def json_text(value: Any, indent: int | None = None) -> str:
    """A value as JSON text, or its repr when it has none."""
    try:
        return json.dumps(value, ensure_ascii=False, indent=indent, default=str)
    except (TypeError, ValueError):
        return repr(value)


def is_long(text: str) -> bool:
    """Whether a text is collapsed behind a disclosure rather than shown whole."""
    return len(text) > LONG_TEXT_CHARS or text.count("\n") >= LONG_TEXT_LINES


def arguments_of(step: dict[str, Any]) -> Any:
    """A step's arguments in the order the model sent them (`arg_keys`: the log's JSON has its keys sorted)."""
    args, keys = step.get("arguments"), step.get("arg_keys")
    if not isinstance(args, dict) or not isinstance(keys, list):
        return args
    rank = {str(k): i for i, k in enumerate(keys)}
    return dict(sorted(args.items(), key=lambda kv: rank.get(kv[0], len(rank))))


def format_args(arguments: Any, width: int = 60) -> str:
    """`path="a.csv", depth=2`: each value as compact JSON, clipped."""
    if not isinstance(arguments, dict):
        return clip(json_text(arguments), width)
    return ", ".join(f"{k}={clip(json_text(v), width)}" for k, v in arguments.items())


def args_are_long(arguments: Any) -> bool:
    """Whether a call's arguments wrap past one line (their whole text then goes behind "all arguments")."""
    return len(json_text(arguments)) > 120 or any(
        isinstance(v, str) and ("\n" in v or len(v) > 60) for v in (arguments or {}).values()
    ) if isinstance(arguments, dict) else len(json_text(arguments)) > 120


def upper_first(text: str) -> str:
    """The text with its first letter capitalised (a sentence made from words that start lower case)."""
    return text[:1].upper() + text[1:]


def looks_like_diff(text: str) -> bool:
    """Whether a preview is a unified diff (shown with its lines marked)."""
    return text.startswith(("--- ", "diff ", "@@")) or "\n@@ " in text


def indented(text: str, prefix: str = "    ") -> str:
    """Every line of `text` behind `prefix`."""
    return "\n".join(prefix + line for line in str(text).split("\n"))
