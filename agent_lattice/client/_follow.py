"""Following a running run's workflow stream without adding anything to its history.

The stream's own subscriber (``WorkflowStreamClient.subscribe``) long-polls with workflow
updates: every poll is an accepted update, a workflow task and two history events, each
holding the messages again (about six events per turn on a query). Here the reader waits on
the run's history instead, a server-side long poll that writes nothing, and after each
completed workflow task (the only moment a workflow publishes) reads what was published
with the stream's poll *query*: no history, no workflow task on the server's side. The
stream stays the source of truth (offsets, order, continue-as-new); the messages published
by the workflow task that closes the run (its last reply and result) come with its output
(``AgentRunOutput.tail``), read from the same history long poll.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import AsyncGenerator
from datetime import timedelta
from typing import Any

from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.workflow_streams import PollInput, PollResult
from temporalio.service import RPCError

from .._errors import LatticeError
from ..workflows._types import AgentRunOutput

__all__ = ["CLOSED_EVENTS", "Truncated", "published"]

log = logging.getLogger("agent_lattice.query")

POLL_QUERY = "__temporal_workflow_stream_poll"  # the stream's poll, as a query
# a query the run's worker does not answer (it died with the run's task) is tried again on
# the next workflow task, or after this long
QUERY_TIMEOUT = timedelta(seconds=10)
RETRY_S = 1.0

_PUBLISHING = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
_CONTINUED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
CLOSED_EVENTS = {  # however a run ends
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
}


class Truncated(LatticeError):
    """The reader is further behind than the stream keeps (after continue-as-new)."""


class _Watch:
    """One run's history, long-polled: wakes the reader at each completed workflow task and
    says when the run closed (``continued``: into a new run of the same workflow id)."""

    def __init__(self, handle: WorkflowHandle[Any, Any]) -> None:
        self.changed = asyncio.Event()
        self.closed = False
        self.continued = False
        self.result: Payloads | None = None  # a completed run's result
        self.error: BaseException | None = None
        self._task = asyncio.ensure_future(self._run(handle))

    async def _run(self, handle: WorkflowHandle[Any, Any]) -> None:
        try:
            async for event in handle.fetch_history_events(wait_new_event=True):
                if event.event_type == _PUBLISHING:
                    self.changed.set()
                elif event.event_type == _CONTINUED:
                    self.continued = self.closed = True
                elif event.event_type in CLOSED_EVENTS:
                    self.closed = True
                    if event.event_type == _COMPLETED:
                        self.result = event.workflow_execution_completed_event_attributes.result
            self.closed = True
        except Exception as err:  # the reader decides (the server is away, ...)
            self.error = err
        finally:
            self.changed.set()

    async def wait(self, at_most_s: float | None = None) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), at_most_s)
        self.changed.clear()

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task


async def published(
    client: Client, workflow_id: str, topic: str, from_offset: int = 0
) -> AsyncGenerator[Any, None]:
    """The items published on ``topic`` from ``from_offset`` (decoded by the client's payload
    converter) while the run (and the runs it continues as) is running; ends once it closed.
    Raises :class:`Truncated` when the stream no longer holds ``from_offset``."""
    converter = client.data_converter.payload_converter
    offset = from_offset
    while True:
        handle = client.get_workflow_handle(workflow_id)  # the latest run
        watch = _Watch(handle)
        try:
            # the run's last workflow task closes it: what it published is the record's to
            # give (or, continued as new, the next run's stream's)
            while not watch.closed:
                try:
                    result = await handle.query(
                        POLL_QUERY,
                        PollInput(topics=[topic], from_offset=offset),
                        result_type=PollResult,
                        rpc_timeout=QUERY_TIMEOUT,
                    )
                except RPCError as err:
                    log.debug("stream of %s not read yet: %s", workflow_id, err)
                    await watch.wait(RETRY_S)
                    continue
                if result.items and result.items[0].offset > offset:
                    raise Truncated(f"{workflow_id}: offset {offset} is no longer kept")
                for wire in result.items:
                    payload = Payload()
                    payload.ParseFromString(base64.b64decode(wire.data))
                    yield converter.from_payload(payload)
                    offset = wire.offset + 1
                if not result.more_ready:
                    await watch.wait()
                if watch.error is not None:
                    raise watch.error
        finally:
            await watch.stop()
        if watch.result is not None:
            # what the closing workflow task published travels in the run's output
            (output,) = await client.data_converter.decode(watch.result.payloads, [AgentRunOutput])
            if output.tail_from > offset:
                raise Truncated(f"{workflow_id}: messages {offset}-{output.tail_from} unread")
            for item in output.tail[offset - output.tail_from :]:
                yield item
        if not watch.continued:
            return
