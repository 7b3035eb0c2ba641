"""`run_cell`: the agent's code runs as a notebook cell would, on the kernel's main thread, through IPython.

`run_python` (tools/kernel.py) runs code in a thread with stdout redirected for the whole process; here the code
goes through `shell.run_cell_async(store_history=True)`, so execution counts, `In`/`Out`, magics, display hooks and
rich reprs work as for a person's cell, and nothing process-wide is replaced (no sys.stdout swap, no thread, no
switch interval). Its outputs are published on IOPub under a new parent message id M (ipykernel's
`set_thread_parent`, inside a copied contextvars context, so no other output is re-parented); the model gets what
the cell showed, read through ipykernel's hooks (display publisher hooks on the main thread, stream hooks in the
IOPub thread), filtered by parent M: a print from another thread has its own parent and is not in it. The same
hooks redact what the cell shows before it leaves the kernel (cell_redaction.py).

Before running, the comm `nbagent.cells` carries the cell to a front end, as `insert_code_cell` does:

    {"after_cell_id": <the %%agent cell>, "source": "# nbagent: run by run R: ...\\n<code>\\n",
     "metadata": {"nbagent": {run_id, index, call_id, approval_event_id, plan_id, grant_id, source_sha256,
                              "ran": true}},
     "ran": true, "msg_id": M, "cell_id": <the new cell's id>, "execution_count": n}

A front end inserts that cell and puts into it every IOPub message whose parent msg_id is M (stream,
display_data, update_display_data, clear_output, execute_result, error), with `execution_count` n. The tool's
result (in the log) holds the same outputs as text, for `nbagent run` to write the cell into the executed notebook.

An interrupt (SIGINT) while the code runs stops it like a person's cell: KeyboardInterrupt in synchronous code,
cancellation while it awaits; the result says `interrupted`. A cell that raised has `error` as the kernel reports it,
`"{ename}: {evalue}"`: nbagent/events/outcomes.py reads both (the step is not ok, the run ends completed_with_errors).
"""

from __future__ import annotations

import asyncio
import contextvars
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from nbagent.events.levels import Risk
from nbagent.ipython.cells import code_preview, send
from nbagent.tools.base import Tool, time_limit
from nbagent.tools.cell_text import source_digest

TOOL = "run_cell"
MAX_TEXT = 20_000  # each text of the result (stdout, stderr, an output, the traceback)
MAX_OUTPUTS = 20
RESULT_BUDGET = 45_000  # characters of the result's JSON (the runtime cuts a result over 50,000 into a string)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def cell_source(code: str, run_id: str | None, explanation: str = "") -> str:
    """The cell as run and shown: a header naming the run, then the code (cells.py's form, said as run)."""
    about = " ".join(str(explanation or "").split())
    return f"# nbagent: run by run {run_id}" + (f": {about}" if about else "") + "\n" + str(code).rstrip() + "\n"


def _note(total: int, shown: int) -> str:
    return f"{total:,} characters; the first {shown:,} shown"


class _Text:
    """A text as captured: its first MAX_TEXT characters (never more held) and its whole length."""

    def __init__(self, text: str = "") -> None:
        self.head, self.total = "", 0
        self.add(text)

    def add(self, text: str) -> None:
        if len(self.head) < MAX_TEXT:
            self.head += text[:MAX_TEXT - len(self.head)]
        self.total += len(text)

    def put(self, out: dict[str, Any], key: str, limit: int) -> None:
        """`out[key]`, clipped to `limit`, and `out[key + "_truncated"]` when anything is left out."""
        out[key] = self.head[:limit]
        if self.total > len(out[key]):
            out[f"{key}_truncated"] = _note(self.total, len(out[key]))


def _bundle(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """One output bundle as the model reads it: text/plain, else HTML made text, and each image described (its
    bytes stay in the notebook's output: a text model could not read them, and the log would hold them)."""
    from nbagent.ipython.outputs import IMAGE_TYPES, read_image

    out: dict[str, Any] = {"output_type": kind, "mimes": sorted(data)}
    text = data.get("text/plain")
    if not isinstance(text, str) and isinstance(data.get("text/html"), str):
        html = data["text/html"]
        try:
            from bs4 import BeautifulSoup

            text = BeautifulSoup(html[:1_000_000], "html.parser").get_text(" ", strip=True)
        except Exception:  # no bs4 here: say what there was
            text = f"HTML output ({len(html):,} chars)"
    if isinstance(text, str):
        out["text"] = _Text(text)
    read = [d for m in IMAGE_TYPES if m in data and (d := read_image(m, data[m])) is not None]
    if read:
        out["images"] = [d.describe(None) + (f" (not sent: {d.why_not})" if d.why_not else "") for d in read]
        out["_raw"] = read[:1]  # the image a model that takes images is sent (one per output: its first type)
    return out


MAX_SENT = 4  # images of one cell sent to a model that takes images (the rest are described)


def keep_images(result: dict[str, Any], put: Callable[[bytes], str] | None) -> None:
    """Take the images' bytes out of the result (the log keeps no image bytes): each readable image, up to MAX_SENT,
    stored with `put` (the store's blobs) and named in `images_for_model`, which the runtime sends to a model that
    takes images as image parts after the tool's result (runtime/cell_images.py); other models read the
    descriptions."""
    sent: list[dict[str, Any]] = []
    left = 0
    for o in result.get("outputs") or []:
        for image in o.pop("_raw", []):
            if image.data is None:
                continue
            if put is None or len(sent) >= MAX_SENT:
                left += 1
                continue
            try:
                sha = put(image.data)
            except Exception:  # a store that cannot take it: the image stays described
                left += 1
                continue
            sent.append({"sha256": sha, "mime": image.mime, "about": image.describe(result.get("execution_count"))})
    if sent:
        result["images_for_model"] = sent
    if left:
        result["images_not_sent"] = f"{left} more image(s) described, not sent"


class _Capture:
    """What the cell with parent M shows, collected through ipykernel's hooks, never by redirection."""

    def __init__(self, msg_id: str) -> None:
        self.msg_id = msg_id
        self.streams: dict[str, _Text] = {"stdout": _Text(), "stderr": _Text()}
        self.outputs: list[dict[str, Any]] = []
        self.dropped = 0

    def _ours(self, msg: dict[str, Any]) -> bool:
        return bool((msg.get("parent_header") or {}).get("msg_id") == self.msg_id)

    def stream(self, msg: dict[str, Any]) -> dict[str, Any]:  # runs in the IOPub thread, at flush time
        if self._ours(msg):
            content = msg.get("content") or {}
            self.streams.setdefault(str(content.get("name", "stdout")), _Text()).add(str(content.get("text", "")))
        return msg

    def display(self, msg: dict[str, Any]) -> dict[str, Any]:  # the main thread, as the cell displays
        if self._ours(msg):
            kind = (msg.get("header") or {}).get("msg_type", "display_data")
            if kind == "clear_output":
                self.outputs.clear()
                self.streams = {"stdout": _Text(), "stderr": _Text()}
                return msg
            content = msg.get("content") or {}
            display_id = (content.get("transient") or {}).get("display_id")
            bundle = _bundle(kind, content.get("data") or {})
            if display_id:
                bundle["display_id"] = display_id
            if kind == "execute_result":
                bundle["execution_count"] = content.get("execution_count")
            if kind == "update_display_data":  # as a front end applies it: the output shown under that id changes
                for i, o in enumerate(self.outputs):
                    if o.get("display_id") == display_id:
                        self.outputs[i] = {**bundle, "output_type": o["output_type"]}
            elif len(self.outputs) < MAX_OUTPUTS:
                self.outputs.append(bundle)
            else:
                self.dropped += 1
        return msg


def _assembled(parts: dict[str, Any], limit: int) -> dict[str, Any]:
    """The result with every text clipped to `limit` characters."""
    out = {k: v for k, v in parts.items() if k not in ("stdout", "stderr", "traceback", "outputs")}
    for key in ("stdout", "stderr", "traceback"):
        if key in parts:
            parts[key].put(out, key, limit)
    if parts.get("outputs"):
        out["outputs"] = []
        for o in parts["outputs"]:
            shown = {k: v for k, v in o.items() if k != "text"}
            if "text" in o:
                o["text"].put(shown, "text", limit)
            out["outputs"].append(shown)
    return out


def fitted(parts: dict[str, Any], redact: Callable[[Any], Any]) -> dict[str, Any]:
    """The result, redacted, within RESULT_BUDGET characters of JSON: over it, every text is cut shorter (the
    runtime would otherwise cut the whole JSON into a string, losing its structure)."""
    import json

    out: dict[str, Any] = {}
    for limit in (MAX_TEXT, 8_000, 3_000, 1_000, 300, 0):
        out = redact(_assembled(parts, limit))
        if len(json.dumps(out, ensure_ascii=False, default=str)) <= RESULT_BUDGET:
            break
    return out


def _in_io_thread(stream: Any, fn: Callable[[], Any]) -> None:
    """Run `fn` in the IOPub thread (where stream hooks are called) and wait for it."""
    pub = getattr(stream, "pub_thread", None)
    if pub is None or not getattr(getattr(pub, "thread", None), "is_alive", lambda: False)():
        fn()
        return
    done = threading.Event()

    def step() -> None:
        try:
            fn()
        finally:
            done.set()

    pub.schedule(step)
    done.wait(5.0)


def _parent(shell: Any, msg_id: str, cell_id: str, source: str) -> dict[str, Any]:
    """A synthetic execute_request for the cell: the current request's session and user, a new msg id."""
    now = shell.get_parent() if hasattr(shell, "get_parent") else {}
    header = dict((now or {}).get("header") or now or {})
    header.update(msg_id=msg_id, msg_type="execute_request", date=datetime.now(UTC).isoformat())
    for key, default in (("session", "nbagent"), ("username", "nbagent"), ("version", "5.3")):
        header.setdefault(key, default)
    return {"header": header, "msg_id": msg_id, "msg_type": "execute_request", "parent_header": {},
            "metadata": {"cellId": cell_id, "nbagent": True}, "content": {"code": source, "silent": False}}


def _interruptible(task: asyncio.Task[Any], marker: Any, run_code: Any,
                   said: dict[str, bool]) -> Callable[[int, FrameType | None], None]:
    """A SIGINT handler for while the cell runs: in its own synchronous code (an IPython `run_code` frame above
    the interrupted one, below this tool's), KeyboardInterrupt, which IPython shows as the cell's error, as for a
    person's cell; anywhere else (the loop waits, the code awaits) the cell's task is cancelled."""
    loop = asyncio.get_running_loop()

    def handler(signum: int, frame: FrameType | None) -> None:
        said["signalled"] = True
        seen_run_code = False
        f = frame
        while f is not None:
            if f.f_code is run_code:
                seen_run_code = True
            elif f.f_code is marker:
                if seen_run_code:
                    raise KeyboardInterrupt
                break
            f = f.f_back
        said["interrupted"] = True
        loop.call_soon_threadsafe(task.cancel)

    return handler


async def _execute(shell: Any, source: str, parent: dict[str, Any], cell_id: str,
                   ran: Callable[[], None] | None = None) -> Any:
    """Runs inside the copied context: outputs of this task (and only of it) go to parent M. `ran` is called once
    the code ran, before the hooks that run after a cell (where an error would have been shown)."""
    tokens = shell.set_thread_parent(parent) if hasattr(shell, "set_thread_parent") else ()
    try:
        transformed, problem = source, None
        try:  # as ipykernel does: IPython takes the transformed cell, or the error transforming it
            transformed = shell.transform_cell(source)
        except Exception:
            problem = sys.exc_info()
        result = None
        try:
            result = await shell.run_cell_async(source, store_history=True, silent=False, cell_id=cell_id,
                                                transformed_cell=transformed, preprocessing_exc_tuple=problem)
        finally:  # what ipykernel triggers after a cell (run_cell_async does not): inline figures shown here, under M
            if ran is not None:
                ran()
            shell.events.trigger("post_execute")
            shell.events.trigger("post_run_cell", result)
        return result
    finally:
        for stream in (sys.stdout, sys.stderr):
            if hasattr(stream, "flush"):
                stream.flush()
        if tokens:
            shell.reset_thread_parent(tokens)


class _Watchdog:
    """Stops the cell when the run's time limit for a tool call is near, as the person's ■ does: a SIGINT to the
    main thread, handled by `_interruptible` (KeyboardInterrupt in synchronous code, which no `asyncio.wait_for`
    can stop since it blocks the loop; cancellation while it awaits). It fires a little before the runtime's own
    limit, so the cell's result says what happened rather than the call failing as timed out."""

    def __init__(self, limit: float, said: dict[str, bool]) -> None:
        self.said, self.lock, self.armed = said, threading.Lock(), True
        self.timer = threading.Timer(max(limit * 0.9, limit - 1.0), self._fire)
        self.timer.daemon = True

    def start(self) -> None:
        self.timer.start()

    def _fire(self) -> None:
        with self.lock:
            if self.armed:
                self.said["timed_out"] = True
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    def stop(self) -> None:
        with self.lock:
            self.armed = False
        self.timer.cancel()
        for _ in range(1000):  # a SIGINT sent just as the cell ended: let our handler take it (it does at once)
            if not self.said.get("timed_out") or self.said.get("signalled"):
                break
            time.sleep(0.001)


async def run_in_shell(shell: Any, source: str, cell_id: str, msg_id: str) -> dict[str, Any]:
    """Run `source` as a cell; what it showed, its texts as captured (`fitted` makes it the model's result).

    What it shows leaves the kernel redacted (cell_redaction.py): the same hooks, after the capture's."""
    from nbagent.ipython.cell_redaction import CellRedaction, Outlet
    from nbagent.secrets.redactor import Redactor

    capture = _Capture(msg_id)
    now = shell.get_parent() if hasattr(shell, "get_parent") else {}
    request = dict((now or {}).get("header") or now or {}).get("msg_id")  # the %%agent cell's request
    redaction = CellRedaction(Redactor(), msg_id, streams_of=(request,))
    streams: list[Any] = [s for s in (sys.stdout, sys.stderr) if hasattr(s, "register_hook")]
    outlet = Outlet(shell, streams, redaction, _in_io_thread)
    for s in streams:
        _in_io_thread(s, lambda s=s: (s.register_hook(capture.stream), s.register_hook(redaction.stream)))  # type: ignore[misc]
    pub: Any = getattr(shell, "display_pub", None)
    hooked = hasattr(pub, "register_hook")
    if hooked:
        pub.register_hook(capture.display)
        pub.register_hook(outlet.display)
    # the cell's value as ipykernel's displayhook sends it (formatted once, under M: a repr that raises shows its
    # traceback in the cell, as for a person's); an older ipykernel without the hook: formatted again below
    hook: Any = getattr(shell, "displayhook", None)
    valued = hasattr(hook, "register_hook")
    if valued:
        hook.register_hook(capture.display)
        hook.register_hook(outlet.display)
    count = shell.execution_count  # IPython counts a cell when it starts: the %%agent cell took the one before
    # ipykernel fails the request whose displayhook showed a traceback (a repr that raised): the agent's cell's
    # belongs to the agent's cell (its result says it), not to the %%agent cell around it
    flagged = getattr(shell, "_last_traceback_during_displayhook", None)
    traceback_before = getattr(shell, "_last_traceback", None)  # the %%agent cell's, put back after
    parent = _parent(shell, msg_id, cell_id, source)

    def ran() -> None:  # ipykernel sent an error for the cell (it sets _last_traceback after sending one)
        stb = getattr(shell, "_last_traceback", None)
        if stb is not traceback_before:
            outlet.error_shown(getattr(sys, "last_value", None), stb)

    ctx = contextvars.copy_context()
    task = asyncio.get_running_loop().create_task(_execute(shell, source, parent, cell_id, ran), context=ctx)
    main = threading.current_thread() is threading.main_thread()
    old = signal.getsignal(signal.SIGINT) if main else None
    said: dict[str, bool] = {}  # the handler's word that SIGINT came (a C Task takes no attributes)
    if main:
        signal.signal(signal.SIGINT, _interruptible(task, _execute.__code__, type(shell).run_code.__code__, said))
    limit = time_limit()
    watchdog = _Watchdog(limit, said) if main and limit else None
    result: Any = None
    try:
        if watchdog is not None:
            watchdog.start()
        result = await task
    except asyncio.CancelledError:
        if not said.get("interrupted"):
            raise
    finally:
        if watchdog is not None:
            watchdog.stop()  # no SIGINT from it after this, and one it sent has been handled
        if main:  # (None: a handler set outside Python; Python's own is the closest to put back)
            signal.signal(signal.SIGINT, old if old is not None else signal.default_int_handler)
        for h in [h for h, on in ((pub, hooked), (hook, valued)) if on]:
            h.unregister_hook(capture.display)
            h.unregister_hook(outlet.display)
        for s in streams:
            if hasattr(s, "flush"):
                s.flush()

        def unhook() -> None:  # in one step of the IOPub thread: no text comes between the last hook and the rest
            for s in streams:
                s.unregister_hook(capture.stream)
                s.unregister_hook(redaction.stream)
            outlet.send_held()

        if streams:
            _in_io_thread(streams[0], unhook)
        outlet.correct(parent)
    display_failed = False
    if flagged is not None:
        display_failed = bool(getattr(shell, "_last_traceback_during_displayhook", False)) and not flagged
        shell._last_traceback_during_displayhook = flagged
    out: dict[str, Any] = {"ran": True, "cell_id": cell_id, "msg_id": msg_id, "execution_count": count,
                           "stdout": capture.streams.get("stdout", _Text()),
                           "stderr": capture.streams.get("stderr", _Text())}
    outputs = list(capture.outputs)
    value = getattr(result, "result", None)
    if value is not None and not valued:
        try:
            data, _ = shell.display_formatter.format(value)
        except Exception as exc:
            data = {"text/plain": f"<{type(value).__name__}: repr failed: {type(exc).__name__}>"}
        outputs.append({**_bundle("execute_result", data), "execution_count": count})
    if outputs:
        out["outputs"] = outputs
    if any("images" in o for o in outputs):
        out["images_note"] = ("a model that takes images is sent them after this result; others read these "
                              f"descriptions (a request naming {{Out[{count}]}} sends them too)")
    if display_failed:
        out["display_error"] = "showing the cell's value raised (a _repr_*_ method): its traceback is in the cell"
    if capture.dropped:
        out["outputs_dropped"] = f"{capture.dropped} more outputs not shown"
    error = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
    stb = getattr(shell, "_last_traceback", None)
    if hasattr(shell, "_last_traceback"):
        shell._last_traceback = traceback_before
    if result is None or isinstance(error, KeyboardInterrupt | asyncio.CancelledError):
        out["interrupted"] = True
        how = (f"its time limit passed ({limit:g} s, the run's tool_timeout)" if said.get("timed_out")
               else "the kernel was interrupted" if said.get("interrupted") or isinstance(error, KeyboardInterrupt)
               else "its task was cancelled")
        out["error"] = f"{type(error or asyncio.CancelledError()).__name__}: the cell was stopped: {how}; the state " \
                       "it set before that remains"
    elif error is not None:
        message = str(error)
        out["error"] = f"{type(error).__name__}: {message[:2_000]}" + ("…" if len(message) > 2_000 else "")
    if error is not None:
        out["traceback"] = _Text(_ANSI.sub("", "\n".join(stb) if isinstance(stb, list) else ""))
    return out


def run_cell_tool(shell: Any, where: Callable[[], tuple[str | None, str | None]], registry: Any = None,
                  put_image: Callable[[bytes], str] | None = None, reruns: Any = None) -> Tool:
    """The tool, bound to the shell and to the host's current cell and run (`where() -> (cell_id, run_id)`); each
    cell it writes is recorded in `registry` (agent_cells.Registry), for list_cells, replace_cell and undo. Before a
    run's first cell, the front end is told which cells of the `%%agent` cell's earlier runs it replaces (`reruns`,
    rerun.Reruns)."""
    counter: dict[str, int] = {}

    async def run_cell(code: str, explanation: str = "") -> dict[str, Any]:
        """Run Python code as a new notebook cell below the request, in the user's session (like a person's cell):
        returns what it printed, displayed and evaluated to, or its error.

        Args:
            code: the cell's code; variables it defines stay in the user's session
            explanation: one line on what the code does (shown in the cell's first line)
        """
        from nbagent.gate.effects import current_call
        from nbagent.secrets.redactor import Redactor

        after, run_id = where()
        call = current_call()
        if call is not None:
            run_id = call.run_id
        index = counter[run_id or ""] = counter.get(run_id or "", 0) + 1
        source = cell_source(code, run_id, explanation)
        msg_id, cell_id = uuid.uuid4().hex, uuid.uuid4().hex
        provenance: dict[str, Any] = {"run_id": run_id, "index": index, "ran": True}
        if call is not None:
            provenance.update(call_id=call.call_id, approval_event_id=call.approval_event_id, plan_id=call.plan_id,
                              grant_id=call.grant_id)
        provenance["source_sha256"] = source_digest(source)
        metadata = {"nbagent": provenance}
        payload = {"after_cell_id": after, "source": source, "metadata": metadata, "ran": True, "msg_id": msg_id,
                   "cell_id": cell_id, "execution_count": shell.execution_count}
        superseded = reruns.payload(after, where()[1]) if reruns is not None else None
        if superseded is not None:
            send(superseded)  # the earlier runs' cells go, and this run's take their place (rerun.py)
        delivered = send(payload)  # no front end: the log still holds the cell and its outputs
        if registry is not None:
            registry.running(cell_id, True)
        try:
            result = await run_in_shell(shell, source, cell_id, msg_id)
        finally:
            if registry is not None:
                registry.running(cell_id, False)
        result.update(after_cell_id=after, source=source, metadata=metadata, sent_to_frontend=delivered)
        keep_images(result, put_image)
        if registry is not None:
            registry.wrote(result)
        return fitted(result, Redactor().redact)

    return Tool(run_cell, risk=Risk.WRITE_HIGH_RISK, preview=code_preview)


__all__ = ["MAX_SENT", "TOOL", "cell_source", "keep_images", "run_cell_tool", "run_in_shell"]
