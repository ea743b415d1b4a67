"""The one queue a streaming query reads: live token events, durable messages, member events.

Several producers write into it at once (the live channel, the durable-message reader, one
reader per team member), so each event travels as ONE queue item: an event and what it needs
to be ordered (a live event's count of preceding durable messages) can never be split by
another producer's put.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator
from dataclasses import dataclass

from .._messages import (
    AgentMessageEvent,
    SDKMessage,
    StreamEventMessage,
    TeamAgentEvent,
    TeamMessageEvent,
)

__all__ = ["Failed", "Live", "Mark", "Merge", "Nested"]

# Bounded: a consumer that stops reading slows the producers down instead of piling up events.
QUEUE_SIZE = 256


class Mark(enum.Enum):
    END = "end"  # the run's durable messages ended
    STORE_FAILED = "store_failed"  # a history store bound to fail_on_error failed


@dataclass(frozen=True)
class Live:
    """A live (side-channel) stream event and the number of durable messages the workflow had
    published before the model request it belongs to."""

    event: StreamEventMessage
    after: int


@dataclass(frozen=True)
class Nested:
    """A member's message (or a nested team's event) on its way into the team's stream."""

    event: AgentMessageEvent | TeamMessageEvent | TeamAgentEvent


@dataclass(frozen=True)
class Failed:
    """Why the run's durable messages stopped before its result."""

    error: Exception


Item = Live | Nested | Failed | Mark | SDKMessage


class Merge:
    """The queue and the release rule: a live event reaches the caller only after the durable
    messages that preceded its request, so the caller sees the workflow's order."""

    def __init__(self, size: int = QUEUE_SIZE) -> None:
        self._queue: asyncio.Queue[Item] = asyncio.Queue(size)
        self._seen = 0  # durable messages the caller has been given
        self._held: list[Live] = []

    async def put_live(self, event: StreamEventMessage, after: int) -> None:
        await self._queue.put(Live(event, after))

    async def put(self, item: Nested | Failed | Mark | SDKMessage) -> None:
        await self._queue.put(item)

    def get_nowait(self) -> Item | None:
        return None if self._queue.empty() else self._queue.get_nowait()

    async def get(self) -> Item:
        return await self._queue.get()

    def release(self, live: Live) -> list[StreamEventMessage]:
        """The live event now, or nothing yet (held until its durable messages are seen)."""
        if live.after > self._seen or self._held:
            self._held.append(live)
            return []
        return [live.event]

    def delivered(self) -> list[StreamEventMessage]:
        """A durable message reached the caller: the held live events it was waiting for."""
        self._seen += 1
        released = []
        while self._held and self._held[0].after <= self._seen:
            released.append(self._held.pop(0).event)
        return released

    def flush(self) -> list[StreamEventMessage]:
        """Every live event still held (the run's result arrived)."""
        held, self._held = self._held, []
        return [live.event for live in held]

    async def rest_of(
        self, members: list[asyncio.Task[None]], within: float = 30.0
    ) -> AsyncIterator[AgentMessageEvent | TeamMessageEvent | TeamAgentEvent]:
        """The member messages still on their way when the lead's result arrives."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while loop.time() < deadline:
            try:
                item = await asyncio.wait_for(self._queue.get(), 0.05)
            except TimeoutError:
                if all(t.done() for t in members):
                    break
                continue
            if isinstance(item, Nested):
                yield item.event
