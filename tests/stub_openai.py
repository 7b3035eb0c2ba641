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

A `Respond(fn)` behaviour (in the queue, or as `stub.fallback`) lets a function of the request body decide the
answer, so a test can play a deterministic model over many turns (tests/session_model.py).

Limits and caching, as OpenAI's chat models have them (issue 28):

    StubOpenAI(max_input_tokens=16000, cache=True)

counts every chat request's input tokens itself (`count_input_tokens`: tiktoken, independent of litellm's
token_counter) and records the count (`Recorded.input_tokens`). Over `max_input_tokens` it refuses the request
exactly as OpenAI does (HTTP 400, code `context_length_exceeded`; `Recorded.refused`), without taking a
behaviour from the queue. `cache=True` plays OpenAI's automatic prompt caching: a request's cached tokens are the
longest token prefix it shares with an earlier answered request, in 128-token steps from 1,024 (0 below), reported
in `usage.prompt_tokens_details.cached_tokens` (`Recorded.cached_tokens`). While counting, a reply's usage is real
(`prompt_tokens` = the counted input); otherwise it is the fixed 11/7/18 unless the `Reply` says.
"""

from __future__ import annotations

import array
import base64
import collections
import hashlib
import importlib.util
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MAX_DELAY_S = 3.0
MAX_TRICKLE_S = 120.0


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


@dataclass
class Trickle:
    """A reply that keeps coming and never gets anywhere: one piece every `every` seconds for `seconds` (at most
    MAX_TRICKLE_S, less if the server stops), then its proper end. Streamed, each piece is a content chunk; not
    streamed, the JSON body (its Content-Length sent first) comes a few bytes at a time, as a slow proxy sends it. No
    read ever waits long, so only a deadline on the whole call stops it. `Recorded.trickled` counts the pieces sent;
    `Recorded.client_left` is True when the client closed the connection before the end, False when it was read to
    its end."""

    every: float = 0.05
    seconds: float = 60.0
    piece: str = "."


@dataclass
class Respond:
    """Answer from the request itself: `fn(body)` returns the Reply or HttpError to send (a model played by code)."""

    fn: Callable[[dict[str, Any]], Reply | HttpError]


Behaviour = Reply | HttpError | Delay | Respond | Trickle


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    input_tokens: int | None = None  # the server's own count, when it counts (max_input_tokens or cache)
    cached_tokens: int | None = None  # with cache=True, for an answered request
    refused: bool = False  # over max_input_tokens: answered 400 context_length_exceeded
    output_tokens: int | None = None  # the reply's completion tokens, when counting
    # time.perf_counter() when the handler had the request's line and headers, and when it had written its answer (a
    # chat request) or given up: CLOCK_MONOTONIC on Linux, one clock for every process (bench/second_cell_timeline.py)
    received_at: float | None = None
    answered_at: float | None = None
    trickled: int = 0  # a Trickle's pieces sent so far
    client_left: bool | None = None  # a Trickle: True if the client closed before its end, False if it read it all


def tool_call(name: str, arguments: dict[str, Any] | str, id: str | None = None) -> dict[str, Any]:
    return {"id": id, "name": name, "arguments": arguments}


def _usage(reply: Reply, counted: Recorded | None = None, model: str = "") -> dict[str, Any]:
    if reply.usage is not None:
        return reply.usage
    if counted is None or counted.input_tokens is None:
        return {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    out = counted.output_tokens = count_output_tokens(reply, model)
    return {"prompt_tokens": counted.input_tokens, "completion_tokens": out,
            "total_tokens": counted.input_tokens + out,
            "prompt_tokens_details": {"cached_tokens": counted.cached_tokens or 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}


# ------------------------------------------------------------------------------------------- token counting
# OpenAI's chat format, as its cookbook counts it ("How to count tokens with tiktoken", openai-cookbook
# examples/How_to_count_tokens_with_tiktoken.ipynb): each message costs 3 tokens plus its role's and content's
# tokens (a `name` 1 more), and 3 more prime the reply. Tool calls in an assistant message: 3 + the tokens of the
# function's name and arguments each. Tool schemas: the cookbook's
# `num_tokens_for_tools` (7 per function for the gpt-4o family, 10 for gpt-4 and gpt-3.5; its name:description;
# 3 + 3 per property and its name:type:description; enum items 3 each; 12 at the end), a property without a plain
# `type` taking its types joined with "|" (a pydantic Optional's anyOf), other schemas their JSON's tokens. An image
# part counts 85 (a low-detail image). The tool-call rules are this server's approximation: the cookbook does not
# give them. The count is the server's own, independent of litellm's token_counter (which nbagent uses), so the two
# can be compared; tests/test_stub_limits.py checks it against the numbers the cookbook got from OpenAI's API.

O200K_PREFIXES = ("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4")
CACHE_MIN_TOKENS = 1024  # OpenAI caches prompts of 1,024 tokens or more...
CACHE_STEP = 128  # ...in increments of 128 tokens
IMAGE_TOKENS = 85
_FUNC_INIT_O200K, _FUNC_INIT_CL100K = 7, 10
_PROP_INIT, _PROP_KEY, _ENUM_INIT, _ENUM_ITEM, _FUNC_END = 3, 3, -3, 3, 12
# stand-ins for the format's own tokens in the token sequence the cache compares (real tokens are >= 0)
_START, _SEP, _END, _NAME, _CALL, _ARGS, _CALL_END, _IMAGE, _PRIME = (-i for i in range(1, 10))


def encoding_name(model: str) -> str:
    """The tokenizer of an OpenAI model: o200k_base for the gpt-4o family and later, cl100k_base before."""
    name = model.rsplit("/", 1)[-1]
    return "o200k_base" if name.startswith(O200K_PREFIXES) else "cl100k_base"


_ENCODING_FILES = {  # tiktoken's cache names (sha1 of the download URL), as litellm ships them: no network
    "o200k_base": "fb374d419588a4632f3f557e76b4b70aebbca790",
    "cl100k_base": "9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
}


_ENCODING_LOCK = threading.Lock()


@cache
def _encoding(name: str) -> Any:
    """tiktoken's encoding, read from the copy litellm ships (tiktoken would download it), never fetched."""
    with _ENCODING_LOCK:
        return _load_encoding(name)


def _load_encoding(name: str) -> Any:
    import tiktoken
    from tiktoken_ext import openai_public

    spec = importlib.util.find_spec("litellm")
    assert spec is not None and spec.submodule_search_locations, "litellm is needed for its tokenizer files"
    package = Path(next(iter(spec.submodule_search_locations)))
    path = package / "litellm_core_utils" / "tokenizers" / _ENCODING_FILES[name]
    ranks = {base64.b64decode(token): int(rank)
             for token, rank in (line.split() for line in path.read_bytes().splitlines() if line)}
    constructor = getattr(openai_public, name)
    try:  # the pattern and special tokens from tiktoken's own definition, its ranks from the file above
        original = openai_public.load_tiktoken_bpe
        openai_public.load_tiktoken_bpe = lambda *a, **k: ranks
        spec_ = constructor()
    finally:
        openai_public.load_tiktoken_bpe = original
    return tiktoken.Encoding(spec_["name"], pat_str=spec_["pat_str"], mergeable_ranks=spec_["mergeable_ranks"],
                             special_tokens=spec_["special_tokens"])


_MEMO_MIN_CHARS = 2_000  # long texts come back in every later request of a session: encoded once
_memo: dict[tuple[str, str], array.array] = {}


def _enc(encoding: Any, text: str) -> array.array:
    """The text's tokens (no special tokens: a text that spells one is plain text to the model)."""
    if len(text) < _MEMO_MIN_CHARS:
        return array.array("i", encoding.encode(text, disallowed_special=()))
    key = (encoding.name, hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest())
    hit = _memo.get(key)
    if hit is None:
        if len(_memo) > 4_096:
            _memo.clear()
        hit = _memo[key] = array.array("i", encoding.encode(text, disallowed_special=()))
    return hit


def _prop_type(prop: dict[str, Any]) -> str:
    if isinstance(prop.get("type"), str):
        return prop["type"]
    if isinstance(prop.get("type"), list):
        return "|".join(str(t) for t in prop["type"])
    options = prop.get("anyOf") or prop.get("oneOf") or []
    if options and all(isinstance(o, dict) and isinstance(o.get("type"), str) and len(o) == 1 for o in options):
        return "|".join(o["type"] for o in options)
    return json.dumps({k: v for k, v in prop.items() if k not in ("description", "default")}, sort_keys=True)


def tools_tokens(tools: list[dict[str, Any]], encoding: Any) -> int:
    """The cookbook's count of the tool schemas' tokens (see above)."""
    if not tools:
        return 0
    n = 0
    for t in tools:
        fn = t.get("function") or t
        n += _FUNC_INIT_O200K if encoding.name == "o200k_base" else _FUNC_INIT_CL100K
        desc = str(fn.get("description") or "").removesuffix(".")
        n += len(_enc(encoding, f"{fn.get('name', '')}:{desc}"))
        props = (fn.get("parameters") or {}).get("properties") or {}
        if props:
            n += _PROP_INIT
            for key, prop in props.items():
                n += _PROP_KEY
                prop = prop if isinstance(prop, dict) else {}
                if isinstance(prop.get("enum"), list):
                    n += _ENUM_INIT
                    for item in prop["enum"]:
                        n += _ENUM_ITEM + len(_enc(encoding, str(item)))
                p_desc = str(prop.get("description") or "").removesuffix(".")
                n += len(_enc(encoding, f"{key}:{_prop_type(prop)}:{p_desc}"))
    return n + _FUNC_END


def _content_tokens(content: Any, encoding: Any, seq: array.array) -> None:
    if content is None:
        return
    if isinstance(content, str):
        seq.extend(_enc(encoding, content))
        return
    for part in content if isinstance(content, list) else [content]:
        if isinstance(part, dict) and part.get("type") == "text":
            seq.extend(_enc(encoding, str(part.get("text") or "")))
        elif isinstance(part, dict) and part.get("type") == "image_url":
            seq.extend([_IMAGE] * IMAGE_TOKENS)
        else:
            seq.extend(_enc(encoding, json.dumps(part, sort_keys=True)))


def request_tokens(body: dict[str, Any]) -> array.array:
    """The request as a token sequence (the format's own tokens as negative stand-ins): its length is the input
    token count, its prefixes are what the prompt cache compares. Tools first: OpenAI puts them ahead of the
    conversation."""
    encoding = _encoding(encoding_name(str(body.get("model") or "")))
    tools = body.get("tools") or []
    seq = array.array("i")
    if tools:
        tag = -1000 - int(hashlib.sha256(json.dumps(tools, sort_keys=True).encode()).hexdigest()[:7], 16)
        seq.extend([tag] * tools_tokens(tools, encoding))
    for m in body.get("messages") or []:
        seq.append(_START)
        seq.extend(_enc(encoding, str(m.get("role") or "")))
        seq.append(_SEP)
        _content_tokens(m.get("content"), encoding, seq)
        if m.get("name"):
            seq.extend(_enc(encoding, str(m["name"])))
            seq.append(_NAME)
        for c in m.get("tool_calls") or []:
            fn = c.get("function") or {}
            args = fn.get("arguments")
            args = args if isinstance(args, str) else json.dumps(args)
            seq.append(_CALL)
            seq.extend(_enc(encoding, str(fn.get("name") or "")))
            seq.append(_ARGS)
            seq.extend(_enc(encoding, args))
            seq.append(_CALL_END)
        seq.append(_END)
    seq.extend([_PRIME] * 3)
    return seq


def count_input_tokens(body: dict[str, Any]) -> int:
    """A chat request's input tokens, counted as OpenAI counts them (the module's notes say how)."""
    return len(request_tokens(body))


def count_output_tokens(reply: Reply, model: str) -> int:
    """A reply's completion tokens: its text's, and 3 + name + arguments per tool call."""
    encoding = _encoding(encoding_name(model))
    n = len(_enc(encoding, reply.content or ""))
    for c in reply.tool_calls:
        args = c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"])
        n += 3 + len(_enc(encoding, c["name"])) + len(_enc(encoding, args))
    return n


def _prefix_digests(seq: array.array) -> list[bytes]:
    """Digests of the sequence's cacheable prefixes: at 1,024 tokens, then every 128."""
    out: list[bytes] = []
    if len(seq) < CACHE_MIN_TOKENS:
        return out
    data = seq.tobytes()
    h = hashlib.sha256(data[:CACHE_MIN_TOKENS * 4])
    out.append(h.digest())
    for end in range(CACHE_MIN_TOKENS + CACHE_STEP, len(seq) + 1, CACHE_STEP):
        h.update(data[(end - CACHE_STEP) * 4:end * 4])
        out.append(h.copy().digest())
    return out


def context_length_error(limit: int, tokens: int) -> dict[str, Any]:
    """OpenAI's answer (HTTP 400) to a chat request longer than the model's context."""
    return {"error": {
        "message": (f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
                    f"{tokens} tokens. Please reduce the length of the messages."),
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}


def _calls(reply: Reply, n: int) -> list[dict[str, Any]]:
    out = []
    for i, c in enumerate(reply.tool_calls):
        args = c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"])
        out.append({"id": c.get("id") or f"call_{n}_{i}", "type": "function",
                    "function": {"name": c["name"], "arguments": args}})
    return out


class StubOpenAI:
    """The server. `max_input_tokens`: refuse longer requests as OpenAI does; `cache`: report cached tokens as
    OpenAI's prompt cache would; `count_tokens`: count (and report real usage) without either (default: when
    either is set)."""

    def __init__(self, max_input_tokens: int | None = None, cache: bool = False,
                 count_tokens: bool | None = None) -> None:
        self.max_input_tokens = max_input_tokens
        self.cache = cache
        self.count_tokens = (max_input_tokens is not None or cache) if count_tokens is None else count_tokens
        self._cached_prefixes: set[bytes] = set()
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

    @property
    def refusals(self) -> list[Recorded]:
        """The requests refused as longer than `max_input_tokens`."""
        return [r for r in self.requests if r.refused]

    def _count(self, record: Recorded) -> None:
        """Count a chat request's tokens, decide refusal, and with `cache` its cached prefix (a request not refused
        is cached from now on, as OpenAI caches what it processed)."""
        seq = request_tokens(record.body if isinstance(record.body, dict) else {})
        record.input_tokens = len(seq)
        if self.max_input_tokens is not None and len(seq) > self.max_input_tokens:
            record.refused = True
            return
        if not self.cache:
            return
        digests = _prefix_digests(seq)
        with self._lock:
            shared = 0
            for d in digests:
                if d not in self._cached_prefixes:
                    break
                shared += 1
            self._cached_prefixes.update(digests)
        record.cached_tokens = 0 if shared == 0 else CACHE_MIN_TOKENS + (shared - 1) * CACHE_STEP

    # -------------------------------------------------------------- HTTP

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # streams use chunked transfer encoding, as real servers do

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                received = time.perf_counter()
                self.close_connection = True  # one request per connection: nothing lingers at shutdown
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                record = Recorded("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body,
                                  received_at=received)
                chat = self.path.rstrip("/").endswith("/chat/completions")
                if chat and stub.count_tokens:
                    stub._count(record)
                with stub._lock:
                    stub.requests.append(record)
                self.counted: Recorded | None = record if record.input_tokens is not None else None
                self.record = record
                if not chat:
                    self._json(404, {"error": {"message": f"stub: no route {self.path}", "type": "not_found"}})
                    return
                try:
                    if record.refused:  # the model never sees it: no behaviour is taken
                        assert stub.max_input_tokens is not None and record.input_tokens is not None
                        self._json(400, context_length_error(stub.max_input_tokens, record.input_tokens))
                        return
                    behaviour, n = stub._next()
                    self._serve(behaviour, n, body if isinstance(body, dict) else {})
                except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                    pass  # the client gave up (a timeout): nothing to answer
                finally:
                    record.answered_at = time.perf_counter()

            def _serve(self, behaviour: Behaviour, n: int, body: dict[str, Any]) -> None:
                if isinstance(behaviour, Delay):
                    if stub._stopping.wait(min(behaviour.seconds, MAX_DELAY_S)):
                        return
                    behaviour = behaviour.then or stub.fallback
                if isinstance(behaviour, Trickle):
                    self._trickle(behaviour, n, body)
                    return
                if isinstance(behaviour, Respond):
                    behaviour = behaviour.fn(body)
                if isinstance(behaviour, HttpError):
                    self._json(behaviour.status, {"error": {"message": behaviour.message, "type": "stub_error",
                                                            "code": behaviour.status}}, behaviour.headers)
                elif body.get("stream"):
                    self._stream(behaviour, n, body)
                else:
                    self._json(200, self._completion(behaviour, n, body))

            def _trickle(self, trickle: Trickle, n: int, body: dict[str, Any]) -> None:
                record = self.record
                pieces = max(1, int(min(trickle.seconds, MAX_TRICKLE_S) / max(trickle.every, 0.001)))
                streamed = bool(body.get("stream"))
                whole = json.dumps(self._completion(Reply(content=trickle.piece * pieces), n, body)).encode()
                step = max(1, len(whole) // pieces)  # the JSON body in `pieces` parts, the rest at the end
                if streamed:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(whole)))
                self.send_header("Connection", "close")
                self.end_headers()
                base = {"id": f"chatcmpl-stub-{n}", "object": "chat.completion.chunk", "created": 1700000000 + n,
                        "model": body.get("model", "stub-model")}

                def event(choices: list[dict[str, Any]], **extra: Any) -> None:
                    data = b"data: " + json.dumps({**base, "choices": choices, **extra}).encode() + b"\n\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()

                try:
                    for i in range(pieces):
                        if streamed:
                            event([{"index": 0, "delta": {"content": trickle.piece}, "finish_reason": None}])
                        else:
                            self.wfile.write(whole[i * step:(i + 1) * step])
                            self.wfile.flush()
                        record.trickled = i + 1
                        if stub._stopping.wait(trickle.every):
                            return
                    if streamed:
                        event([{"index": 0, "delta": {}, "finish_reason": "stop"}])
                        if (body.get("stream_options") or {}).get("include_usage"):
                            event([], usage=_usage(Reply(), None))
                        data = b"data: [DONE]\n\n"
                        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
                    else:
                        self.wfile.write(whole[pieces * step:])
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                    record.client_left = True
                    return
                record.client_left = False

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
                    "usage": _usage(reply, self.counted, str(body.get("model") or "")),
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
                    send([], usage=_usage(reply, self.counted, str(body.get("model") or "")))
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
