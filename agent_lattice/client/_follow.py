"""Following a running run's workflow stream without adding anything to its history.

The stream's own subscriber (``WorkflowStreamClient.subscribe``) long-polls with workflow
updates: every poll is an accepted update, a workflow task and two history events, each
holding the messages again (about six events per turn on a query). Here the reader waits on
the run's history instead, a server-side long poll that writes nothing, and after each
completed workflow task (the only moment a workflow publishes) reads what was published
with the stream's poll *query*: no history, no workflow task on the server's side. A
workflow task that follows within ``COALESCE_S`` is read with the same query. The
stream stays the source of truth (offsets, order, continue-as-new); the messages published
by the workflow task that closes the run (its last reply and result) come with its output
(``AgentRunOutput.tail``), read from the same history long poll (a Failed run's output is in
its failure's details, a Canceled one's in its memo: see ``_closed``). A reader that finds the run
closed with an earlier task's messages unread reads them from the closed run's stream (the
same query, which a worker answers by replaying the run).

Cheaper still, when the run's worker can reach the caller: it sends what each workflow task
published once the server has taken the task (``Committed``, ``worker/_commits``), and the
reader, from the first such notice on, long-polls only the run's close and reads the stream
only when a notice seems lost (a live event names messages none brought, or the channel has
been quiet ``NOTICE_QUIET_S``); once two such reads in a row find messages the notices
missed, it reads as above for the rest of the run.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Iterator
from datetime import timedelta
from typing import Any

from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import Failure
from temporalio.client import Client, WorkflowHandle, WorkflowHistoryEventFilterType
from temporalio.contrib.workflow_streams import PollInput, PollResult
from temporalio.converter import PayloadConverter
from temporalio.service import RPCError

from .._errors import LatticeError
from ..live._channel import Committed
from ..workflows._types import AgentRunOutput
from ._closed import canceled_output, failed_output

__all__ = ["CLOSED_EVENTS", "Landed", "Truncated", "published"]

log = logging.getLogger("agent_lattice.query")

POLL_QUERY = "__temporal_workflow_stream_poll"  # the stream's poll, as a query
# a query the run's worker does not answer (it died with the run's task) is tried again on
# the next workflow task, or after this long
QUERY_TIMEOUT = timedelta(seconds=10)
RETRY_S = 1.0
# A tool turn publishes twice (the model's message, then the tool's result), one workflow
# task apart, and each read is a query: ~5.5 ms of CPU between server, worker and client.
# After a workflow task the reader waits this long for the next one and reads both at once
# (a fast tool's turn costs one query; a slow tool's message is this much late at most),
# unless live events name messages it has not read (``Landed``): then it reads at once.
COALESCE_S = 0.05
# A page of history that ends inside a workflow task (scheduled or started) is followed by
# its completion within milliseconds on a server with room: waiting this long before the next
# long poll reads the two together (pages per tool turn: 6.3 -> 2.6 at one query at a time;
# a loaded worker's tasks take longer, and its pages stay about six).
PAGE_GAP_S = 0.02
# With commit notices (a worker tells what each task published, ``worker/_commits``): a live
# event naming messages no notice brought yet waits this long for it before the reader asks;
# a side channel quiet this long while the run goes on is checked with one read (doubling up
# to the maximum), in case a notice was lost with no task after it (a lost notice is found at
# the run's next task: its notice starts past the reader). Under load a run's tasks are
# seconds apart and such a read finds what a notice is about to bring, so two reads in a row
# must find messages no notice brought in between before the reader stops relying on them.
NOTICE_GRACE_S = 0.25
NOTICE_QUIET_S = 5.0
NOTICE_QUIET_MAX_S = 30.0
# A run's first workflow task shows in its history about when its notice arrives, often a
# little before: a reader whose side channel may bring notices waits this long for that
# one before it reads the stream (a read is one query per query when notices come; a
# worker that sends none costs the first messages this much)
FIRST_NOTICE_S = 0.05

_PUBLISHING = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
_IN_TASK = {  # a page ending here is about to be followed by the task's completion
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
}
_CONTINUED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
_FAILED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED
_CANCELED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED
CLOSED_EVENTS = {  # however a run ends
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
}


class Truncated(LatticeError):
    """The reader is further behind than the stream keeps (after continue-as-new)."""


class Landed:
    """What a run is known to have published, from its side channel: how many messages, from
    its live events (``LiveItem.after``: a reader behind it reads at once instead of waiting
    to batch), and the messages themselves, from its worker's commit notices
    (``Committed``: durable, so the reader need not ask the server)."""

    def __init__(self) -> None:
        self.count = 0
        self.changed = asyncio.Event()
        self.noticed = False  # a commit notice came
        self.channel = False  # a side channel feeds this (notices may come)
        self.heard = time.monotonic()  # when the side channel last said anything
        self._items: dict[int, dict[str, Any]] = {}  # wire items by offset, from notices
        # the run's output as the reader read it from the close (None: it read none), so its
        # caller needs no long poll of its own for the result
        self._output: asyncio.Future[AgentRunOutput | None] | None = None

    def _outcome(self) -> asyncio.Future[AgentRunOutput | None]:
        if self._output is None:
            self._output = asyncio.get_running_loop().create_future()
        return self._output

    def read_output(self, output: AgentRunOutput | None) -> None:
        """The reader read the run's output (None: it ended without one)."""
        if not self._outcome().done():
            self._outcome().set_result(output)

    async def output(self) -> AgentRunOutput | None:
        """The run's output once the reader has read it, or None if it ended without."""
        return await asyncio.shield(self._outcome())

    def at_least(self, count: int) -> None:
        self.heard = time.monotonic()
        if count > self.count:
            self.count = count
            self.changed.set()

    def commit(self, notice: Committed) -> None:
        """What one of the run's workflow tasks published, once the server had taken it (the
        channel is one query's: every notice on it is its run's, or a run it continued as)."""
        self.noticed = True
        self.heard = time.monotonic()
        for item in notice.items:
            self._items.setdefault(int(item["offset"]), item)
        self.count = max(self.count, notice.upto)
        self.changed.set()

    def take_ready(self, offset: int) -> bool:
        """Whether a noticed item at ``offset`` waits to be taken."""
        return offset in self._items

    def take(self, offset: int) -> list[dict[str, Any]]:
        """The noticed wire items from ``offset`` on, in order, as far as they go unbroken."""
        for old in [o for o in self._items if o < offset]:
            del self._items[old]
        taken: list[dict[str, Any]] = []
        while (item := self._items.pop(offset, None)) is not None:
            taken.append(item)
            offset += 1
        return taken


class _Watch:
    """One run's history, long-polled: counts its completed workflow tasks (``next_task``)
    and says when the run closed (``continued``: into a new run of the same workflow id).
    ``changed`` is set at each, and by live events naming messages (``Landed``)."""

    def __init__(
        self, handle: WorkflowHandle[Any, Any], changed: asyncio.Event, *, close_only: bool = False
    ) -> None:
        self.changed = changed
        self.close_only = close_only  # the run's close event alone (its tasks are noticed)
        self.closed = False
        self.continued = False
        self.result: Payloads | None = None  # a completed run's result
        self.failure: Failure | None = None  # a failed run's failure (an error result's output)
        self.canceled = False  # the run ended Canceled (its output is in its memo)
        self.error: BaseException | None = None
        self.tasks = 0  # completed workflow tasks seen
        self._read = 0  # ... when the stream was last read (what that read covers)
        self._task = asyncio.ensure_future(self._run(handle))

    async def _run(self, handle: WorkflowHandle[Any, Any]) -> None:
        try:
            events = handle.fetch_history_events(
                wait_new_event=True,
                event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT
                if self.close_only
                else WorkflowHistoryEventFilterType.ALL_EVENT,
            )
            async for event in events:
                if event.event_type == _PUBLISHING:
                    self.tasks += 1
                    self.changed.set()
                elif event.event_type == _CONTINUED:
                    self.continued = self.closed = True
                elif event.event_type in CLOSED_EVENTS:
                    self.closed = True
                    if event.event_type == _COMPLETED:
                        self.result = event.workflow_execution_completed_event_attributes.result
                    elif event.event_type == _FAILED:
                        self.failure = event.workflow_execution_failed_event_attributes.failure
                    elif event.event_type == _CANCELED:
                        self.canceled = True
                page = events.current_page
                if (  # the last of its page, inside a task (the run's first: read at once)
                    self.tasks
                    and event.event_type in _IN_TASK
                    and page is not None
                    and events.current_page_index == len(page)
                ):
                    await asyncio.sleep(PAGE_GAP_S)
            self.closed = True
        except Exception as err:  # the reader decides (the server is away, ...)
            self.error = err
        finally:
            self.changed.set()

    @property
    def unread(self) -> int:
        """Completed workflow tasks seen since the last read."""
        return self.tasks - self._read

    def reading(self) -> None:
        """The stream is being read: it holds what every task seen so far published."""
        self._read = self.tasks

    async def next_task(self) -> None:
        """Until a workflow task completed after the last read (or the run closed, or the
        history could not be read)."""
        while self.tasks == self._read and not self.closed and self.error is None:
            self.changed.clear()
            await self.changed.wait()

    async def settle(self, at_most_s: float) -> None:
        """Until the next workflow task completes or live events name messages (what
        happened before does not count), at most ``at_most_s``."""
        self.changed.clear()
        await self.wait(at_most_s)

    async def wait(self, at_most_s: float) -> None:
        """Until anything changed, at most ``at_most_s``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), at_most_s)
        self.changed.clear()

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task


async def _poll(handle: WorkflowHandle[Any, Any], topic: str, offset: int) -> PollResult:
    return await handle.query(
        POLL_QUERY,
        PollInput(topics=[topic], from_offset=offset),
        result_type=PollResult,
        rpc_timeout=QUERY_TIMEOUT,
    )


def _payload(data: str) -> Payload:
    payload = Payload()
    payload.ParseFromString(base64.b64decode(data))
    return payload


def _items(
    workflow_id: str, result: PollResult, offset: int, converter: PayloadConverter
) -> Iterator[tuple[int, Any]]:
    """Each item of a poll from ``offset`` with the offset after it."""
    if result.items and result.items[0].offset > offset:
        raise Truncated(f"{workflow_id}: offset {offset} is no longer kept")
    for wire in result.items:
        if wire.offset < offset:  # read already (from a commit notice)
            continue
        yield wire.offset + 1, converter.from_payload(_payload(wire.data))


async def _closed_run_items(
    handle: WorkflowHandle[Any, Any],
    topic: str,
    offset: int,
    upto: int,
    converter: PayloadConverter,
) -> list[Any]:
    """The items ``offset`` to ``upto`` of a closed run's stream: it answers the stream's
    query too (a worker replays it)."""
    items: list[Any] = []
    while offset < upto:
        try:
            result = await _poll(handle, topic, offset)
        except RPCError as err:
            raise Truncated(f"{handle.id}: messages {offset}-{upto} unread") from err
        before = offset
        for after, item in _items(handle.id, result, offset, converter):
            if after > upto:
                break
            items.append(item)
            offset = after
        if offset == before:
            raise Truncated(f"{handle.id}: messages {offset}-{upto} unread")
    return items


async def published(
    client: Client,
    workflow_id: str,
    topic: str,
    from_offset: int = 0,
    landed: Landed | None = None,
) -> AsyncGenerator[Any, None]:
    """The items published on ``topic`` from ``from_offset`` (decoded by the client's payload
    converter) while the run (and the runs it continues as) is running; ends once it closed.
    Raises :class:`Truncated` when the stream no longer holds ``from_offset``. ``landed``:
    what the run's side channel says it published (live events, commit notices)."""
    reader = _Reader(client, workflow_id, topic, from_offset, landed or Landed())
    while True:
        handle = client.get_workflow_handle(workflow_id)  # the latest run
        reader.watch = _Watch(handle, reader.landed.changed, close_only=reader.noticing)
        try:
            if not reader.watch.close_only:
                # nothing is published before the run's first workflow task completes (a run
                # under way has: its history's first page says so)
                await reader.watch.next_task()
                await reader.first_notice()
            reader.quiet = NOTICE_QUIET_S
            # the run's last workflow task closes it: what it published is the record's to
            # give (or, continued as new, the next run's stream's)
            while not reader.watch.closed:
                if reader.noticing and not reader.watch.close_only:
                    # the worker tells what each task published: the run's close is all the
                    # history this reader needs
                    await reader.rewatch(handle, close_only=True)
                    continue
                step = reader.noticed(handle) if reader.watch.close_only else reader.read(handle)
                async for item in step:
                    yield item
                if reader.watch.error is not None:  # the reader's caller hears why
                    raise reader.watch.error
            if reader.watch.error is not None:
                raise reader.watch.error
        finally:
            await reader.watch.stop()
        for item in reader.take():  # noticed before the close was read
            yield item
        watch = reader.watch
        output = await _closing_output(client, handle, watch)
        if output is not None:
            # what the closing workflow task published travels in the run's output
            reader.landed.read_output(output)
            if reader.offset < output.tail_from:
                # the run closed before the reader read an earlier task's messages
                for item in await _closed_run_items(
                    handle, topic, reader.offset, output.tail_from, reader.converter
                ):
                    yield item
                reader.offset = output.tail_from
            for item in output.tail[reader.offset - output.tail_from :]:
                yield item
        if not watch.continued:
            return


async def _closing_output(
    client: Client, handle: WorkflowHandle[Any, Any], watch: _Watch
) -> AgentRunOutput | None:
    """The output the run's close carries: a Completed run's result, a Failed one's error
    result (in the failure's details), a Canceled one's (in its memo); see ``_closed``."""
    if watch.result is not None:
        (output,) = await client.data_converter.decode(watch.result.payloads, [AgentRunOutput])
        return output
    if watch.failure is not None:
        return await failed_output(client, watch.failure)
    if watch.canceled:
        return await canceled_output(client, handle.id, handle.run_id)
    return None


class _Reader:
    """One reader's place in a workflow's stream, across its runs."""

    watch: _Watch

    def __init__(
        self, client: Client, workflow_id: str, topic: str, offset: int, landed: Landed
    ) -> None:
        self.workflow_id, self.topic, self.offset, self.landed = workflow_id, topic, offset, landed
        self.converter = client.data_converter.payload_converter
        self.trusted = True  # commit notices have not missed anything a read found
        self.missed = False  # the last quiet read found messages no notice had brought
        self.quiet = NOTICE_QUIET_S
        self.more_ready = False  # the last read stopped at its size limit

    @property
    def noticing(self) -> bool:
        """Whether the run's worker tells what each task published (and has missed nothing)."""
        return self.landed.noticed and self.trusted

    async def rewatch(self, handle: WorkflowHandle[Any, Any], *, close_only: bool) -> None:
        await self.watch.stop()
        self.watch = _Watch(handle, self.landed.changed, close_only=close_only)

    async def first_notice(self) -> None:
        """After the run's first workflow task: wait a moment for its commit notice, when
        one may come (``FIRST_NOTICE_S``)."""
        landed, watch = self.landed, self.watch
        if not (landed.channel and self.trusted) or landed.noticed:
            return
        deadline = time.monotonic() + FIRST_NOTICE_S
        while not landed.noticed and not watch.closed and watch.error is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await watch.wait(left)

    def take(self) -> Iterator[Any]:
        for wire in self.landed.take(self.offset):
            yield self.converter.from_payload(_payload(wire["data"]))
            self.offset = int(wire["offset"]) + 1

    async def _poll(self, handle: WorkflowHandle[Any, Any]) -> list[Any] | None:
        """The stream's items from the reader's offset (None when it could not be read)."""
        try:
            result = await _poll(handle, self.topic, self.offset)
        except RPCError as err:
            log.debug("stream of %s not read yet: %s", self.workflow_id, err)
            await self.watch.wait(RETRY_S)
            return None
        items: list[Any] = []
        for after, item in _items(self.workflow_id, result, self.offset, self.converter):
            items.append(item)
            self.offset = after
        self.more_ready = result.more_ready
        return items

    async def noticed(self, handle: WorkflowHandle[Any, Any]) -> AsyncGenerator[Any, None]:
        """One step with commit notices: what they brought, else a read when they seem to
        have missed something."""
        for item in self.take():
            self.missed = False  # notices come
            yield item
        landed, watch = self.landed, self.watch
        behind = landed.count > self.offset
        if behind:  # named, not noticed: the notice may be on its way
            await watch.settle(NOTICE_GRACE_S)
            if landed.count <= self.offset or landed.take_ready(self.offset):
                return
        elif (since := time.monotonic() - landed.heard) < self.quiet:
            await watch.wait(self.quiet - since)
            return
        # behind with no notice, or quiet too long: read the stream (a notice lost with a
        # worker killed after its task, or a caller the worker cannot reach)
        items = await self._poll(handle)
        if items is None:
            return
        for item in items:
            yield item
        if items and not behind:
            if self.missed:  # twice, no notice between: read as without them from now on
                self.trusted = False
                await self.rewatch(handle, close_only=False)
            self.missed = True
        self.quiet = min(NOTICE_QUIET_MAX_S, self.quiet * 2)
        landed.heard = time.monotonic()

    async def read(self, handle: WorkflowHandle[Any, Any]) -> AsyncGenerator[Any, None]:
        """One step without notices: read after each workflow task the history shows."""
        watch = self.watch
        watch.reading()
        items = await self._poll(handle)
        if items is None:
            return
        for item in items:
            yield item
        if not self.more_ready:
            await watch.next_task()
            if not watch.closed and watch.unread == 1 and self.landed.count <= self.offset:
                # the next workflow task, if it comes soon, is read with this one (with two
                # unread, read now: the next may close the run, and its output carries only
                # what the closing task published)
                await watch.settle(COALESCE_S)
