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
        """Return once the server answers a health check (one round trip, ~0.5 ms, when it
        does), or after the reconnect limit; a server that answers with an error counts.
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
        while True:
            try:
                if await client.service_client.check_health(
                    timeout=timedelta(seconds=CHECK_TIMEOUT_S)
                ):
                    return
            except RPCError as err:
                if err.status not in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
                    return
            except Exception:
                return  # not ours to fail the activity for
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(CHECK_EVERY_S)
