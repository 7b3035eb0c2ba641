"""The one retry mechanism, for model calls (llm.complete) and tool calls (runtime.invoke): tenacity's.

A transient failure (llm.is_transient: timeouts, connection errors, HTTP 408/429/5xx) is retried with
exponential backoff and a cap: the wait before attempt n + 1 is `base * 2**(n - 1)` seconds, at most `cap`
(tenacity's wait_exponential), and at most `retries` retries (stop_after_attempt(retries + 1)); anything
else fails at once. The first attempt is made directly: tenacity's retrying state is a few dozen objects in
reference cycles (freed only by a full garbage collection) and its import takes tens of milliseconds, both
for nothing when, as nearly always, the first attempt succeeds or fails for good. Only a transient failure
hands over to tenacity, whose first attempt is that one, so the attempts, waits and final error are those
tenacity alone gives.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def with_retries(attempt: Callable[[int], Awaitable[T]], *, retries: int, base: float, cap: float,
                       transient: Callable[[BaseException], bool],
                       first_failed: Callable[[BaseException], None] | None = None,
                       on_retry: Callable[[int, BaseException], None] | None = None) -> tuple[T, int]:
    """`attempt(n)` (n = 1, 2, ...) until it returns, retried while it fails transiently; returns its result and
    the number of retries. A failure that ends it is re-raised with `retry_count` (retries made) set on it.

    `first_failed` sees the first attempt's failure before anything else (it may raise to stop at once);
    `on_retry(n, exc)` is called after attempt n failed, before the wait.
    """
    try:
        return await attempt(1), 0
    except Exception as exc:
        if first_failed is not None:
            first_failed(exc)
        if retries < 1 or not transient(exc):
            exc.retry_count = 0  # type: ignore[attr-defined]
            raise
        first = exc
    from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

    def before_sleep(state: Any) -> None:
        if on_retry is not None:
            on_retry(state.attempt_number, state.outcome.exception())

    attempts = 0
    try:
        async for trying in AsyncRetrying(
            stop=stop_after_attempt(retries + 1),
            wait=wait_exponential(multiplier=base, max=cap),
            retry=retry_if_exception(transient),
            before_sleep=before_sleep,
            reraise=True,
        ):
            with trying:
                attempts = trying.retry_state.attempt_number
                if attempts == 1:
                    raise first
                result = await attempt(attempts)
    except Exception as exc:
        exc.retry_count = max(0, attempts - 1)  # type: ignore[attr-defined]
        raise
    return result, max(0, attempts - 1)


__all__ = ["with_retries"]
