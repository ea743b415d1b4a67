"""Re-attaching to a run by workflow id: its durable messages from the start."""

from __future__ import annotations

import asyncio

from agent_lattice import ResultMessage, StreamEventMessage
from agent_lattice.client import Runtime
from agent_lattice.testing import Script, collect, slow, text, tool_use

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
