"""Model parameters, business context, permission and end_turn (seeds: single-agent features)."""

from __future__ import annotations

import pytest

from agent_lattice import OptionError, ToolResult, create_agent, tool
from agent_lattice.testing import Script, message, text, tool_use, tool_use_block

from conftest import Expr, make_calculator

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "number"}},
    "required": ["answer"],
    "additionalProperties": False,
}


async def test_output_format_is_sent_and_text_returned_unchanged(make_agent, fake_anthropic):
    fake_anthropic.set_handler(Script(text('{"ok": true}'), text('{"answer": 4}')))
    agent = make_agent()

    first = await agent.prompt("Return JSON only.", output_format="json")
    second = await agent.prompt("2 + 2?", output_format={"type": "json_schema", "schema": SCHEMA})

    assert first.result == '{"ok": true}' and second.result == '{"answer": 4}'
    assert fake_anthropic.requests[0].body["output_config"] == {
        "format": {"type": "json_schema", "schema": {"type": "object"}}
    }
    assert fake_anthropic.requests[1].body["output_config"] == {
        "format": {"type": "json_schema", "schema": SCHEMA}
    }


async def test_thinking_and_effort_defaults_and_overrides(make_agent, fake_anthropic):
    fake_anthropic.set_handler(lambda request: text("ok"))
    agent = make_agent(
        max_tokens=1000, thinking_config={"type": "adaptive"}, reasoning_effort="high"
    )

    await agent.prompt("a")
    await agent.prompt("b", thinking_config={"type": "enabled", "budget_tokens": 8000})
    await agent.prompt("c", thinking_config={"type": "disabled"}, reasoning_effort="low")
    bodies = [r.body for r in fake_anthropic.requests]

    assert bodies[0]["thinking"] == {"type": "adaptive"} and bodies[0]["reasoning_effort"] == "high"
    assert bodies[1]["thinking"] == {"type": "enabled", "budget_tokens": 999}  # capped
    assert bodies[2]["thinking"] == {"type": "disabled"}  # sent explicitly
    assert bodies[2]["reasoning_effort"] == "low"

    fake_anthropic.reset()
    await make_agent().prompt("d")
    assert "thinking" not in fake_anthropic.requests[0].body
    assert "reasoning_effort" not in fake_anthropic.requests[0].body


def test_bad_request_options_are_rejected_at_assembly():
    with pytest.raises(OptionError, match="reasoning_effort must be one of low, high, max"):
        create_agent(model="m", reasoning_effort="medium")
    with pytest.raises(OptionError, match="thinking_config must be"):
        create_agent(model="m", thinking_config={"type": "enabled"})
    with pytest.raises(OptionError, match="output_format must be"):
        create_agent(model="m", output_format="xml")
    agent = create_agent(model="m")
    with pytest.raises(OptionError, match='QueryOptions: unknown option "sigal"'):
        agent.query("x", sigal=None)


async def test_context_reaches_tools_but_not_the_transcript(make_agent, fake_anthropic):
    seen = []

    def read_record(input: Expr, ctx) -> ToolResult:
        seen.append(ctx.context)
        return ToolResult(content="record read")

    fake_anthropic.set_handler(Script(tool_use("read_record", {"expr": "x"}), text("done")))
    agent = make_agent(tools=[tool("read_record", "Read the record", Expr, read_record)])

    await agent.prompt("Review it.", context={"patient_record_id": "ocr_123"})

    assert seen == [{"patient_record_id": "ocr_123"}]
    assert all("ocr_123" not in str(r.body["messages"]) for r in fake_anthropic.requests)


async def test_permission_denial_is_an_error_result(make_agent, fake_anthropic):
    calls: list[str] = []
    requests = []

    async def permission(request):
        requests.append(request)
        if request.tool_name == "calculator":
            return {"behavior": "deny", "message": "Blocked by policy"}
        return {"behavior": "allow"}

    fake_anthropic.set_handler(Script(tool_use("calculator", {"expr": "1+1"}), text("I may not.")))
    agent = make_agent(tools=[make_calculator(calls)], permission=permission)

    result = await agent.prompt("1+1?")

    assert result.result == "I may not." and calls == []
    denied = fake_anthropic.requests[1].tool_results[0]
    assert denied["is_error"] is True and denied["content"] == "Blocked by policy"
    assert requests[0].input == {"expr": "1+1"}


async def test_end_turn_finishes_with_the_first_ending_tool(make_agent, fake_anthropic):
    ran: list[str] = []

    def finish(input: Expr) -> ToolResult:
        ran.append(input.expr)
        return ToolResult(
            content=f"final: {input.expr}", end_turn=True, structured_result={"v": input.expr}
        )

    def note(input: Expr) -> ToolResult:
        ran.append(input.expr)
        return ToolResult(content="noted", structured_result={"ignored": True})

    fake_anthropic.set_handler(
        Script(
            message(
                [
                    tool_use_block("note", {"expr": "n"}),
                    tool_use_block("finish", {"expr": "A"}),
                    tool_use_block("finish", {"expr": "B"}),
                ],
                stop_reason="tool_use",
            )
        )
    )
    agent = make_agent(
        tools=[tool("finish", "Finish", Expr, finish), tool("note", "Note", Expr, note)]
    )

    result = await agent.prompt("go")

    assert result.subtype == "success" and result.result == "final: A"
    assert result.structured_result == {"v": "A"}
    assert ran == ["n", "A", "B"]  # the whole batch ran
    assert len(fake_anthropic.requests) == 1  # no model call after end_turn
    history = await agent.get_history()
    assert len(history[-1].content) == 3  # every tool_result entered history
