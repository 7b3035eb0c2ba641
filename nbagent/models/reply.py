"""What a model call is and says, whoever makes it (in this process, in the kernel's model process, or an offline
model): its settings, its reply, its failures and which of them are worth a retry, and the fingerprint that
identifies a request for replay. No litellm here."""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from nbagent.events.model import Usage, canonical_json
from nbagent.models.tool_calls import ToolCallRequest

__all__ = ["Fingerprint", "ModelError", "ModelReply", "ModelSettings", "ModelTimeout", "causes", "is_transient", "sha"]


class ModelTimeout(TimeoutError):
    """A model call that ran past its deadline (`ModelSettings.timeout`, on the whole call, streamed or not): it was
    cancelled, and is not retried (`is_transient`): a retry would wait as long again on a server that has just shown
    it cannot answer in time, and the person's bound on a call would become (retries + 1) times itself."""


class ModelError(Exception):
    """A model call failed for good (after retries, or at once for a non-transient error)."""

    def __init__(self, message: str, *, retry_count: int = 0, transient: bool = False,
                 error_type: str | None = None) -> None:
        super().__init__(message)
        self.retry_count = retry_count
        self.transient = transient
        self.error_type = error_type


class ModelSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str
    api_base: str | None = None
    api_key: SecretStr | None = None
    # seconds the whole call may take (each attempt, from the request to the reply's end, streamed or not: `deadline`);
    # litellm bounds each read by it too. `timeout_setting` is how the person sets it, named when it passes.
    timeout: float = 120.0
    timeout_setting: str = "Agent(timeout=...)"
    max_retries: int = 4
    retry_base: float = 0.5  # seconds; waits 0.5, 1, 2, 4... capped at retry_cap
    retry_cap: float = 20.0
    params: dict[str, Any] = Field(default_factory=dict)  # temperature, max_tokens...


class ModelReply(BaseModel):
    content: str | None = None
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    cost: float | None = None
    latency_ms: float = 0.0
    retry_count: int = 0
    finish_reason: str | None = None
    response: dict[str, Any] = Field(default_factory=dict)


# ------------------------------------------------------------------------------------------- transient


def causes(exc: BaseException) -> list[BaseException]:
    """`exc` and what it wraps (litellm's `original_exception`, causes, contexts), outermost first."""
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = getattr(cur, "original_exception", None) or cur.__cause__ or cur.__context__
    return seen


def is_transient(exc: BaseException) -> bool:
    from nbagent.models.base import ModelScriptError

    chain = causes(exc)
    if any(isinstance(e, ModelScriptError | ModelTimeout) for e in chain):
        return False
    for e in chain:
        if isinstance(e, ConnectionError | TimeoutError):
            return True
        name = type(e).__name__
        if name in ("Timeout", "APITimeoutError", "APIConnectionError", "RateLimitError", "InternalServerError",
                    "ServiceUnavailableError", "BadGatewayError", "TimeoutError", "ConnectError", "ReadTimeout"):
            return True
        status = getattr(e, "status_code", None)
        if isinstance(status, int) and (status in (408, 409, 429) or status >= 500):
            return True
    return False


# ------------------------------------------------------------------------------------------- fingerprint


def sha(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


class Fingerprint:
    """Rolling hash over a run's messages: O(new messages) per call, not O(all messages)."""

    def __init__(self, tools: list[dict[str, Any]], prefix: list[dict[str, Any]]) -> None:
        self.tools_sha = sha(tools)
        self.prefix_sha = sha(prefix)
        self.prefix_len = len(prefix)
        self._own_hashed = 0
        self._rolling = self.prefix_sha

    def of(self, own: list[dict[str, Any]]) -> str:
        if len(own) < self._own_hashed:
            raise ValueError("messages shrank between calls")
        h = self._rolling
        for m in own[self._own_hashed:]:
            h = hashlib.sha256((h + canonical_json(m)).encode("utf-8")).hexdigest()
        self._rolling, self._own_hashed = h, len(own)
        return hashlib.sha256((self.tools_sha + h).encode("utf-8")).hexdigest()
