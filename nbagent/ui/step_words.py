"""What each step did, as a sentence: "wrote log.md, 16 bytes, +1 line", "ran [4]: printed 3 lines, showed a
figure", "raised KeyError: 'Revenue'", "interrupted after 4.6 s".

Worded once, here, from the call's recorded result (and the diff its plan step was shown with), when the view is
built (`viewstate`); the view carries it as the step's `outcome`, which every rendering shows as it is: the text,
HTML and Markdown records and the run view's JavaScript (labextension/src/run_view/timeline.js). A cell whose
recorded result reports an error or an interrupt (`nbagent.events.outcomes.code_fault`) gets the step status `failed` or
`interrupted`, never `ok`. Tools not worded here keep their generic form (the result's preview). Plain Python.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nbagent.events.outcomes import code_fault

TRACEBACK_LINES = 12  # the end of a cell's traceback the record shows (the log keeps the whole)
TRACEBACK_CHARS = 2_000


def _n(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def _lines(value: Any) -> int:
    text = str(value or "")
    return text.count("\n") + (0 if not text or text.endswith("\n") else 1)


def _clip(value: Any, width: int) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _diff_counts(diff: Any) -> tuple[int, int] | None:
    if not isinstance(diff, str) or not diff:
        return None
    rows = diff.split("\n")
    return (sum(1 for r in rows if r.startswith("+") and not r.startswith("+++")),
            sum(1 for r in rows if r.startswith("-") and not r.startswith("---")))


def _changed(counts: tuple[int, int] | None) -> str:
    if counts is None:
        return ""
    added, removed = counts
    if not removed:
        return f", +{_n(added, 'line', 'lines')}"
    return f", +{added:,} -{_n(removed, 'line', 'lines')}"


def _shown(result: dict[str, Any]) -> str:
    """What a cell showed: "printed 3 lines, showed a figure, its value: 42", or "no output"."""
    parts = []
    if _lines(result.get("stdout")):
        parts.append(f"printed {_n(_lines(result.get('stdout')), 'line', 'lines')}")
    if _lines(result.get("stderr")):
        parts.append(f"wrote {_n(_lines(result.get('stderr')), 'line', 'lines')} to stderr")
    outputs = [o for o in result.get("outputs") or [] if isinstance(o, dict)]
    figures = sum(len(o.get("images") or []) for o in outputs)
    if figures:
        parts.append("showed a figure" if figures == 1 else f"showed {figures} figures")
    displays = sum(1 for o in outputs if o.get("output_type") == "display_data" and not o.get("images"))
    if displays:
        parts.append(f"displayed {_n(displays, 'output', 'outputs')}")
    value = next((o for o in outputs if o.get("output_type") == "execute_result"), None)
    if value is not None and not value.get("images") and isinstance(value.get("text"), str):
        parts.append(f"its value: {_clip(value['text'], 60)}")
    return ", ".join(parts) or "no output"


def _cell(verb: str) -> Callable[[dict[str, Any], Any], str]:
    def said(r: dict[str, Any], plan: Any) -> str:
        count = r.get("execution_count")
        return f"{verb}{f' [{count}]' if isinstance(count, int) else ''}: {_shown(r)}"
    return said


def _read(r: dict[str, Any], plan: Any) -> str:
    where = f"lines {r['lines']}" if isinstance(r.get("lines"), str) else \
        f"bytes {r['bytes']}" if isinstance(r.get("bytes"), str) else ""
    return f"read {r.get('path', 'a file')}" + (f", {where}" if where else "") + (", cut" if r.get("truncated") else "")


def _listed(r: dict[str, Any], plan: Any) -> str:
    entries = [e for e in r.get("entries") or [] if isinstance(e, dict)]
    folders = sum(1 for e in entries if e.get("type") == "folder")
    files = len(entries) - folders
    what = ", ".join(x for x in (_n(files, "file", "files") if files or not folders else "",
                                 _n(folders, "folder", "folders") if folders else "") if x)
    return f"listed {r.get('folder', '.')}: {what}" + (", more not listed" if r.get("truncated") else "")


def _searched(r: dict[str, Any], plan: Any) -> str:
    found = r.get("matches")
    matches: list[Any] = found if isinstance(found, list) else []
    files = {m.get("path") for m in matches if isinstance(m, dict)}
    searched = r.get("files_searched")
    return (f"found {_n(len(matches), 'match', 'matches')}"
            + (f" in {_n(len(files), 'file', 'files')}" if files else "")
            + (f", {_n(searched, 'file', 'files')} searched" if isinstance(searched, int) else "")
            + (", cut short" if r.get("truncated") else ""))


def _file_change(key: str, verb: str) -> Callable[[dict[str, Any], Any], str]:
    def said(r: dict[str, Any], plan: Any) -> str:
        size = r.get("bytes")
        line = f"{verb} {r.get(key)}" + (f", {_n(size, 'byte', 'bytes')}" if isinstance(size, int) else "")
        diff = getattr(plan, "diff", None) or getattr(plan, "preview", None)
        if key == "deleted":
            return line
        return line + _changed(_diff_counts(diff))
    return said


def _metadata(r: dict[str, Any], plan: Any) -> str:
    bits = [_n(r["size"], "byte", "bytes") if isinstance(r.get("size"), int) else "", str(r.get("kind") or ""),
            _n(r["lines"], "line", "lines") if isinstance(r.get("lines"), int) else ""]
    return f"looked at {r.get('path', 'a file')}: " + ", ".join(b for b in bits if b)


def _cells(r: dict[str, Any], plan: Any) -> str:
    rows = [c for c in r.get("cells") or [] if isinstance(c, dict)]
    mine = sum(1 for c in rows if str(c.get("written_by", "")).startswith("agent"))
    return f"listed {_n(len(rows), 'cell', 'cells')}" + (f", {mine} by the agent" if mine else "")


def _inserted(r: dict[str, Any], plan: Any) -> str:
    return "inserted a cell below the request" + ("" if r.get("sent_to_frontend", True) else " (no front end saw it)")


SAID: Mapping[str, Callable[[dict[str, Any], Any], str]] = {
    "run_cell": _cell("ran"), "replace_cell": _cell("replaced and ran"), "run_python": _cell("ran the code"),
    "read_file": _read, "list_files": _listed, "search_content": _searched, "get_file_metadata": _metadata,
    "create_file": _file_change("created", "created"), "write_file": _file_change("written", "wrote"),
    "delete_file": _file_change("deleted", "deleted"), "list_cells": _cells, "insert_code_cell": _inserted,
}


def outcome(tool: str | None, result: Any, plan_step: Any = None, duration_ms: float | None = None
            ) -> tuple[str, str | None]:
    """(status, sentence) of a completed call: `failed`/`interrupted` for a cell whose result reports so, else
    `ok`; the sentence is "" for a tool not worded here (its result's preview is its generic form)."""
    fault = code_fault(tool, result)
    if fault is not None:
        return ("interrupted" if fault.kind == "interrupted" else "failed"), fault.sentence(duration_ms)
    said = SAID.get(str(tool))
    if said is None or not isinstance(result, dict):
        return "ok", ""
    try:
        return "ok", said(result, plan_step)
    except (TypeError, ValueError, KeyError, AttributeError):  # a result of another shape (an older nbagent's)
        return "ok", ""


def said_step(step: dict[str, Any], result: Any, plan_steps: Mapping[str, Any]) -> None:
    """Set a completed tool step's `status` and `outcome` (and, for a cell that failed, `detail` and the end of its
    `traceback`) from its recorded result."""
    status, sentence = outcome(step.get("tool"), result, plan_steps.get(str(step.get("call_id"))),
                               step.get("duration_ms"))
    step["status"] = status
    if sentence:
        step["outcome"] = sentence
    if status == "ok" or not isinstance(result, dict):
        return
    step["detail"] = _clip(result.get("error") or "", 400)
    trace = result.get("traceback")
    if isinstance(trace, str) and trace.strip():
        tail = "\n".join(trace.rstrip().split("\n")[-TRACEBACK_LINES:])
        step["traceback"] = tail[-TRACEBACK_CHARS:]


__all__ = ["SAID", "outcome", "said_step"]
