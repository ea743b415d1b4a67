"""Multimodal prompts, thinking blocks in history, tool options and metadata."""

from __future__ import annotations

import base64

import pytest

from agent_lattice import OptionError, ThinkingBlock, tool
from agent_lattice.testing import Script, message, text, thinking_block, tool_use_block

from conftest import Expr, make_calculator

PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n-not-really-an-image").decode()


async def test_content_block_prompts_reach_the_provider(make_agent, fake_anthropic):
    fake_anthropic.set_handler(Script(text("A screenshot.")))
    prompt = [
        {"type": "text", "text": "Summarize this screenshot."},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
    ]

    result = await make_agent().prompt(prompt)

    assert result.result == "A screenshot."
    sent = fake_anthropic.requests[0].messages[0]["content"]
    assert sent == prompt  # blocks unknown to us pass through field for field


async def test_thinking_blocks_round_trip_with_their_signatures(make_agent, fake_anthropic):
    fake_anthropic.set_handler(
        Script(
            message(
                [
                    thinking_block("I should add.", signature="sig-123"),
                    tool_use_block("calculator", {"expr": "2+2"}),
                ],
                stop_reason="tool_use",
            ),
            text("4"),
        )
    )
    agent = make_agent(
        tools=[make_calculator()], thinking_config={"type": "enabled", "budget_tokens": 1024}
    )

    await agent.prompt("2+2?")

    replayed = fake_anthropic.requests[1].messages[1]["content"][0]
    assert replayed == {"type": "thinking", "thinking": "I should add.", "signature": "sig-123"}
    history = await agent.get_history()
    assert isinstance(history[1].content[0], ThinkingBlock)


def test_tool_options_are_strict_and_metadata_passes_through(fake_anthropic):
    with pytest.raises(OptionError) as err:
        tool("t", "T", Expr, lambda i: "x", bogus=True)
    assert str(err.value).startswith('ToolOptions: unknown option "bogus".')
    tagged = tool("t", "T", Expr, lambda i: "x", metadata={"contract_version": 3})
    assert tagged.metadata == {"contract_version": 3}
    assert tool("u", "U", Expr, lambda i: "x").metadata is None


async def test_metadata_never_reaches_the_model(make_agent, fake_anthropic):
    fake_anthropic.set_handler(Script(text("ok")))
    tagged = tool("search", "Search", Expr, lambda i: "x", metadata={"contract_version": 3})
    await make_agent(tools=[tagged]).prompt("hi")
    assert "contract_version" not in str(fake_anthropic.requests[0].body)
