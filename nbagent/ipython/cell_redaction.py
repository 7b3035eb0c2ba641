"""The agent's cells' outputs, redacted before they leave the kernel, through ipykernel's own hooks.

A cell the agent runs (run_cell.py) has its own parent message id M. ipykernel passes every message it is about to
send through the hooks registered on the object that sends it, in the thread that sends it:

- stream text: `OutStream.register_hook`, thread-local, called where the buffer is flushed, which is the IOPub thread
  (the hook is registered there); a hook registered on the main thread never sees a stream message;
- display_data, update_display_data, clear_output: `ZMQDisplayPublisher.register_hook`, thread-local, the main
  thread (where the cell's code calls `display`);
- execute_result: `ZMQShellDisplayHook.register_hook`, the main thread.

`CellRedaction` is what those hooks do, and nothing else: a message whose parent is M gets its text redacted by
the one `Redactor` (secrets.py); any other message passes untouched, so a person's cell, another thread's print
and nbagent's own views are as they were. Streams go through a `StreamRedactor` per stream, which holds back the
word being written, so a secret split across two writes, or two flushes, is redacted as the whole text would be;
what it holds is sent when the word ends, before the cell's next display, and when the cell ends. While the cell
runs, streams under the `%%agent` cell's request (where ipykernel puts what other threads and subprocesses write to
the process's file descriptors) are redacted the same way.

`error` is the one kind no hook sees: ipykernel's `ZMQInteractiveShell._showtraceback` sends it straight through the
session, and the only ways in (replacing that method, `set_custom_exc`, an AST transformer, the shell's `CustomTB`)
change the shell for every cell. So that one message goes out as raised. When it named a secret, the kernel then
corrects the cell the way a front end understands: a `clear_output` under M, then the cell's outputs again as they
were sent (kept, redacted, up to MAX_KEPT characters), the error redacted. What a front end shows and saves holds
no secret; the wire carried the raw error once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from nbagent.secrets.outputs import redact_output
from nbagent.secrets.redactor import Redactor, StreamRedactor

MAX_KEPT = 8_000_000  # characters of a cell's outputs kept for a correction (images as base64), until the cell ends
SEGMENT = 1_000_000  # characters after which a stream's redactor starts afresh, at the end of a line


def _parent(msg: dict[str, Any]) -> str | None:
    return (msg.get("parent_header") or {}).get("msg_id")


class _Stream:
    """One stream (stdout or stderr) of one parent: its redactor, and the header its messages are sent under."""

    def __init__(self, redactor: Redactor) -> None:
        self.out: list[str] = []
        self.sent = 0  # characters of this segment sent
        self.fed = 0
        self.diverged = False
        self.redactor = StreamRedactor(redactor, self.out.append, self._reset)
        self.header: dict[str, Any] = {}

    def _reset(self) -> None:
        # what was shown is not what the whole text redacts to (the stream redactor says it should not happen):
        # the next token is the whole text again; only what goes past what was sent is sent
        self.diverged = True

    def take(self) -> str:
        text = "".join(self.out)
        self.out.clear()
        if self.diverged:
            self.diverged = False
            text = text[self.sent:]
        self.sent += len(text)
        return text

    def feed(self, text: str) -> str:
        self.redactor.feed(text)
        self.fed += len(text)
        if self.fed > SEGMENT and text[-1:].isspace():  # nothing is held at a line's end: start afresh
            self.redactor.close()
            done = self.take()
            self.sent = self.fed = 0
            return done
        return self.take()

    def finish(self) -> str:
        self.redactor.close()
        done = self.take()
        self.sent = self.fed = 0
        return done


class CellRedaction:
    """Redacts the IOPub messages of one agent cell (parent `msg_id`), and keeps them for a correction.

    `stream` runs in the IOPub thread, `display` and `error` in the main thread: what both touch is under a lock."""

    def __init__(self, redactor: Redactor, msg_id: str, streams_of: Iterable[str | None] = ()) -> None:
        self.redactor, self.msg_id = redactor, msg_id
        self.stream_parents = {msg_id, *(p for p in streams_of if p)}
        self.streams: dict[tuple[str, str], _Stream] = {}
        self.kept: list[tuple[str, dict[str, Any]]] = []  # (msg_type, content) of M, in the order sent
        self.kept_size = 0
        self.not_kept = 0
        self.corrects = False  # a message went out that needs the cell shown again
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the hooks

    def stream(self, msg: dict[str, Any]) -> dict[str, Any]:
        """A stream message about to be sent: the redacted text of its parent's stream so far (maybe empty: the
        hook must return a message, since a None would drop the other parents' text of the same flush)."""
        parent = _parent(msg)
        if parent not in self.stream_parents:
            return msg
        content = msg.get("content") or {}
        name = str(content.get("name", "stdout"))
        with self._lock:
            s = self.streams.get((parent, name))
            if s is None:
                s = self.streams[(parent, name)] = _Stream(self.redactor)
            s.header = msg.get("parent_header") or {}
            text = s.feed(str(content.get("text", "")))
            if parent == self.msg_id:
                self._keep_text(name, text)
        return {**msg, "content": {**content, "text": text}}

    def display(self, msg: dict[str, Any]) -> dict[str, Any]:
        """A display_data, update_display_data, clear_output or execute_result about to be sent."""
        if _parent(msg) != self.msg_id:
            return msg
        kind = str((msg.get("header") or {}).get("msg_type") or msg.get("msg_type") or "display_data")
        content = redact_output(self.redactor, msg.get("content") or {})
        with self._lock:
            self._keep(kind, content)
        return {**msg, "content": content}

    def error(self, content: dict[str, Any]) -> dict[str, Any]:
        """The error ipykernel sent for the cell (no hook saw it): kept redacted; if redacting changed it, the cell
        is to be corrected."""
        redacted = redact_output(self.redactor, content)
        with self._lock:
            self.corrects = self.corrects or redacted != content
            self.kept.append(("error", redacted))  # always kept: a correction ends with it
        return redacted

    # ------------------------------------------------------------------ what is held

    def holding(self, parent: str | None = None) -> bool:
        """Whether text of `parent` (any, if None) is held back (read in the main thread without the IOPub thread's
        help: a display flushed the streams and waited for that flush just before)."""
        return any(s.redactor.held for (p, _), s in list(self.streams.items()) if parent is None or p == parent)

    def finish_streams(self, parent: str | None = None) -> list[dict[str, Any]]:
        """The text held back of `parent`'s streams (every stream's, if None), as stream messages to send now:
        `{"parent_header", "content"}` each."""
        out: list[dict[str, Any]] = []
        with self._lock:
            for (p, name), s in self.streams.items():
                if parent is not None and p != parent:
                    continue
                text = s.finish()
                if text:
                    if p == self.msg_id:
                        self._keep_text(name, text)
                    out.append({"parent_header": s.header, "content": {"name": name, "text": text}})
        return out

    def correction(self) -> list[tuple[str, dict[str, Any]]]:
        """The messages that show the cell again as it should be: clear, then the kept outputs, the error last."""
        with self._lock:
            kept = [(kind, {"name": c["name"], "text": "".join(c["parts"])} if kind == "stream" else c)
                    for kind, c in self.kept]
            lost = self.not_kept
        shown: list[tuple[str, dict[str, Any]]] = [("clear_output", {"wait": False}), *kept]
        if lost:
            note = (f"[nbagent: {lost} output(s) of this cell are not shown again: its error named a secret, so the "
                    "cell was cleared and shown again redacted, up to a size; run the cell again to see them]\n")
            at = next((i for i, (kind, _) in enumerate(shown) if kind == "error"), len(shown))
            shown.insert(at, ("stream", {"name": "stderr", "text": note}))
        return shown

    # ------------------------------------------------------------------ kept for a correction

    def _keep_text(self, name: str, text: str) -> None:
        if not text:
            return
        if self.kept_size + len(text) > MAX_KEPT:
            self.not_kept += 1
            return
        last = self.kept[-1] if self.kept else None
        if last is not None and last[0] == "stream" and last[1]["name"] == name:
            last[1]["parts"].append(text)  # joined when shown again (adding to a string each flush is quadratic)
        else:
            self.kept.append(("stream", {"name": name, "parts": [text]}))
        self.kept_size += len(text)

    def _keep(self, kind: str, content: dict[str, Any]) -> None:
        size = 200 + sum(len(v) if isinstance(v, str) else 1_000 for v in (content.get("data") or {}).values())
        if self.kept_size + size > MAX_KEPT:
            self.not_kept += 1
            return
        self.kept.append((kind, content))
        self.kept_size += size


class Outlet:
    """`CellRedaction` hooked into a kernel for one cell: registering and unregistering its hooks, sending what it
    holds back from the IOPub thread (as `OutStream._flush` sends), and the correction."""

    def __init__(self, shell: Any, streams: list[Any], redaction: CellRedaction,
                 in_io_thread: Callable[[Any, Callable[[], Any]], None]) -> None:
        self.shell, self.streams, self.redaction, self.in_io_thread = shell, streams, redaction, in_io_thread
        self.by_name = {getattr(s, "name", ""): s for s in streams}

    def display(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The display hooks' part (main thread): the cell's held text goes out first, so its order is kept."""
        r = self.redaction
        if _parent(msg) == r.msg_id and r.holding(r.msg_id):
            self.release(r.msg_id)
        return r.display(msg)

    def release(self, parent: str | None = None) -> None:
        """Send the text held back of `parent`'s streams (every stream's if None), from the IOPub thread."""
        if self.streams:
            self.in_io_thread(self.streams[0], lambda: self.send_held(parent))

    def send_held(self, parent: str | None = None) -> None:
        """In the IOPub thread: send what `redaction` holds back of `parent`'s streams (every stream's if None)."""
        for m in self.redaction.finish_streams(parent):
            stream = self.by_name.get(m["content"]["name"])
            if stream is None or getattr(stream, "pub_thread", None) is None:
                continue
            stream.session.send(stream.pub_thread, "stream", m["content"], parent=m["parent_header"],
                                ident=stream.topic)

    def error_shown(self, value: Any, stb: Any) -> None:
        """ipykernel sent the cell's error (`_showtraceback`): what it sent, for `CellRedaction.error`."""
        if not isinstance(stb, list):
            return
        try:
            evalue = str(value)
        except Exception:  # a __str__ that raises: ipykernel's own str() failed the same way
            evalue = ""
        self.release(self.redaction.msg_id)  # text printed before the error comes before it when shown again
        self.redaction.error({"ename": type(value).__name__ if value is not None else "Error", "evalue": evalue,
                              "traceback": [str(line) for line in stb]})

    def correct(self, parent: dict[str, Any]) -> bool:
        """When a message went out that named a secret: the cell cleared and shown again, redacted, under `parent`
        (the cell's request). True when it was."""
        if not self.redaction.corrects:
            return False
        pub = getattr(self.shell, "display_pub", None)
        hook = getattr(self.shell, "displayhook", None)
        session, socket = getattr(pub, "session", None), getattr(pub, "pub_socket", None)
        if session is None or socket is None:
            return False
        display_topic = getattr(pub, "topic", b"display_data")
        result_topic = getattr(hook, "topic", None) or b"execute_result"
        for kind, content in self.redaction.correction():
            ident = (b"stream." + str(content.get("name", "stdout")).encode() if kind == "stream"
                     else result_topic if kind == "execute_result"
                     else result_topic.replace(b"execute_result", b"error") if kind == "error"
                     else display_topic)
            session.send(socket, kind, content, parent=parent, ident=ident)
        return True


__all__ = ["MAX_KEPT", "CellRedaction", "Outlet"]
