"""Attaching to a run from anywhere: its durable messages and, while it runs, live tokens.

The durable messages come from the run's workflow stream (``Runtime.durable_messages``).
The live tokens come from the worker that runs the model request (``live/_feeds``): the
run's pending model activity names that worker (its identity carries the live port), the
reader connects there and gets the current attempt's events from its first one. Each event
is released after the durable messages that preceded its request (the same rule as a
query's own stream, ``_merge``), and one of a turn whose assistant message was already
given is dropped: the reader never sees text twice, nor an earlier attempt's text after a
retry (a feed holds one attempt).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any, Protocol

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowExecutionStatus

from .._messages import AssistantMessage, ResultMessage, SDKMessage, StreamEventMessage
from ..live._channel import LiveItem, LiveLost
from ..live._feeds import feed_channel, live_address, live_key
from ..live._keys import ChannelKey, ForgedLine, Seal, new_nonce
from ..workflows._contract import ActivityName
from ._follow import Landed
from ._merge import DurableSource, Failed, Live, Mark, Merge, Nested, lost_feed


class Source(DurableSource, Protocol):
    """What attaching needs of the runtime: its client, its channel key and the run's durable
    messages."""

    client: Client

    def channel_key(self) -> ChannelKey | None: ...


__all__ = ["attached_messages"]

log = logging.getLogger("agent_lattice.query")

# Between looks for the next model request: from this, growing while nothing changes.
POLL_S, POLL_MAX_S = 0.05, 1.0
_CONNECT_S = 2.0
_FEED_OPENS_S = 2.0  # a request just started may not have opened its feed yet


class _Follower:
    """Finds the run's model request in flight, reads its feed into the merge, repeats."""

    def __init__(
        self, client: Client, workflow_id: str, merge: Merge, key: ChannelKey | None
    ) -> None:
        self.handle = client.get_workflow_handle(workflow_id)
        self.merge = merge
        self.key = key  # the lines of a feed are believed when sealed with it
        self.landed = Landed()  # what the live events say the run published
        self.read: set[tuple[str, str, int]] = set()  # attempts already read to the end
        self.poll_s = POLL_S

    def nudge(self) -> None:
        """A durable message arrived: the next request is near, look again soon."""
        self.poll_s = POLL_S

    async def run(self) -> None:
        if self.key is None:
            return  # no key to believe a feed by: the durable messages alone
        try:
            await self._follow()
        except Exception as err:  # live tokens are a view: the durable messages go on
            log.debug("live tokens of %s unavailable: %s", self.handle.id, err)

    async def _follow(self) -> None:
        while True:
            description = await self.handle.describe()
            if description.status != WorkflowExecutionStatus.RUNNING:
                return
            target = self._in_flight(description.run_id, description.raw_description)
            if target is None:
                await asyncio.sleep(self.poll_s)
                self.poll_s = min(self.poll_s * 1.5, POLL_MAX_S)
                continue
            run_id, activity_id, attempt, address = target
            if await self._read(address, live_key(run_id, activity_id)):
                self.read.add((run_id, activity_id, attempt))
                self.poll_s = POLL_S
            else:
                await asyncio.sleep(POLL_S)

    def _in_flight(self, run_id: str, raw: Any) -> tuple[str, str, int, str] | None:
        for pending in raw.pending_activities:
            if (
                pending.activity_type.name != ActivityName.MODEL_REQUEST
                or pending.state != PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                or (run_id, pending.activity_id, pending.attempt) in self.read
            ):
                continue
            address = live_address(pending.last_worker_identity)
            if address is None:  # a worker that serves no live feed: durable messages only
                self.read.add((run_id, pending.activity_id, pending.attempt))
                continue
            return run_id, pending.activity_id, pending.attempt, address
        return None

    async def _read(self, address: str, watch: str) -> bool:
        """The feed's events into the merge; False when it is not open (yet)."""
        assert self.key is not None
        host, port = address.removeprefix("tcp://").rsplit(":", 1)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _FEED_OPENS_S
        while True:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, int(port), limit=2**24), _CONNECT_S
                )
            except (OSError, TimeoutError) as err:
                log.debug("live feed at %s unreachable: %s", address, err)
                return True  # not retried: the durable messages carry the turn
            nonce = new_nonce()
            hello = {"watch": watch, "keys": [self.key.kid], "nonce": nonce.hex()}
            try:
                writer.write(json.dumps(hello).encode() + b"\n")
                await writer.drain()
                answer = (await reader.readline()).strip()
                if answer == b"unkeyed":
                    log.debug("the worker at %s holds no channel key of this process", address)
                    return True
                if answer.startswith(b"ready"):
                    await self._forward(reader, self.key.seal(feed_channel(watch), nonce))
                    return True
            except (OSError, ValueError, asyncio.IncompleteReadError) as err:
                log.debug("live feed at %s ended: %s", address, err)
                return True
            finally:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
            if loop.time() >= deadline:
                return True  # the request ended before we came (or the worker restarted)
            await asyncio.sleep(POLL_S)

    async def _forward(self, reader: asyncio.StreamReader, seal: Seal) -> None:
        """The feed's sealed lines until its end; one that stops before (or does not open)
        is told as a lost feed."""
        lost = LiveLost()
        try:
            while line := await reader.readline():
                data = json.loads(seal.open(line.rstrip(b"\n")))
                if data.get("end"):
                    return
                item = LiveItem.model_validate(data)
                lost = LiveLost(turn=item.turn, attempt=item.attempt, after=item.after)
                self.landed.at_least(item.after)  # held until those are read: read them now
                event = StreamEventMessage(
                    event=item.event, session_id="", turn=item.turn, attempt=item.attempt
                )
                await self.merge.put_live(event, item.after)
        except ForgedLine as err:
            log.warning("refused a live feed: %s", err)
            lost = LiveLost(refused=True)
        except (OSError, asyncio.IncompleteReadError) as err:
            log.debug("live feed ended: %s", err)
        await self.merge.put_live(lost_feed(lost, ""), lost.after)


async def _durable(
    runtime: Source, workflow_id: str, from_offset: int, merge: Merge, landed: Landed
) -> None:
    try:
        async for message in runtime.durable_messages(
            workflow_id, from_offset=from_offset, landed=landed
        ):
            await merge.put(message)
    except Exception as err:
        await merge.put(Failed(err))
    finally:
        await merge.put(Mark.END)


async def attached_messages(
    runtime: Source, workflow_id: str, from_offset: int = 0
) -> AsyncIterator[SDKMessage]:
    """The run's durable messages from ``from_offset`` with its live stream events."""
    merge = Merge(seen=from_offset)
    follower = _Follower(runtime.client, workflow_id, merge, runtime.channel_key())
    durable = asyncio.create_task(
        _durable(runtime, workflow_id, from_offset, merge, follower.landed)
    )
    live = asyncio.create_task(follower.run())
    session_id, closed_turn = "", 0
    try:
        while (item := await merge.get()) is not Mark.END:
            if isinstance(item, Failed):
                raise item.error
            if isinstance(item, Live):
                released = merge.release(item)
            elif isinstance(item, Mark | Nested):
                continue
            else:
                session_id = getattr(item, "session_id", None) or session_id
                if isinstance(item, AssistantMessage):
                    closed_turn = max(closed_turn, item.turn)
                follower.nudge()
                yield item
                if isinstance(item, ResultMessage):
                    return
                released = merge.delivered()
            for event in released:
                if (event.turn or 0) > closed_turn:  # a turn already given whole is not re-shown
                    yield event.model_copy(update={"session_id": session_id})
    finally:
        for task in (live, durable):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
