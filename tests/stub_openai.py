"""A small OpenAI-compatible chat-completions server for tests of the real HTTP path (litellm -> openai -> httpx).

It serves `POST /v1/chat/completions` on 127.0.0.1 (a free port), from a queue of scripted behaviours:

    stub.push(Reply(content="hi"), HttpError(429, headers={"Retry-After": "0"}), Delay(2.0), ...)

Each request takes the next behaviour; when the queue is empty it uses `stub.fallback` (by default a 500 that
says the script ran out, so a test that makes one call too many fails loudly instead of hanging). A `Reply`
answers in JSON, or as server-sent events when the request has `"stream": true` (content pieces, tool-call
deltas, a finish chunk, a usage chunk when `stream_options.include_usage` is set, then `data: [DONE]`).

Every request is recorded (`stub.requests`: path, lower-cased headers, JSON body) so a test can check what the
client really sent. Delays are bounded (`MAX_DELAY_S`) and end at once when the server stops, so no test can
hang on the stub; `stop()` shuts the server down and closes its socket.
"""

from __future__ import annotations

import collections
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_DELAY_S = 3.0


@dataclass
class Reply:
    """A normal completion. `pieces` splits the streamed content (default: word by word, spaces kept)."""

    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"id", "name", "arguments": dict | str}
    usage: dict[str, int] | None = None
    finish_reason: str | None = None
    pieces: list[str] | None = None
    arg_chunk: int = 7  # streamed tool-call arguments are cut into pieces of this many characters
    # streaming: stop after this many content pieces, with no finish chunk and no [DONE]; "drop" leaves the
    # chunked body unfinished (a dropped connection), "clean" ends it properly (a proxy that gave up politely)
    cut_after: int | None = None
    cut: str = "drop"


@dataclass
class HttpError:
    status: int
    message: str = "stub error"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Delay:
    """Wait (at most MAX_DELAY_S, less if the server stops), then answer with `then` if the client still listens."""

    seconds: float
    then: Reply | HttpError | None = None


Behaviour = Reply | HttpError | Delay


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


def tool_call(name: str, arguments: dict[str, Any] | str, id: str | None = None) -> dict[str, Any]:
    return {"id": id, "name": name, "arguments": arguments}


def _usage(reply: Reply) -> dict[str, int]:
    if reply.usage is not None:
        return reply.usage
    return {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


def _calls(reply: Reply, n: int) -> list[dict[str, Any]]:
    out = []
    for i, c in enumerate(reply.tool_calls):
        args = c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"])
        out.append({"id": c.get("id") or f"call_{n}_{i}", "type": "function",
                    "function": {"name": c["name"], "arguments": args}})
    return out


class StubOpenAI:
    def __init__(self) -> None:
        self.queue: collections.deque[Behaviour] = collections.deque()
        self.fallback: Behaviour = HttpError(500, "stub: no scripted behaviour left")
        self.requests: list[Recorded] = []
        self.completions = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="stub-openai", daemon=True)

    # -------------------------------------------------------------- lifecycle

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> StubOpenAI:
        if not self._thread.is_alive():
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes any handler inside a Delay
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> StubOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -------------------------------------------------------------- script

    def push(self, *behaviours: Behaviour) -> None:
        with self._lock:
            self.queue.extend(behaviours)

    def _next(self) -> tuple[Behaviour, int]:
        with self._lock:
            self.completions += 1
            return (self.queue.popleft() if self.queue else self.fallback), self.completions

    @property
    def completion_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    # -------------------------------------------------------------- HTTP

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # streams use chunked transfer encoding, as real servers do

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                self.close_connection = True  # one request per connection: nothing lingers at shutdown
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                with stub._lock:
                    stub.requests.append(Recorded("POST", self.path, {k.lower(): v for k, v in self.headers.items()},
                                                  body))
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._json(404, {"error": {"message": f"stub: no route {self.path}", "type": "not_found"}})
                    return
                behaviour, n = stub._next()
                try:
                    self._serve(behaviour, n, body if isinstance(body, dict) else {})
                except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                    pass  # the client gave up (a timeout): nothing to answer

            def _serve(self, behaviour: Behaviour, n: int, body: dict[str, Any]) -> None:
                if isinstance(behaviour, Delay):
                    if stub._stopping.wait(min(behaviour.seconds, MAX_DELAY_S)):
                        return
                    behaviour = behaviour.then or stub.fallback
                if isinstance(behaviour, HttpError):
                    self._json(behaviour.status, {"error": {"message": behaviour.message, "type": "stub_error",
                                                            "code": behaviour.status}}, behaviour.headers)
                elif body.get("stream"):
                    self._stream(behaviour, n, body)
                else:
                    self._json(200, self._completion(behaviour, n, body))

            def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _completion(self, reply: Reply, n: int, body: dict[str, Any]) -> dict[str, Any]:
                calls = _calls(reply, n)
                message: dict[str, Any] = {"role": "assistant", "content": reply.content}
                if calls:
                    message["tool_calls"] = calls
                return {
                    "id": f"chatcmpl-stub-{n}", "object": "chat.completion", "created": 1700000000 + n,
                    "model": body.get("model", "stub-model"), "system_fingerprint": "fp_stub",
                    "choices": [{"index": 0, "message": message,
                                 "finish_reason": reply.finish_reason or ("tool_calls" if calls else "stop")}],
                    "usage": _usage(reply),
                }

            def _stream(self, reply: Reply, n: int, body: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()

                def write(data: bytes) -> None:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                base = {"id": f"chatcmpl-stub-{n}", "object": "chat.completion.chunk", "created": 1700000000 + n,
                        "model": body.get("model", "stub-model"), "system_fingerprint": "fp_stub"}

                def send(choices: list[dict[str, Any]], **extra: Any) -> None:
                    write(b"data: " + json.dumps({**base, "choices": choices, **extra}).encode() + b"\n\n")

                def delta(d: dict[str, Any], finish: str | None = None) -> None:
                    send([{"index": 0, "delta": d, "finish_reason": finish}])

                delta({"role": "assistant", "content": ""})
                if reply.content:
                    pieces = reply.pieces if reply.pieces is not None else _words(reply.content)
                    for i, piece in enumerate(pieces):
                        if i == reply.cut_after:
                            if reply.cut == "clean":
                                self.wfile.write(b"0\r\n\r\n")
                            return
                        delta({"content": piece})
                calls = _calls(reply, n)
                for i, c in enumerate(calls):
                    delta({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                           "function": {"name": c["function"]["name"], "arguments": ""}}]})
                    args = c["function"]["arguments"]
                    for k in range(0, len(args), reply.arg_chunk):
                        delta({"tool_calls": [{"index": i, "function": {"arguments": args[k:k + reply.arg_chunk]}}]})
                delta({}, reply.finish_reason or ("tool_calls" if calls else "stop"))
                if (body.get("stream_options") or {}).get("include_usage"):
                    send([], usage=_usage(reply))
                write(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")

        return Handler


def _words(text: str) -> list[str]:
    """'a b  c' -> ['a', ' b', '  c']: pieces whose concatenation is the text."""
    out: list[str] = []
    for i, word in enumerate(text.split(" ")):
        if i == 0:
            out.append(word)
        elif word or not out:
            out.append(" " + word)
        else:
            out[-1] += " "
    return [p for p in out if p]
