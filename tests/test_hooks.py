"""Hooks shape what the model sees; a failing hook stops the query (seeds: Hooks)."""

from __future__ import annotations

import json

import pytest

from agent_lattice import HookError, create_composite_agent_hooks, tool
from agent_lattice.testing import Script, message, text, tool_use, tool_use_block

from conftest import Expr, make_calculator


async def test_on_tool_result_sees_every_result_and_may_rewrite_it(make_agent, fake_anthropic):
    seen = []

    def on_tool_result(ctx):
        seen.append((ctx.tool_name, ctx.result.is_error, ctx.error is not None))
        if ctx.tool_name == "lookup":
            return {**ctx.result.model_dump(), "content": "[redacted]"}
        if ctx.tool_name == "teleport":
            return {**ctx.result.model_dump(), "is_error": False, "content": "pretend it worked"}
        return None

    def lookup(input: Expr) -> str:
        return f"secret for {input.expr}"

    def broken(input: Expr) -> str:
        raise RuntimeError("boom")

    fake_anthropic.set_handler(
        Script(
            message(
                [
                    tool_use_block("lookup", {"expr": "a"}),
                    tool_use_block("broken", {"expr": "b"}),
                    tool_use_block("teleport", {"expr": "c"}),
                ],
                stop_reason="tool_use",
            ),
            text("done"),
        )
    )
    agent = make_agent(
        tools=[tool("lookup", "Look up", Expr, lookup), tool("broken", "Broken", Expr, broken)],
        hooks={"on_tool_result": on_tool_result},
    )

    await agent.prompt("go")

    results = fake_anthropic.requests[1].tool_results
    assert results[0]["content"] == "[redacted]"  # what the model saw
    assert results[1]["is_error"] is True and "boom" in results[1]["content"]
    assert results[2] == {**results[2], "is_error": False, "content": "pretend it worked"}
    assert sorted(seen) == [
        ("broken", True, True),
        ("lookup", False, False),
        ("teleport", True, True),
    ]
    history = await agent.get_history()
    assert history[-2].content[0].content == "[redacted]"  # history holds what was sent


async def test_on_tool_result_sees_policy_blocked_calls(make_agent, fake_anthropic):
    seen = []
    fake_anthropic.set_handler(Script(tool_use("calculator", {"expr": "1+1"}), text("ok")))
    agent = make_agent(
        tools=[make_calculator()],
        tool_batch_policy={"validate": lambda request: {"allowed": False, "code": "frozen"}},
        hooks={"on_tool_result": lambda ctx: seen.append(json.loads(ctx.result.content)["error"])},
    )
    await agent.prompt("go")
    assert seen == ["frozen"]


async def test_on_model_request_shapes_one_request_only(make_agent, fake_anthropic):
    turns = []

    def on_model_request(ctx):
        turns.append((ctx.turn, len(ctx.messages)))
        return {"messages": ctx.messages[-1:], "system_prompt": "Be brief."}

    fake_anthropic.set_handler(
        Script(text("one"), tool_use("calculator", {"expr": "1+1"}), text("two"))
    )
    agent = make_agent(
        tools=[make_calculator()],
        system_prompt="Long prompt.",
        hooks={"on_model_request": on_model_request},
    )

    await agent.prompt("first")
    await agent.prompt("second")

    assert turns == [(1, 1), (1, 3), (2, 5)]  # 1-based turn per query; full history each time
    assert all(len(r.messages) == 1 and r.system == "Be brief." for r in fake_anthropic.requests)
    assert len(await agent.get_history()) == 6  # the stored conversation is untouched


async def test_a_hook_that_changes_its_messages_in_place_changes_no_later_request(
    make_agent, fake_anthropic
):
    """The model activity shares its cached transcript with the request when no user code
    sees it; a hook gets copies, so what it changes stays in its own request."""

    calls = []

    def on_model_request(ctx):
        calls.append(ctx.turn)
        if len(calls) == 1:  # the first request only
            for message in ctx.messages:
                if message.role == "user" and isinstance(message.content, str):
                    message.content = "tampered"
        return None

    fake_anthropic.set_handler(Script(text("one"), text("two")))
    agent = make_agent(hooks={"on_model_request": on_model_request})
    await agent.prompt("first")
    await agent.prompt("second")

    first, second = fake_anthropic.requests
    assert first.last_user_text == "tampered"
    assert [m["content"] for m in second.messages if m["role"] == "user"] == ["first", "second"]


async def test_composite_hooks_chain_in_order_and_skip_none(make_agent, fake_anthropic):
    def upper(ctx):
        return {**ctx.result.model_dump(), "content": ctx.result.content.upper()}

    def suffix(ctx):
        return {**ctx.result.model_dump(), "content": ctx.result.content + "!"}

    hooks = create_composite_agent_hooks(
        [{"on_tool_result": upper}, None, {"on_tool_result": suffix}]
    )
    fake_anthropic.set_handler(Script(tool_use("echo", {"expr": "hi"}), text("ok")))
    agent = make_agent(tools=[tool("echo", "Echo", Expr, lambda i: i.expr)], hooks=hooks)

    await agent.prompt("go")

    assert fake_anthropic.requests[1].tool_results[0]["content"] == "HI!"


async def test_a_raising_hook_propagates_out_of_query(make_agent, fake_anthropic):
    def redact(ctx):
        raise ValueError("redaction service down")

    fake_anthropic.set_handler(Script(tool_use("calculator", {"expr": "1+1"}), text("leaked?")))
    agent = make_agent(tools=[make_calculator()], hooks={"on_tool_result": redact})

    with pytest.raises(HookError, match="redaction service down"):
        async for _ in agent.query("go"):
            pass
    assert len(fake_anthropic.requests) == 1  # the unredacted result never reached the model
    # the failed turn left no dangling tool_use behind: the conversation stays well-formed
    assert [m.role for m in await agent.get_history()] == ["user"]

    fake_anthropic.set_handler(Script(text("x")))
    failing = make_agent(hooks={"on_model_request": lambda ctx: 1 / 0})
    with pytest.raises(HookError, match="ZeroDivisionError"):
        await failing.prompt("go")
    assert len(fake_anthropic.requests) == 1  # the shaped request was never sent


def test_unknown_hook_name_is_rejected():
    from agent_lattice import OptionError, create_agent

    with pytest.raises(OptionError, match='unknown hook "on_tool_resutl"'):
        create_agent(model="m", hooks={"on_tool_resutl": print})
