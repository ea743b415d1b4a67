"""The agent loop on the real dev server, against the fake provider over real HTTP."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agent_lattice import (
    AssistantMessage,
    ConcurrentQueryError,
    OptionError,
    ResultMessage,
    StreamEventMessage,
    SystemMessage,
    UserMessage,
    tool,
)
from agent_lattice._loop import TRUNCATED_TOOL_CALL
from agent_lattice.testing import (
    Script,
    collect,
    error,
    message,
    rate_limited,
    text,
    text_block,
    tool_use,
    tool_use_block,
)

from conftest import Expr, make_calculator


def text_deltas(messages) -> str:
    return "".join(
        m.event["delta"]["text"]
        for m in messages
        if isinstance(m, StreamEventMessage)
        and m.event["type"] == "content_block_delta"
        and m.event["delta"].get("type") == "text_delta"
    )


async def test_tool_loop_yields_typed_messages_in_order(make_agent, fake_anthropic):
    calls: list[str] = []
    fake_anthropic.set_handler(
        Script(
            tool_use("calculator", {"expr": "2+2"}, usage={"input_tokens": 10, "output_tokens": 5}),
            text("2+2 is 4.", usage={"input_tokens": 30, "output_tokens": 7}, id="msg_final"),
        )
    )
    agent = make_agent(name="calc", tools=[make_calculator(calls)])

    messages = await collect(agent.query("What is 2+2?"))

    kinds = [m.type for m in messages if m.type != "stream_event"]
    assert kinds == ["system", "assistant", "user", "assistant", "result"]
    init = messages[0]
    assert isinstance(init, SystemMessage) and init.subtype == "init"
    assert init.tools == ["calculator"] and init.model == "claude-test"
    assert init.session_id == agent.session_id
    # every stream event of a turn comes after the messages before it and before its assistant message
    order = [(m.type, getattr(m, "turn", None)) for m in messages]
    first_assistant = order.index(("assistant", 1))
    assert all(t == 1 for kind, t in order[:first_assistant] if kind == "stream_event")
    user_at = next(i for i, m in enumerate(messages) if isinstance(m, UserMessage))
    assert all(not (isinstance(m, StreamEventMessage) and m.turn == 2) for m in messages[:user_at])
    assert text_deltas(messages) == "2+2 is 4."

    assert calls == ["2+2"]
    tool_result = messages[user_at].message.content[0]
    assert tool_result.content == "4" and tool_result.is_error is False
    # the provider saw the tool result paired with its tool_use
    second = fake_anthropic.requests[1]
    assert second.tool_results[0]["content"] == "4"
    assert second.tool_results[0]["tool_use_id"] == second.messages[1]["content"][0]["id"]

    result = messages[-1]
    assert isinstance(result, ResultMessage)
    assert result.subtype == "success" and result.result == "2+2 is 4."
    assert result.is_error is False and result.num_turns == 2
    assert result.usage.input_tokens == 40 and result.usage.output_tokens == 12
    assert result.stop_reason == "end_turn"
    final = messages[-2]
    assert isinstance(final, AssistantMessage)
    assert final.message.provider_response_id == "msg_final"
    assert final.message.model == "claude-test"


async def test_a_tool_call_reaches_the_caller_while_the_tool_runs(make_agent, fake_anthropic):
    """The reader of a query's messages reads a fast tool turn's two messages at once (one
    query instead of two), but never waits on a slow tool for it: the assistant message
    naming the call arrives while the tool still runs."""
    shown = threading.Event()

    def wait_until_shown(input: Expr) -> str:
        return "seen while running" if shown.wait(30) else "not seen while running"

    fake_anthropic.set_handler(Script(tool_use("watched", {"expr": "1"}), text("done")))
    agent = make_agent(
        name="shown", tools=[tool("watched", "Waits to be shown", Expr, wait_until_shown)]
    )
    messages = []
    async for m in agent.query("go"):
        messages.append(m)
        if isinstance(m, AssistantMessage) and m.message.content[0].type == "tool_use":
            shown.set()
    user = next(m for m in messages if isinstance(m, UserMessage))
    assert user.message.content[0].content == "seen while running"
    assert messages[-1].result == "done"


async def test_a_reader_behind_a_closed_run_reads_the_rest_of_its_stream(
    make_agent, fake_anthropic
):
    """A batched read can find the run closed with more unread than its closing task
    published (which its output carries): the closed run's stream answers the rest, so no
    message (a team's events among them) is lost. A reader that starts after the end is the
    furthest behind there is."""
    from agent_lattice.client._follow import published
    from agent_lattice.workflows._agent import MESSAGES_TOPIC
    from agent_lattice.workflows._refs import workflow_id_for

    fake_anthropic.set_handler(Script(tool_use("calculator", {"expr": "2+2"}), text("4")))
    agent = make_agent(name="behind", tools=[make_calculator()])
    given = [m for m in await collect(agent.query("go")) if m.type != "stream_event"]
    client = make_agent.runtime.client
    items = [item async for item in published(client, workflow_id_for(agent, 1), MESSAGES_TOPIC)]
    assert [item["type"] for item in items] == [m.type for m in given]
    assert [item["type"] for item in items] == [
        "system", "assistant", "user", "assistant", "result"
    ]  # fmt: skip


async def test_multi_turn_session_remembers(make_agent, fake_anthropic):
    fake_anthropic.set_handler(Script(text("Nice to meet you, Ada."), text("Your name is Ada.")))
    agent = make_agent()

    await agent.prompt("My name is Ada.")
    result = await agent.prompt("What is my name?")

    assert result.result == "Your name is Ada."
    sent = fake_anthropic.requests[1].messages
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"] == "My name is Ada."
    assert sent[1]["content"][0]["text"] == "Nice to meet you, Ada."
    history = await agent.get_history()
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant"]
    history.clear()  # a copy: the agent's history is untouched
    assert len(await agent.get_history()) == 4


async def test_stream_false_sends_non_streaming_requests(make_agent, fake_anthropic):
    fake_anthropic.set_handler(Script(text("hello")))
    agent = make_agent()

    messages = await collect(agent.query("Say hello", stream=False))

    assert not any(isinstance(m, StreamEventMessage) for m in messages)
    assert fake_anthropic.requests[0].stream is False
    assert messages[-1].result == "hello"


async def test_slow_consumer_gets_every_event_in_order(make_agent, fake_anthropic):
    words = " ".join(f"w{i}" for i in range(60))
    fake_anthropic.set_handler(Script(text(words)))
    agent = make_agent()

    seen: list = []
    async for m in agent.query("Talk"):
        seen.append(m)
        if isinstance(m, StreamEventMessage):
            await asyncio.sleep(0.005)  # slow rendering must delay, not drop or reorder

    assert text_deltas(seen) == words
    types = [m.type for m in seen]
    assert types[0] == "system" and types[-2:] == ["assistant", "result"]
    events = [m.event["type"] for m in seen if isinstance(m, StreamEventMessage)]
    assert events[0] == "message_start" and events[-1] == "message_stop"


async def test_max_turns_ends_with_error_max_turns(make_agent, fake_anthropic):
    fake_anthropic.set_handler(lambda request: tool_use("calculator", {"expr": "1+1"}))
    agent = make_agent(tools=[make_calculator()], max_turns=3)

    result = await agent.prompt("loop forever")

    assert result.subtype == "error_max_turns" and result.is_error
    assert result.num_turns == 3 and len(fake_anthropic.requests) == 3
    assert result.error is not None and result.error.type == "MaxTurnsError"


async def test_truncated_tool_calls_are_not_run(make_agent, fake_anthropic):
    calls: list[str] = []
    fake_anthropic.set_handler(
        Script(
            message(
                [text_block("Let me add"), tool_use_block("calculator", {"expr": "2+"})],
                stop_reason="max_tokens",
            ),
            tool_use("calculator", {"expr": "2+2"}),
            text("4"),
        )
    )
    agent = make_agent(tools=[make_calculator(calls)])

    result = await agent.prompt("2+2?")

    assert result.subtype == "success" and result.result == "4"
    assert calls == ["2+2"]  # the truncated call never ran
    truncated = fake_anthropic.requests[1].tool_results[0]
    assert truncated["is_error"] is True and truncated["content"] == TRUNCATED_TOOL_CALL


async def test_max_tokens_without_tools_is_success_with_stop_reason(make_agent, fake_anthropic):
    fake_anthropic.set_handler(Script(text("a fragm", stop_reason="max_tokens")))
    result = await make_agent().prompt("Write a lot")
    assert result.subtype == "success" and result.stop_reason == "max_tokens"


async def test_unknown_tool_and_invalid_input_become_error_results(make_agent, fake_anthropic):
    calls: list[str] = []
    fake_anthropic.set_handler(
        Script(
            tool_use("teleport", {"to": "mars"}),
            tool_use("calculator", {"expression": "2+2"}),
            text("giving up"),
        )
    )
    agent = make_agent(tools=[make_calculator(calls)])

    result = await agent.prompt("go")

    assert result.subtype == "success" and result.result == "giving up"
    unknown = fake_anthropic.requests[1].tool_results[0]
    assert unknown["is_error"] is True and "Unknown tool 'teleport'" in unknown["content"]
    assert "calculator" in unknown["content"]
    invalid = fake_anthropic.requests[2].tool_results[0]
    assert invalid["is_error"] is True and "expr" in invalid["content"]
    assert calls == []


async def test_failing_tool_handler_is_reported_to_the_model(make_agent, fake_anthropic):
    from agent_lattice import tool

    from conftest import Expr

    def broken(input: Expr) -> str:
        raise RuntimeError("database is down")

    fake_anthropic.set_handler(Script(tool_use("lookup", {"expr": "x"}), text("sorry")))
    result = await make_agent(tools=[tool("lookup", "Look up", Expr, broken)]).prompt("go")

    assert result.subtype == "success"
    failed = fake_anthropic.requests[1].tool_results[0]
    assert failed["is_error"] is True and "database is down" in failed["content"]


async def test_rate_limit_is_retried_then_succeeds(make_agent, fake_anthropic):
    fake_anthropic.set_handler(Script(rate_limited(retry_after=0.2), text("after the wait")))
    agent = make_agent()

    messages = await collect(agent.query("hi"))

    assert messages[-1].subtype == "success" and messages[-1].result == "after the wait"
    assert len(fake_anthropic.requests) == 2
    assert fake_anthropic.requests[0].api_key == fake_anthropic.requests[1].api_key


async def test_bad_request_is_a_clear_error_result_not_retried(make_agent, fake_anthropic):
    fake_anthropic.set_handler(
        Script(error(400, "max_tokens: must be at most 8192 for this model"))
    )
    result = await make_agent().prompt("hi")

    assert result.subtype == "error_during_execution" and result.is_error
    assert "max_tokens: must be at most 8192" in (result.result or "")
    assert result.error is not None and result.error.type == "APIError"
    assert result.error.status_code == 400
    assert len(fake_anthropic.requests) == 1
    with pytest.raises(Exception, match="must be at most 8192"):
        result.raise_for_error()


async def test_one_query_at_a_time(make_agent, fake_anthropic):
    from agent_lattice.testing import slow

    fake_anthropic.set_handler(lambda r: slow(text("slow answer"), delay=0.05))
    agent = make_agent()
    first = agent.query("one")
    await first.__anext__()
    with pytest.raises(ConcurrentQueryError):
        agent.query("two")
    await collect(first)
    assert (await agent.prompt("three")).subtype == "success"  # released after the first


def test_unknown_agent_option_is_rejected_at_assembly():
    from agent_lattice import create_agent

    with pytest.raises(OptionError) as err:
        create_agent(model="m", bogus_option=1)
    assert str(err.value) == (
        'AgentOptions: unknown option "bogus_option". Check for a typo, or upgrade the SDK if '
        "this option was added in a newer version."
    )
    with pytest.raises(OptionError, match="max_turns must be a positive integer"):
        create_agent(model="m", max_turns=0)
