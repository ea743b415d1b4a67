"""interrupt(): ends the query with ``interrupted`` and keeps every completed turn."""

from __future__ import annotations

import asyncio
import contextlib
import time

from agent_lattice import ResultMessage, StreamEventMessage, ToolResult, tool
from agent_lattice.testing import Script, slow, text, tool_use

from conftest import Expr


async def test_interrupt_during_stream_drops_partial_turn(make_agent, fake_anthropic):
    long_text = " ".join(f"word{i}" for i in range(200))
    fake_anthropic.set_handler(
        Script(slow(text(long_text), delay=0.05), text("Covering 0.16.0 only."))
    )
    agent = make_agent()
    assert agent.interrupt() is False  # idle

    started = time.monotonic()
    result = None
    async for m in agent.query("Draft the release notes."):
        if isinstance(m, StreamEventMessage) and m.event["type"] == "content_block_delta":
            assert agent.interrupt() is True
        if isinstance(m, ResultMessage):
            result = m
    elapsed = time.monotonic() - started

    assert result is not None and result.subtype == "interrupted"
    assert result.is_error is False
    assert elapsed < 8, "the in-flight request was aborted, not waited for"
    history = await agent.get_history()
    assert [m.role for m in history] == ["user"]  # the partial assistant turn is dropped

    follow_up = await agent.prompt("Actually, skip 0.15.x and cover 0.16.0 only.")
    assert follow_up.subtype == "success"
    # the unanswered prompt and the next one go out as one user message: providers reject
    # two messages of one role in a row
    (sent,) = fake_anthropic.requests[-1].messages
    assert sent["role"] == "user"
    assert [b["text"] for b in sent["content"]] == [
        "Draft the release notes.",
        "Actually, skip 0.15.x and cover 0.16.0 only.",
    ]
    assert [m.role for m in await agent.get_history()] == ["user", "user", "assistant"]


async def test_interrupt_during_tool_batch_lands_after_the_batch(make_agent, fake_anthropic):
    started, release = asyncio.Event(), asyncio.Event()

    async def wait_for_release(input: Expr) -> ToolResult:
        started.set()
        await release.wait()
        return ToolResult(content="slow result")

    fake_anthropic.set_handler(Script(tool_use("slow_tool", {"expr": "x"}), text("unused")))
    agent = make_agent(tools=[tool("slow_tool", "Takes a while", Expr, wait_for_release)])

    query = asyncio.ensure_future(agent.prompt("Use the slow tool."))
    await asyncio.wait_for(started.wait(), 20)
    assert agent.interrupt() is True
    await asyncio.sleep(0.3)
    release.set()
    result = await asyncio.wait_for(query, 30)

    assert result.subtype == "interrupted" and result.num_turns == 1
    assert len(fake_anthropic.requests) == 1  # no model call after the batch
    history = await agent.get_history()
    assert [m.role for m in history] == ["user", "assistant", "user"]
    assert history[-1].content[0].content == "slow result"


async def test_leaving_the_loop_early_ends_the_run_and_frees_the_agent(make_agent, fake_anthropic):
    fake_anthropic.set_handler(
        Script(slow(text(" ".join(["long"] * 200)), delay=0.05), text("short answer"))
    )
    agent = make_agent()

    async with contextlib.aclosing(agent.query("Write at length")) as messages:
        async for m in messages:
            if isinstance(m, StreamEventMessage):
                break  # the caller stops reading; aclosing waits for the clean-up
    workflow_id = f"{agent.name}-{agent.session_id}-1"
    outcome = await make_agent.runtime.outcome(workflow_id)

    assert outcome.subtype == "interrupted"
    assert (await agent.prompt("Shorter, please.")).result == "short answer"
    assert [m.role for m in await agent.get_history()] == ["user", "user", "assistant"]
