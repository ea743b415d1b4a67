"""The transcript travels by reference: only new content enters workflow history, large tool
results and prompts are stored once, and everything a user sees is resolved."""

from __future__ import annotations

from agent_lattice import ToolResult, UserMessage, tool
from agent_lattice.testing import Script, collect, text, tool_use

from conftest import Expr


async def test_large_tool_results_and_prompts_stay_out_of_history(make_agent, fake_anthropic):
    big = "".join(f"line {i:05d} of the report\n" for i in range(1000))  # ~25 KB
    prompt = "Summarize this: " + "lorem ipsum " * 1000  # ~12 KB
    fake_anthropic.set_handler(
        Script(tool_use("report", {"expr": "q3"}), tool_use("report", {"expr": "q4"}), text("ok"))
    )
    agent = make_agent(
        tools=[tool("report", "Fetch a report", Expr, lambda _: ToolResult(content=big))]
    )

    messages = await collect(agent.query(prompt))

    result = messages[-1]
    assert result.subtype == "success"
    # the provider got everything, resolved
    last = fake_anthropic.requests[-1]
    assert last.messages[0]["content"] == prompt
    assert [r["content"] for r in last.tool_results] == [big]
    assert fake_anthropic.requests[1].tool_results[0]["content"] == big
    # so did the caller, and the stored conversation
    user_messages = [m for m in messages if isinstance(m, UserMessage)]
    assert [m.message.content[0].content for m in user_messages] == [big, big]
    assert all(m.message.content[0].content_ref is None for m in user_messages)
    history = await agent.get_history()
    assert history[0].content == prompt and history[2].content[0].content == big
    # but Temporal's history holds neither the results nor the prompt
    handle = make_agent.runtime.client.get_workflow_handle(result.workflow_id)
    raw = (await handle.fetch_history()).to_json()
    assert "line 00999 of the report" not in raw
    assert "lorem ipsum " * 20 not in raw
    assert len(raw) < 60_000


async def test_transcript_does_not_grow_each_model_input(make_agent, fake_anthropic):
    fake_anthropic.set_handler(
        Script(*(tool_use("report", {"expr": str(i)}) for i in range(6)), text("done"))
    )
    agent = make_agent(tools=[tool("report", "r", Expr, lambda e: "x" * 500 + e.expr)])
    result = await agent.prompt("go")
    assert result.num_turns == 7
    history = await make_agent.runtime.client.get_workflow_handle(
        result.workflow_id
    ).fetch_history()
    inputs = [
        e.activity_task_scheduled_event_attributes.input.ByteSize()
        for e in history.events
        if e.activity_task_scheduled_event_attributes.activity_type.name == "lattice.model_request"
    ]
    assert len(inputs) == 7
    # each model request carries a head and at most one turn of new content, never the transcript
    assert max(inputs) - min(inputs) < 1500, inputs
    assert len(fake_anthropic.requests[-1].messages) == 13  # the model did see all of it
