"""A signal its handler cannot take is dropped and logged, and the run goes on.

The SDK drops a signal whose payloads do not convert (one that reached a worker with keys
unencrypted, a value of the wrong shape), with a log line. A signal with more or fewer
arguments than its handler takes converts, though: ``temporal workflow signal --name send``
with no ``--input`` has no payload at all, so nothing to decode or to refuse. The handler's
TypeError then failed the workflow task at every retry: anyone who can signal a run could
stop it for good with one such signal in its history. Here it is dropped as the SDK drops
one it cannot convert, before any handler runs.
"""

from __future__ import annotations

import inspect
from typing import Any

from temporalio import workflow
from temporalio.worker import HandleSignalInput, Interceptor, WorkflowInboundInterceptor

__all__ = ["SignalArgumentsInterceptor"]


class SignalArgumentsInterceptor(Interceptor):
    """Drops a signal whose arguments its handler cannot take (see the module)."""

    def workflow_interceptor_class(self, input: Any) -> type[WorkflowInboundInterceptor]:
        return _CheckedSignals


class _CheckedSignals(WorkflowInboundInterceptor):
    async def handle_signal(self, input: HandleSignalInput) -> None:
        handler = workflow.get_signal_handler(input.signal)
        if handler is not None:
            try:
                inspect.signature(handler).bind(*input.args)
            except TypeError as err:
                workflow.logger.warning(
                    "signal %r with %d argument(s) dropped: its handler takes other (%s)",
                    input.signal,
                    len(input.args),
                    err,
                )
                return
        await self.next.handle_signal(input)
