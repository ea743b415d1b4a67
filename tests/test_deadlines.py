"""Deadlines: request_timeout_ms → error_timeout; a query deadline or a cancelled caller →
error_abort; both enforced even when the model client ignores them."""

from __future__ import annotations

import asyncio
import time

import pytest

from agent_lattice import OptionError, ToolResult, create_agent, tool
from agent_lattice.providers import ModelRequest
from agent_lattice.testing import Script, hang, text, tool_use

from conftest import Expr


async def test_request_timeout_is_error_timeout_and_query_override_wins(make_agent, fake_anthropic):
    script = Script(hang(30), hang(30))
    fake_anthropic.set_handler(script)
    agent = make_agent(request_timeout_ms=60_000)

    started = time.monotonic()
    result = await agent.prompt("hi", request_timeout_ms=500)

    assert result.subtype == "error_timeout" and result.is_error
    assert result.error.type == "TimeoutError" and "500 ms" in result.error.message
    assert time.monotonic() - started < 10
    assert script.remaining == 1  # one request: a timeout is the host's to retry, not ours


class IgnoresDeadlines:
    """A custom ModelClient that honours neither timeout_ms nor cancellation quickly."""

    async def create(self, request: ModelRequest, *, on_event=None):
        await asyncio.sleep(30)
        raise AssertionError("never reached")


async def test_deadline_holds_for_a_client_that_ignores_it(lattice_runtime):
    agent = create_agent(model="m", model_client=IgnoresDeadlines(), request_timeout_ms=300)
    result = await asyncio.wait_for(agent.prompt("hi"), 20)
    assert result.subtype == "error_timeout"


async def test_query_deadline_aborts_running_tools(make_agent, fake_anthropic):
    started = asyncio.Event()
    cancelled = []

    async def slow(input: Expr) -> ToolResult:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(0.3)  # cleanup the run waits for
            cancelled.append(input.expr)
            raise
        return ToolResult(content="late")

    fake_anthropic.set_handler(Script(tool_use("slow", {"expr": "x"}), text("unused")))
    agent = make_agent(tools=[tool("slow", "Slow", Expr, slow)])

    result = await asyncio.wait_for(agent.prompt("go", timeout=1.5), 30)

    assert result.subtype == "error_abort" and result.error.type == "AbortError"
    assert len(fake_anthropic.requests) == 1
    # the running handler was cancelled, and the run waited for it to settle
    assert cancelled == ["x"]
    history = await agent.get_history()
    assert history[-1].content[0].is_error is True  # the aborted call still got its result


async def test_cancelling_the_caller_aborts_the_run(make_agent, fake_anthropic):
    fake_anthropic.set_handler(Script(hang(30)))
    agent = make_agent()

    task = asyncio.ensure_future(agent.prompt("hi"))
    await asyncio.sleep(1.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    outcome = await make_agent.runtime.outcome(f"{agent.name}-{agent.session_id}-1")
    assert outcome.subtype == "error_abort"
    assert [m.role for m in await agent.get_history()] == ["user"]


def test_deadline_options_must_be_positive():
    with pytest.raises(OptionError, match="request_timeout_ms must be a positive integer"):
        create_agent(model="m", request_timeout_ms=0)
    with pytest.raises(OptionError, match="timeout must be a positive number"):
        create_agent(model="m").query("x", timeout=-1)
