"""Re-attaching to a run by workflow id: its durable messages from the start."""

from __future__ import annotations

import asyncio

from agent_lattice import ResultMessage, StreamEventMessage
from agent_lattice.client import Runtime
from agent_lattice.testing import Script, collect, slow, stream_error, text, tool_use

from conftest import make_calculator


async def test_attach_to_a_running_and_a_finished_run(make_agent, fake_anthropic, lattice_runtime):
    fake_anthropic.set_handler(
        Script(tool_use("calculator", {"expr": "1+2"}), slow(text("three"), delay=0.05))
    )
    agent = make_agent(tools=[make_calculator()])

    live = []
    attached: asyncio.Task | None = None
    async for m in agent.query("1+2?"):
        live.append(m)
        if attached is None and m.type == "system":
            # a second reader joins while the run is going
            attached = asyncio.ensure_future(
                collect(lattice_runtime.durable_messages(m.workflow_id))
            )
    assert attached is not None
    during = await attached
    durable = [m for m in live if not isinstance(m, StreamEventMessage)]
    assert [m.type for m in during] == [m.type for m in durable]
    assert during == durable

    after = await collect(lattice_runtime.durable_messages(durable[0].workflow_id))
    assert after == durable
    assert isinstance(after[-1], ResultMessage) and after[-1].result == "three"


async def test_attach_without_any_worker_falls_back_to_the_recorded_result(
    make_agent, fake_anthropic, lattice_runtime, lattice_server
):
    fake_anthropic.set_handler(Script(text("recorded")))
    result = await make_agent().prompt("hi")
    await lattice_runtime.close()  # no worker left to answer stream queries

    async with await Runtime.connect(lattice_server, inline_workers=False) as reader:
        messages = await asyncio.wait_for(collect(reader.durable_messages(result.workflow_id)), 60)
    assert messages[-1] == result


LONG = "A long answer, streamed slowly enough for a second reader to join it midway."


def _text_of(messages, turn: int) -> str:
    return "".join(
        m.event["delta"]["text"]
        for m in messages
        if isinstance(m, StreamEventMessage)
        and m.turn == turn
        and m.event.get("delta", {}).get("type") == "text_delta"
    )


async def test_an_attached_reader_sees_the_live_tokens_of_the_turn_in_progress(
    make_agent, fake_anthropic, lattice_runtime, lattice_server
):
    fake_anthropic.set_handler(
        Script(tool_use("calculator", {"expr": "1+2"}), slow(text(LONG), delay=0.05))
    )
    agent = make_agent(tools=[make_calculator()])
    live = []
    attached: asyncio.Task | None = None
    # another runtime, as another process would have: no worker, no side channel of its own
    async with await Runtime.connect(lattice_server, inline_workers=False) as reader:
        async for m in agent.query("1+2?"):
            live.append(m)
            if attached is None and isinstance(m, StreamEventMessage) and m.turn == 2:
                # the second turn is streaming: the reader joins it now
                attached = asyncio.ensure_future(collect(reader.attach(live[0].workflow_id)))
        assert attached is not None
        during = await asyncio.wait_for(attached, 60)
    # the turn's tokens from its first one, though the reader came midway; none twice
    assert _text_of(during, 2) == LONG
    assert [m for m in during if not isinstance(m, StreamEventMessage)] == [
        m for m in live if not isinstance(m, StreamEventMessage)
    ]
    kinds = [m.type for m in during]
    tokens = [i for i, m in enumerate(during) if isinstance(m, StreamEventMessage)]
    closing = next(i for i, m in enumerate(during) if m.type == "assistant" and m.turn == 2)
    assert kinds[tokens[0] - 1] == "user" and tokens[-1] < closing  # in the workflow's order
    assert all(m.session_id == live[0].session_id for m in during)


async def test_a_reader_attached_after_a_retry_sees_only_the_retrys_text(
    make_agent, fake_anthropic, lattice_runtime, lattice_server
):
    again = "Hello world, again, and slowly."
    fake_anthropic.set_handler(
        Script(stream_error(text("Hello world"), after_events=5), slow(text(again), delay=0.05))
    )
    agent = make_agent()
    attached: asyncio.Task | None = None
    async with await Runtime.connect(lattice_server, inline_workers=False) as reader:
        async for m in agent.query("hi"):
            if m.type == "system" and m.subtype == "init":
                workflow_id = m.workflow_id
            if attached is None and isinstance(m, StreamEventMessage) and m.attempt == 2:
                attached = asyncio.ensure_future(collect(reader.attach(workflow_id)))
        assert attached is not None
        during = await asyncio.wait_for(attached, 60)
    events = [m for m in during if isinstance(m, StreamEventMessage)]
    assert events and {m.attempt for m in events} == {2}  # nothing of the failed attempt
    assert _text_of(during, 1) == again
    assert during[-1].type == "result" and during[-1].result == again
