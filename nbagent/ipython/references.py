"""Variables named in a request: `{df}` or `@df` in a `%%agent` body brings a summary of `df` into the context.

The model receives a compact summary (type, shape, dtypes, a head, size; never the whole object; truncation is
stated), as a context message recorded in the run's `context_assembled` event. `{name}` must name a variable:
an unknown one is an error before any model call. `@name` is taken as a reference only when `name` is a
variable (so an e-mail address or a decorator in the text is left alone). `{{` and `}}` are literal braces.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ..tools.kernel import summarize

_BRACED = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
_AT = re.compile(r"(?<![\w.@])@([A-Za-z_][A-Za-z0-9_]*)")


class UnknownVariable(ValueError):
    """`{name}` in a request names no variable of the notebook."""


def expand(prompt: str, namespace: Mapping[str, Any]) -> tuple[str, list[str]]:
    """(the prompt with references written as `name`, the names referenced, in order)."""
    names: list[str] = []

    def braced(m: re.Match[str]) -> str:
        if m.group(0) == "{{":
            return "{"
        if m.group(0) == "}}":
            return "}"
        name = m.group(1)
        if name not in namespace:
            raise UnknownVariable(
                f"%%agent: {{{name}}} is not a variable of this notebook; define it first, or write {{{{{name}}}}} "
                "for literal braces"
            )
        if name not in names:
            names.append(name)
        return f"`{name}`"

    text = _BRACED.sub(braced, prompt)

    def at(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in namespace:
            return m.group(0)
        if name not in names:
            names.append(name)
        return f"`{name}`"

    return _AT.sub(at, text), names


def context_message(names: list[str], namespace: Mapping[str, Any]) -> dict[str, Any] | None:
    if not names:
        return None
    parts = ["Variables of the user's notebook mentioned in the request (summaries, not the whole objects; "
             "use inspect_variable for more):"]
    for name in names:
        parts.append(f"`{name}`: " + json.dumps(summarize(namespace[name]), ensure_ascii=False, default=str))
    return {"role": "user", "content": "\n\n".join(parts)}
