"""An activity's outcome is handed to Temporal once the server answers.

Temporal Core reports a finished activity with retries of its own, about 10 s (it overrides
the retry settings of the worker's client), then drops the report: the server times the
attempt out although it ran, and the tool is run again or reported as cut off. An outcome
that waits here until the server answers reaches it with Core's first tries, after an outage
of any length up to the reconnect limit. What still cannot be saved is an attempt whose
heartbeat timeout passed while the server was down: the server times it out as it comes back.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from .. import _settings
from .._errors import ConfigurationError
from .._settings import RECONNECT_ENV

__all__ = ["RECONNECT_ENV", "ServerWaitInterceptor", "reconnect_limit"]

DEFAULT_RECONNECT_S = 600.0
CHECK_TIMEOUT_S = 2.0
CHECK_EVERY_S = 0.5
# A server that answered this recently counts as answering (a tool turn's two activities
# end ~20 ms apart; at 50 queries many end within a few ms): one round trip, ~1.3 ms of
# an activity's time on a quiet worker, for every outcome within the window. An outage
# that starts inside it and outlasts Core's own retries (~10 s) costs what one without a
# check costs: the attempt times out and is retried, and a tool's retry is answered from
# its call record (``CallRecord``), so the tool does not run again.
FRESH_S = 0.1


def reconnect_limit(value: float | None = None) -> float:
    """Seconds an unreachable server is retried: ``value``, else ``LATTICE_RECONNECT_S``,
    else 600."""
    source = "reconnect_s"
    if value is None:
        value = _settings.reconnect_s()
        if value is None:
            return DEFAULT_RECONNECT_S
        source = RECONNECT_ENV
    if not (value > 0 and math.isfinite(value)):
        raise ConfigurationError(f"{source} must be a positive number of seconds, got {value!r}")
    return float(value)


class ServerWaitInterceptor(Interceptor):
    """Holds each activity's result (or failure) until the worker's server answers."""

    def __init__(self, limit_s: float | None = None) -> None:
        self.limit_s = reconnect_limit(limit_s)

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _WaitForServer(next, self.limit_s)


class _WaitForServer(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, limit_s: float) -> None:
        super().__init__(next)
        self.limit_s = limit_s

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            result = await self.next.execute_activity(input)
        except Exception:  # a failure lost on the way would be tried again too
            await self._server_answers()
            raise
        await self._server_answers()
        return result

    async def _server_answers(self) -> None:
        """Return once the server answers a health check (one round trip, ~1 ms, when it
        does, shared with the activities ending with this one; none when it answered within
        ``FRESH_S``), or after the reconnect limit; a server that answers with an error counts.
        A local activity's outcome goes to its own worker, not to the server: held, it would
        run past its timeout and be cut off although it finished (a cheap tool's model heard
        it "did not finish")."""
        if activity.info().is_local:
            return
        try:
            client = activity.client()
        except RuntimeError:
            return  # a sync activity has no client: Core's retries alone
        deadline = time.monotonic() + self.limit_s
        service = client.service_client
        checks = _checks(service)
        while True:
            if await checks.answers(service):
                return
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(CHECK_EVERY_S)


class _Checks:
    """One server's health checks, shared by the activities that end together (kept by the
    service client they ask, weakly: it holds no reference to it)."""

    def __init__(self) -> None:
        self._answered_at = -math.inf
        self._pending: asyncio.Future[bool] | None = None

    async def answers(self, service: Any) -> bool:
        """Whether the server answers (now, or within ``FRESH_S``); one check at a time."""
        if time.monotonic() - self._answered_at < FRESH_S:
            return True
        pending = self._pending
        if pending is None or pending.get_loop() is not asyncio.get_running_loop():
            pending = self._pending = asyncio.ensure_future(self._check(service))
            pending.add_done_callback(self._done)
        return await asyncio.shield(pending)

    def _done(self, check: asyncio.Future[bool]) -> None:
        if self._pending is check:
            self._pending = None

    async def _check(self, service: Any) -> bool:
        try:
            serving = await service.check_health(timeout=timedelta(seconds=CHECK_TIMEOUT_S))
        except RPCError as err:
            if err.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
                return False
            serving = True  # a server that answers with an error counts
        except Exception:
            serving = True  # not ours to fail the activity for
        if serving:
            self._answered_at = time.monotonic()
        return bool(serving)


_CHECKS: weakref.WeakKeyDictionary[Any, _Checks] = weakref.WeakKeyDictionary()


def _checks(service: Any) -> _Checks:
    checks = _CHECKS.get(service)
    if checks is None:
        checks = _CHECKS[service] = _Checks()
    return checks
