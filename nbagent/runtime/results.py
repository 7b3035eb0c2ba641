"""`read_result`: the model reads again, page by page, a tool result that was compacted or cut to fit its context.

A handle names a result by the run's place in its conversation and the call's id (`r3/nb2_0`, compaction.py).
It resolves only within the conversation of the run that calls it (the run and the runs it continues), so a
model cannot read another session's or a forked-away run's results with it. The result comes from the log, as
the tool returned it; a page is `result_tokens` tokens of the run's window (window.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from nbagent.events.levels import Risk
from nbagent.events.state import tool_message
from nbagent.gate.effects import current_call
from nbagent.runtime.window import Counter, Window
from nbagent.store import Store
from nbagent.tools.base import Tool, ToolError

_HANDLE = re.compile(r"r([1-9]\d{0,5})/([A-Za-z0-9_.:-]{1,80})")


def read_result_tool(store: Store, counter: Callable[[], Counter]) -> Tool:
    """The `read_result` tool over `store` (read-only: it changes nothing, so L1 runs it without asking)."""

    def read_result(handle: str, page: int = 1) -> str:
        """Read a tool result that was compacted or cut short to fit the context, one page at a time.

        Args:
            handle: the result's handle, as its note names it (like "r3/nb2_0")
            page: which page to read, from 1
        """
        call = current_call()
        if call is None:
            raise ToolError("read_result runs only as a tool call of a run")
        found = _HANDLE.fullmatch(handle.strip())
        if found is None:
            raise ToolError(f"{handle!r} is not a result handle; handles look like \"r3/nb2_0\" and are named in the "
                            "note that replaced or cut the result")
        chain = _conversation(store, call.run_id)
        position, call_id = int(found.group(1)), found.group(2)
        if position > len(chain):
            raise ToolError(f"no run r{position} in this conversation (it has {len(chain)}); use a handle a note in "
                            "this conversation names")
        state = store.run_state(chain[position - 1])
        step = state.steps.get(call_id)
        if step is None or step.status != "ok":
            raise ToolError(f"no result {handle} in this conversation: r{position} has no completed call {call_id}")
        text = tool_message(call_id, step.result)["content"]  # the text the model was sent, before it was cut
        recorded = store.run_state(call.run_id).options.get("context")
        size = Window.model_validate(recorded).result_tokens if isinstance(recorded, dict) else 8_000
        if not isinstance(page, int) or page < 1:
            raise ToolError(f"page must be 1 or more, got {page!r}")
        shown, pages = counter().page(text, size, page)
        if page > pages:
            raise ToolError(f"{handle} has {pages} page{'s' if pages != 1 else ''} of {size:,} tokens; ask for "
                            f"page 1 to {pages}")
        more = f"; read on with page={page + 1}" if page < pages else "; this is the last page"
        return f"[{handle}, page {page} of {pages}{more}]\n{shown}"

    return Tool(read_result, risk=Risk.READ_ONLY)


def _conversation(store: Store, run_id: str) -> list[str]:
    """The run and the runs it continues, oldest first: `r1` is the first."""
    chain: list[str] = []
    current: str | None = run_id
    while current is not None and current not in chain:
        chain.append(current)
        current = store.run_state(current).previous_run_id
    return list(reversed(chain))
