"""The merge of a streaming query: live events and durable messages from concurrent producers."""

from __future__ import annotations

import asyncio

from agent_lattice import SystemMessage
from agent_lattice._messages import AgentMessageEvent, StreamEventMessage
from agent_lattice.client._merge import Live, Merge, Nested

N = 200


def _live(i: int) -> StreamEventMessage:
    return StreamEventMessage(event={"i": i}, session_id="s", turn=i)


def _durable(i: int) -> SystemMessage:
    return SystemMessage(session_id=f"d{i}")


async def test_each_live_event_keeps_its_partner_when_producers_race():
    # A tiny queue makes every put wait, which is where another producer could cut in
    # between an event and what travels with it.
    merge = Merge(size=1)

    async def live_channel() -> None:
        for i in range(N):
            await merge.put_live(_live(i), i)

    async def durable_reader() -> None:
        for i in range(N):
            await merge.put(_durable(i))

    producers = asyncio.gather(live_channel(), durable_reader())
    got = []
    while True:
        try:
            got.append(await asyncio.wait_for(merge.get(), 0.3))
        except TimeoutError:
            break
    await asyncio.wait_for(producers, 1.0)

    lives = [item for item in got if isinstance(item, Live)]
    durables = [item for item in got if isinstance(item, SystemMessage)]
    strays = [item for item in got if not isinstance(item, Live | SystemMessage)]
    assert strays == []
    assert [(live.event.event["i"], live.after) for live in lives] == [(i, i) for i in range(N)]
    assert [d.session_id for d in durables] == [f"d{i}" for i in range(N)]


async def test_a_live_event_waits_for_the_durable_messages_before_its_request():
    merge = Merge()
    # the second request's tokens (after one durable message) arrive before that message
    assert merge.release(Live(_live(1), 0)) == [_live(1)]
    assert merge.release(Live(_live(2), 1)) == []
    assert merge.release(Live(_live(3), 0)) == []  # never overtakes one already held
    assert merge.delivered() == [_live(2), _live(3)]
    assert merge.release(Live(_live(4), 3)) == []
    assert merge.delivered() == []
    assert merge.flush() == [_live(4)]
    assert merge.flush() == []


def _nested(i: int) -> Nested:
    return Nested(
        AgentMessageEvent(
            team="t", member="m", workflow_id="w", session_id="s", message=_durable(i)
        )
    )


async def test_the_result_waits_for_members_on_their_way_and_for_nothing_else():
    """After the lead's result, the members' messages still on their way come first, until
    the last member's reader ends; with no member the result comes at once (no wait of any
    length: the loop is not given a turn)."""
    merge = Merge()
    drained = [e async for e in merge.rest_of([])]
    assert drained == []
    # the same, where a wait would lose its turn to the cancel at the next loop iteration
    async with asyncio.timeout(0):
        assert [e async for e in merge.rest_of([])] == []

    go = asyncio.Event()

    async def member(first: int) -> None:
        await go.wait()
        for i in range(first, first + 3):
            await merge.put(_nested(i))
            await asyncio.sleep(0)

    members = [asyncio.create_task(member(0)), asyncio.create_task(member(10))]
    await merge.put(_nested(99))  # already queued when the result arrived
    later = asyncio.get_running_loop().call_later(0.05, go.set)
    got = [e.message.session_id async for e in merge.rest_of(members, within=30)]  # type: ignore[union-attr]
    later.cancel()
    assert all(t.done() for t in members)
    assert got[0] == "d99" and sorted(got[1:]) == sorted(f"d{i}" for i in (0, 1, 2, 10, 11, 12))
