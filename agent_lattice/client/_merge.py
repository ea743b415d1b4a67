"""The one queue a streaming query reads: live token events, durable messages, member events.

Several producers write into it at once (the live channel, the durable-message reader, one
reader per team member), so each event travels as ONE queue item: an event and what it needs
to be ordered (a live event's count of preceding durable messages) can never be split by
another producer's put.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeGuard

from .._messages import (
    AgentMessageEvent,
    AssistantMessage,
    ResultMessage,
    SDKMessage,
    StreamEventMessage,
    SystemMessage,
    TeamAgentEvent,
    TeamMessageEvent,
    UserMessage,
)
from ..live._channel import Committed, LiveItem, LiveLost
from ..workflows._mail_types import TeamRunOutput
from ..workflows._types import AgentRunOutput
from ._follow import Landed

__all__ = ["Failed", "Live", "Mark", "Merge", "Nested", "Producers", "follows", "lost_feed"]

log = logging.getLogger("agent_lattice.query")


class DurableSource(Protocol):
    """Where durable messages are read from (the runtime)."""

    def durable_messages(
        self,
        workflow_id: str,
        *,
        from_offset: int = 0,
        appears_within: float | None = None,
        landed: Landed | None = None,
    ) -> AsyncIterator[SDKMessage]: ...


# Bounded: a consumer that stops reading slows the producers down instead of piling up events.
QUEUE_SIZE = 256


class Mark(enum.Enum):
    END = "end"  # the run's durable messages ended
    STORE_FAILED = "store_failed"  # a history store bound to fail_on_error failed


@dataclass(frozen=True)
class Live:
    """A live (side-channel) stream event, or the note that a feed stopped early, and the
    number of durable messages the workflow had published before the model request it
    belongs to."""

    event: StreamEventMessage | SystemMessage
    after: int


def lost_feed(lost: LiveLost, session_id: str) -> SystemMessage:
    """What the caller sees of a live feed that stopped before its end."""
    if lost.refused:
        why = "a connection to the live channel sent a line not sealed with its key: refused"
    elif lost.turn is None:
        why = "the live feed stopped before its first event"
    else:
        why = f"the live feed of turn {lost.turn} (attempt {lost.attempt}) stopped before its end"
    return SystemMessage(
        subtype="live_feed_lost",
        session_id=session_id,
        turn=lost.turn,
        attempt=lost.attempt,
        message=f"{why}; the durable messages follow",
    )


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

    def __init__(self, size: int = QUEUE_SIZE, *, seen: int = 0) -> None:
        self._queue: asyncio.Queue[Item] = asyncio.Queue(size)
        self._seen = seen  # durable messages the caller has been given (or skipped)
        self._held: list[Live] = []
        self.shown: set[tuple[str, str, str, str]] = set()  # the team events the caller got

    async def put_live(self, event: StreamEventMessage | SystemMessage, after: int) -> None:
        await self._queue.put(Live(event, after))

    async def put(self, item: Nested | Failed | Mark | SDKMessage) -> None:
        await self._queue.put(item)

    def get_nowait(self) -> Item | None:
        return None if self._queue.empty() else self._queue.get_nowait()

    async def get(self) -> Item:
        return await self._queue.get()

    def release(self, live: Live) -> list[StreamEventMessage | SystemMessage]:
        """The live event now, or nothing yet (held until its durable messages are seen)."""
        if live.after > self._seen or self._held:
            self._held.append(live)
            return []
        return [live.event]

    def delivered(self, message: object = None) -> list[StreamEventMessage | SystemMessage]:
        """A durable message reached the caller: the held live events it was waiting for."""
        self._seen += 1
        if isinstance(message, TeamMessageEvent | TeamAgentEvent):
            self.shown.add(_key(message))
        released = []
        while self._held and self._held[0].after <= self._seen:
            released.append(self._held.pop(0).event)
        return released

    def flush(self) -> list[StreamEventMessage | SystemMessage]:
        """Every live event still held (the run's result arrived)."""
        held, self._held = self._held, []
        return [live.event for live in held]

    async def rest_of(
        self, members: list[asyncio.Task[None]], within: float = 30.0
    ) -> AsyncIterator[AgentMessageEvent | TeamMessageEvent | TeamAgentEvent]:
        """The member messages still on their way when the lead's result arrives: until every
        member's reader ended and what they put is taken (at once when there are none)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            running = [t for t in members if not t.done()]
            if self._queue.empty():
                left = deadline - loop.time()
                if not running or left <= 0:
                    return
                getter = asyncio.ensure_future(self._queue.get())
                try:
                    await asyncio.wait(
                        [getter, *running], timeout=left, return_when=asyncio.FIRST_COMPLETED
                    )
                except BaseException:
                    getter.cancel()
                    raise
                if not getter.done():  # a member ended (or time is up): nothing taken
                    getter.cancel()
                    continue
                item = getter.result()
            else:
                item = self._queue.get_nowait()
            if isinstance(item, Nested):
                yield item.event


class Producers:
    """What writes into one query's merge: the live channel, the run's durable messages, and a
    reader per team member run (nested teams followed recursively)."""

    def __init__(
        self, merge: Merge, source: DurableSource, session_id: str, appears_s: float
    ) -> None:
        self.merge, self.source, self.session_id = merge, source, session_id
        self.appears_s = appears_s  # how long a run's workflow may take to appear
        self.members: list[asyncio.Task[None]] = []
        self.landed = Landed()  # what the live events say the run published

    async def live(self, item: LiveItem | Committed | LiveLost) -> None:
        if isinstance(item, Committed):  # what a task published, from its worker
            self.landed.commit(item)
            return
        if isinstance(item, LiveLost):
            await self.merge.put_live(lost_feed(item, self.session_id), item.after)
            return
        self.landed.at_least(item.after)  # held until those are read: read them now
        event = StreamEventMessage(
            event=item.event, session_id=self.session_id, turn=item.turn, attempt=item.attempt
        )
        await self.merge.put_live(event, item.after)

    async def durable(
        self, workflow_id: str, landed: Callable[[SDKMessage], Awaitable[bool]]
    ) -> None:
        """The run's durable messages, each written to the history store (``landed``) before
        the caller sees it; a failed write ends them with ``Mark.STORE_FAILED``."""
        try:
            async for message in self.source.durable_messages(
                workflow_id, appears_within=self.appears_s, landed=self.landed
            ):
                if not await landed(message):
                    await self.merge.put(Mark.STORE_FAILED)
                    return
                await self.merge.put(message)
        except Exception as err:  # the caller hears why the messages stopped
            await self.merge.put(Failed(err))
        finally:
            self.landed.read_output(None)  # if it read none by now, it reads none
            await self.merge.put(Mark.END)

    def follow(self, event: TeamAgentEvent) -> None:
        """A member's work started: its messages join the stream."""
        self.members.append(asyncio.create_task(self._member(event)))

    async def _member(self, event: TeamAgentEvent) -> None:
        """A member's own messages; a member that is a team shows its lead's messages, its
        own team events, and (recursively) its members'."""
        source = event.lead_workflow_id or event.workflow_id
        assert source is not None
        try:
            async for nested in self.source.durable_messages(source, appears_within=self.appears_s):
                if isinstance(nested, TeamMessageEvent | TeamAgentEvent | AgentMessageEvent):
                    # the inner team's own event, or a message of its host AgentLike member
                    await self.merge.put(Nested(nested))
                    if follows(nested):
                        self.follow(nested)
                elif isinstance(
                    nested, SystemMessage | AssistantMessage | UserMessage | ResultMessage
                ):
                    wrapped = AgentMessageEvent(
                        team=event.team,
                        member=event.member,
                        workflow_id=source,
                        message=nested,
                        session_id=self.session_id,
                    )
                    await self.merge.put(Nested(wrapped))
        except Exception as err:  # nested events are a view: never fail the query for them
            log.debug("messages of %s unavailable: %s", source, err)

    async def late(
        self, output: AgentRunOutput | None
    ) -> AsyncIterator[AgentMessageEvent | TeamMessageEvent | TeamAgentEvent]:
        """A team's events its lead's stream did not carry (they came as the lead's run
        closed, or after: the work it left behind), from the team run's output, but those the
        caller got already; a member's work that started then has its messages follow."""
        for event in output.team_events if isinstance(output, TeamRunOutput) else []:
            if _key(event) in self.merge.shown:
                continue
            yield event
            if follows(event):
                self.follow(event)
                async for nested in self.merge.rest_of(self.members):
                    yield nested

    def stop(self) -> None:
        for task in self.members:
            task.cancel()


def _key(event: TeamMessageEvent | TeamAgentEvent) -> tuple[str, str, str, str]:
    """What tells one team event from another: its team, message or work item, and event."""
    if isinstance(event, TeamMessageEvent):
        return (event.type, event.team, event.message_id, event.event)
    return (event.type, event.team, event.work_item_id, event.event)


def follows(item: object) -> TypeGuard[TeamAgentEvent]:
    """A member's work started whose messages can be followed: an agent's query, or a
    nested team's (through its lead's query)."""
    return (
        isinstance(item, TeamAgentEvent)
        and item.event == "started"
        and bool(item.workflow_id)  # a host AgentLike member's work has no workflow
        and (not item.workflow_id.startswith("team-") or item.lead_workflow_id is not None)
    )
