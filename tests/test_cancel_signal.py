"""query(signal=...): an event the host sets from elsewhere ends the query with error_abort
(completed turns kept, no model request after it); one set already ends it before any model
request; anything not Event-like is an OptionError."""

from __future__ import annotations

import asyncio
import threading

import anyio
import pytest

from agent_lattice import OptionError, ToolResult, create_team, team_member, tool
from agent_lattice.testing import Script, hang, message, slow, text, tool_use, tool_use_block

from conftest import Expr, by_agent, make_calculator, named_agent


def _blocking_tool(started: asyncio.Event, cancelled: list[str]):
    async def slow(input: Expr) -> ToolResult:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(input.expr)
            raise
        return ToolResult(content="late")

    return tool("slow", "Slow", Expr, slow)


@pytest.mark.parametrize("event", [asyncio.Event, anyio.Event])
async def test_signal_set_during_a_tool_call_aborts_prompt(make_agent, fake_anthropic, event):
    started, cancelled = asyncio.Event(), []
    fake_anthropic.set_handler(
        Script(
            tool_use("calculator", {"expr": "1+2"}),
            tool_use("slow", {"expr": "x"}),
            text("unused"),
        )
    )
    agent = make_agent(tools=[make_calculator(), _blocking_tool(started, cancelled)])
    signal = event()

    async def host() -> None:
        await started.wait()
        signal.set()

    setter = asyncio.ensure_future(host())
    result = await asyncio.wait_for(agent.prompt("go", signal=signal), 30)
    await setter

    assert result.subtype == "error_abort" and result.is_error
    assert result.error.type == "AbortError"
    assert cancelled == ["x"]  # the running handler was cancelled
    await asyncio.sleep(0.5)
    assert len(fake_anthropic.requests) == 2  # none after the abort
    history = await agent.get_history()
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant", "user"]
    assert history[2].content[0].content == "3"  # the completed turn is kept
    assert history[-1].content[0].is_error is True  # the aborted call still got its result


async def test_signal_set_during_a_slow_model_reply_aborts_query(make_agent, fake_anthropic):
    signal = asyncio.Event()
    loop = asyncio.get_running_loop()

    def slow_reply(request):  # the host sets the signal while this reply is on its way
        loop.call_soon_threadsafe(signal.set)
        return hang(30)

    fake_anthropic.set_handler(Script(tool_use("calculator", {"expr": "1+2"}), slow_reply))
    agent = make_agent(tools=[make_calculator()])

    messages = []
    async with asyncio.timeout(30):
        async for message in agent.query("go", signal=signal):
            messages.append(message)

    result = messages[-1]
    assert result.type == "result" and result.subtype == "error_abort" and result.is_error
    assert len(fake_anthropic.requests) == 2
    # the reply in flight is dropped; the completed turn stays
    assert [m.role for m in await agent.get_history()] == ["user", "assistant", "user"]

    # the agent goes on: a new query on the same conversation
    fake_anthropic.set_handler(Script(text("again")))
    follow_up = await agent.prompt("continue")
    assert follow_up.subtype == "success" and follow_up.result == "again"


@pytest.mark.parametrize("how", ["prompt", "query"])
async def test_a_signal_set_already_aborts_before_any_model_request(
    make_agent, fake_anthropic, how
):
    fake_anthropic.set_handler(Script(text("unused")))
    agent = make_agent()
    signal = asyncio.Event()
    signal.set()

    if how == "prompt":
        result = await asyncio.wait_for(agent.prompt("hi", signal=signal), 30)
    else:
        async with asyncio.timeout(30):
            result = [m async for m in agent.query("hi", signal=signal)][-1]

    assert result.subtype == "error_abort" and result.is_error
    assert fake_anthropic.requests == []
    assert [m.role for m in await agent.get_history()] == ["user"]


async def test_a_threading_event_set_from_another_thread(make_agent, fake_anthropic):
    fake_anthropic.set_handler(Script(hang(30)))
    agent = make_agent()
    signal = threading.Event()
    timer = threading.Timer(1.0, signal.set)
    timer.start()
    try:
        result = await asyncio.wait_for(agent.prompt("hi", signal=signal), 30)
    finally:
        timer.cancel()
    assert result.subtype == "error_abort"
    assert [m.role for m in await agent.get_history()] == ["user"]


async def test_an_unset_signal_changes_nothing(make_agent, fake_anthropic):
    fake_anthropic.set_handler(Script(text("fine"), text("fine")))
    agent = make_agent()
    signal = asyncio.Event()
    result = await agent.prompt("hi", signal=signal)
    assert result.subtype == "success" and result.result == "fine"
    signal.set()  # after the end: nothing to abort
    await asyncio.sleep(0.2)
    assert (await agent.prompt("hi", signal=asyncio.Event())).subtype == "success"


async def test_a_signal_that_is_not_event_like_is_an_option_error(make_agent):
    agent = make_agent()
    with pytest.raises(OptionError, match=r"signal must be an asyncio\.Event-like"):
        agent.query("x", signal=True)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="signal"):
        await agent.prompt("x", signal="stop")  # type: ignore[arg-type]
    # nothing was started: the session is free
    assert not agent.interrupt()


async def test_signal_aborts_a_team_query(fake_anthropic, lattice_runtime):
    signal = asyncio.Event()
    loop = asyncio.get_running_loop()

    def member(request):  # the host sets the signal while the member works
        loop.call_soon_threadsafe(signal.set)
        return slow(text("late"), delay=60)

    fake_anthropic.set_handler(
        by_agent(
            lead=Script(
                message(
                    [tool_use_block("a", {"mode": "handoff", "task": "forever"})],
                    stop_reason="tool_use",
                ),
                text("unused"),
            ),
            a=member,
        )
    )
    team = create_team(
        name="t",
        lead=named_agent(fake_anthropic, "lead"),
        members=[team_member(name="a", agent=named_agent(fake_anthropic, "a"))],
    )
    result = await asyncio.wait_for(team.prompt("go", signal=signal), 40)
    assert result.subtype == "error_abort" and result.is_error
    assert sum("You are lead." in (r.system or "") for r in fake_anthropic.requests) == 1


async def test_a_signal_set_already_aborts_a_team_query(fake_anthropic, lattice_runtime):
    fake_anthropic.set_handler(by_agent(lead=Script(text("unused"))))
    team = create_team(
        name="t",
        lead=named_agent(fake_anthropic, "lead"),
        members=[team_member(name="a", agent=named_agent(fake_anthropic, "a"))],
    )
    signal = asyncio.Event()
    signal.set()
    result = await asyncio.wait_for(team.prompt("go", signal=signal), 40)
    assert result.subtype == "error_abort" and result.is_error
    # the team is told at its start and tells its lead once the lead runs: at most the
    # lead's first request, abandoned
    assert len(fake_anthropic.requests) <= 1
