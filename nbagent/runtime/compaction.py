"""What a request holds once the context is compacted: pure functions of the recorded conversation.

The log always holds the whole conversation: every tool result as the tool returned it, every run of the session.
A request is a *view* of it (`view`), decided by the `context_compacted` events recorded so far
(events.ContextCompacted) and by the run's window (window.py):

- a tool result named by a compaction is sent as a reference: a line that says how big it was, how it began,
  and the handle (`run_id/call_id`) that `read_result` pages through;
- a tool result longer than the window's `result_tokens` is sent as its first page and a line saying how to
  read on (the same handle, page 2);
- a summary stands for the runs it names (the latest summary of the chain wins: it includes the ones before).

Everything here is deterministic, so the same events give the same request, byte for byte: a re-run or a replay
sends what was sent, and a provider's prompt cache sees the same prefix from one call to the next.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from nbagent.events.model import ContextCompacted
from nbagent.runtime.window import Counter, Window

SUMMARY_INTRO = ("[nbagent: a summary of this session's earlier requests, written to keep the conversation within "
                 "the model's context; the full conversation is in the notebook's log]\n")


def handle_of(run_name: str, call_id: str) -> str:
    """`r3/nb2_0`: the call's id in the run's place in its conversation (the third run of it), never a random id,
    so a re-run of the same conversation names its results the same."""
    return f"{run_name}/{call_id}"


def reference(run_name: str, call_id: str, content: str, tokens: int) -> str:
    """What a compacted result is sent as: enough to know what it was, and how to read it again."""
    first = next((line.strip() for line in content.splitlines() if line.strip()), "")[:160]
    return (f"[nbagent: this tool result ({tokens:,} tokens) was compacted to keep the conversation within the "
            f"model's context; it is kept whole in the log. It began: {json.dumps(first, ensure_ascii=False)}. "
            f"Read it again with read_result(handle=\"{handle_of(run_name, call_id)}\", page=1).]")


def clipped(counter: Counter, run_name: str, call_id: str, content: str, tokens: int, limit: int) -> str:
    """A result longer than `limit` tokens: its first page, and how to read on."""
    pages = -(-tokens // limit)
    return (counter.head(content, limit) +
            f"\n[nbagent: this result has {tokens:,} tokens; the first {limit:,} are above ({pages} pages of "
            f"{limit:,}). Read on with read_result(handle=\"{handle_of(run_name, call_id)}\", page=2).]")


# what one tool result may send when no window applies (an offline model without `context_window`): the log keeps
# up to MAX_RESULT_CHARS, the request this much, as before results were sized in tokens
MAX_SENT_CHARS = 50_000


def capped(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with every tool result over MAX_SENT_CHARS cut there, saying so (no window: no tokenizer)."""
    out = messages
    for i, m in enumerate(messages):
        content = m.get("content")
        if m.get("role") == "tool" and isinstance(content, str) and len(content) > MAX_SENT_CHARS:
            if out is messages:
                out = list(messages)
            out[i] = {**m, "content": content[:MAX_SENT_CHARS] + f"… [truncated: the result had {len(content):,} "
                                                                 "characters; ask for less]"}
    return out


class Compactions:
    """The compactions in force for a run: those of its chain's runs and its own, in the order recorded."""

    def __init__(self, recorded: Sequence[ContextCompacted]) -> None:
        self.recorded = list(recorded)
        self.results = {(r.run_id, r.call_id): r.tokens for c in self.recorded for r in c.results}
        self.summary: ContextCompacted | None = next((c for c in reversed(self.recorded) if c.summary is not None),
                                                     None)

    @property
    def summarized(self) -> set[str]:
        return set(self.summary.summarized_runs) if self.summary is not None else set()


def view(system: list[dict[str, Any]], history: list[tuple[str, list[dict[str, Any]]]], run_id: str,
         own: list[dict[str, Any]], compactions: Compactions, window: Window | None,
         counter: Counter | None, names: dict[str, str]) -> list[dict[str, Any]]:
    """The messages a request sends: the system prompt, the history (a summary for the runs it covers), the run's own
    messages; each tool result as recorded, as a reference, or clipped to the window's `result_tokens`."""
    out = list(system)
    if compactions.summary is not None:
        out.append({"role": "user", "content": SUMMARY_INTRO + (compactions.summary.summary or "")})
    skip = compactions.summarized
    for rid, messages in history:
        if rid not in skip:
            out.extend(_sent(names.get(rid, rid), rid, messages, compactions, window, counter))
    out.extend(_sent(names.get(run_id, run_id), run_id, own, compactions, window, counter))
    return out


def _sent(name: str, run_id: str, messages: list[dict[str, Any]], compactions: Compactions, window: Window | None,
          counter: Counter | None) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        if m.get("role") == "tool" and isinstance(m.get("content"), str):
            call_id = str(m.get("tool_call_id"))
            tokens = compactions.results.get((run_id, call_id))
            if tokens is not None:
                m = {**m, "content": reference(name, call_id, m["content"], tokens)}
            elif window is not None and counter is not None and \
                    len(m["content"].encode("utf-8")) > window.result_tokens:
                n = counter.text(m["content"])
                if n > window.result_tokens:
                    m = {**m, "content": clipped(counter, name, call_id, m["content"], n, window.result_tokens)}
        out.append(m)
    return out


def candidates(history: list[tuple[str, list[dict[str, Any]]]], run_id: str, own: list[dict[str, Any]],
               compactions: Compactions) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """The tool results that could become references, oldest first: (earlier ones, the latest turn's), each as
    (run_id, call_id, content). The latest turn's results are what the model asked for just now: taken last."""
    skip = compactions.summarized
    earlier: list[tuple[str, str, str]] = []
    for rid, messages in [*((r, m) for r, m in history if r not in skip), (run_id, own)]:
        for m in messages:
            if m.get("role") == "tool" and isinstance(m.get("content"), str) and \
                    (rid, str(m.get("tool_call_id"))) not in compactions.results:
                earlier.append((rid, str(m.get("tool_call_id")), m["content"]))
    latest_ids = _latest_turn_ids(own)
    latest = [c for c in earlier if c[0] == run_id and c[1] in latest_ids]
    return [c for c in earlier if c not in latest], latest


def _latest_turn_ids(own: list[dict[str, Any]]) -> set[str]:
    for m in reversed(own):
        if m.get("role") == "assistant":
            return {str(c.get("id")) for c in m.get("tool_calls") or []}
    return set()


def transcript(history: list[tuple[str, list[dict[str, Any]]]], compactions: Compactions,
               names: dict[str, str]) -> str:
    """The history as text, for a summary request (references instead of compacted results; the summary so far)."""
    lines = []
    if compactions.summary is not None and compactions.summary.summary:
        lines.append("Summary of the requests before these:\n" + compactions.summary.summary)
    for rid, messages in history:
        if rid in compactions.summarized:
            continue
        for m in _sent(names.get(rid, rid), rid, messages, compactions, None, None):
            lines.append(f"{_who(m)}: {_text(m)}")
    return "\n\n".join(lines)


def extract(history: list[tuple[str, list[dict[str, Any]]]], compactions: Compactions, counter: Counter,
            max_tokens: int) -> str:
    """A summary without a model: each earlier request, the tools it called, its answer; the newest kept first
    when they do not all fit in `max_tokens`."""
    entries = []
    if compactions.summary is not None and compactions.summary.summary:
        entries.append(compactions.summary.summary)
    for rid, messages in history:
        if rid in compactions.summarized:
            continue
        asks = [_text(m) for m in messages if m.get("role") == "user"]
        calls = [f"{c.get('function', {}).get('name')}({_brief(c.get('function', {}).get('arguments'))})"
                 for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
        answers = [m.get("content") for m in messages if m.get("role") == "assistant" and m.get("content")]
        entry = "- Asked: " + (" ".join(asks)[:300] or "(nothing)")
        if calls:
            entry += f"\n  Tools: {', '.join(calls)[:300]}"
        if answers:
            entry += f"\n  Answer: {str(answers[-1])[:400]}"
        entries.append(entry)
    kept: list[str] = []
    used = 0
    for entry in reversed(entries):
        n = counter.text(entry) + 1
        if used + n > max_tokens:
            break
        kept.append(entry)
        used += n
    left = len(entries) - len(kept)
    head = [f"({left} earlier entr{'y' if left == 1 else 'ies'} left out; they are in the log)"] if left else []
    return "\n".join(head + list(reversed(kept)))


def _who(m: dict[str, Any]) -> str:
    return {"user": "Researcher", "assistant": "Assistant", "tool": "Tool result", "system": "System"}.get(
        str(m.get("role")), str(m.get("role")))


def _text(m: dict[str, Any]) -> str:
    content = m.get("content")
    if isinstance(content, list):
        content = " ".join(str(p.get("text") or "(an image)") for p in content if isinstance(p, dict))
    text = str(content or "")
    for c in m.get("tool_calls") or []:
        fn = c.get("function") or {}
        text += f" [calls {fn.get('name')}({_brief(fn.get('arguments'))})]"
    return text


def _brief(arguments: Any) -> str:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return text if len(text) <= 120 else text[:119] + "…"
