"""Small helpers for tests of durable agents."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any, TypeVar

from ..workflows._types import ActivitySettings

__all__ = ["FAST_SETTINGS", "assert_eventually", "collect"]

T = TypeVar("T")

# Short heartbeats and retry intervals so crash and retry tests finish in seconds (not so
# short that a busy 2-core machine misses a heartbeat and retries a healthy activity).
FAST_SETTINGS = ActivitySettings(
    model_heartbeat_s=5.0,
    tool_heartbeat_s=5.0,
    retry_initial_s=0.1,
    retry_max_interval_s=1.0,
    model_max_attempts=5,
)


async def collect(messages: AsyncIterable[T]) -> list[T]:
    """Every message of a query, in order."""
    return [m async for m in messages]


async def assert_eventually(
    check: Callable[[], Any | Awaitable[Any]], *, within: float = 20.0, interval: float = 0.05
) -> Any:
    """Retry ``check`` (sync or async; raising or returning falsy means not yet) until it holds."""
    deadline = time.monotonic() + within
    while True:
        try:
            value = check()
            if asyncio.iscoroutine(value) or isinstance(value, Awaitable):
                value = await value
            if value or value is None:
                return value
            last: BaseException = AssertionError(f"{check} returned {value!r}")
        except AssertionError as err:
            last = err
        if time.monotonic() > deadline:
            raise last
        await asyncio.sleep(interval)
