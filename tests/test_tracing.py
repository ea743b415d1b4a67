"""Context tracing: JSONL events of a run, in order, recording what was actually sent."""

from __future__ import annotations

import json

import pytest

from agent_lattice import (
    TracerError,
    create_composite_context_tracer,
    create_jsonl_context_tracer,
    define_context_tracer,
)
from agent_lattice.testing import Script, message, text, tool_use, tool_use_block

from conftest import make_calculator


async def test_jsonl_tracer_records_the_run_in_order(make_agent, fake_anthropic, tmp_path):
    path = tmp_path / "runs" / "session.jsonl"
    fake_anthropic.set_handler(
        Script(
            message(
                [tool_use_block("calculator", {"expr": "2+2"}), tool_use_block("teleport", {})],
                stop_reason="tool_use",
            ),
            text("4"),
        )
    )
    agent = make_agent(
        name="traced",
        tools=[make_calculator()],
        tracer=create_jsonl_context_tracer(path=path),
        hooks={"on_tool_result": lambda ctx: {**ctx.result.model_dump(), "content": "[redacted]"}},
    )

    result = await agent.prompt("2+2?")

    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["type"] for e in events] == [
        "run_start",
        "user_message",
        "model_request",
        "assistant_message",
        "tool_use",
        "tool_result",
        "tool_use",  # the unknown tool's call and result, made by the workflow itself
        "tool_result",
        "model_request",
        "assistant_message",
        "result",
    ]
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)
    assert len({e["seq"] for e in events}) == len(events)
    assert {e["session_id"] for e in events} == {agent.session_id}
    assert {e["run_id"] for e in events} == {result.run_id}
    assert {e["source"] for e in events} == {"traced"}
    assert events[1]["data"]["content"] == "2+2?"
    tool_results = [e["data"] for e in events if e["type"] == "tool_result"]
    assert all(r["content"] == "[redacted]" for r in tool_results)  # hooks ran first
    assert events[-1]["data"]["subtype"] == "success" and events[-1]["data"]["result"] == "4"


async def test_failing_tracer_is_ignored_unless_bound_to_fail(make_agent, fake_anthropic):
    def broken(event):
        raise OSError("disk full")

    fake_anthropic.set_handler(lambda request: text("fine"))
    quiet = make_agent(tracer=define_context_tracer(on_event=broken))
    assert (await quiet.prompt("hi")).result == "fine"

    seen = []
    strict = make_agent(
        tracer=create_composite_context_tracer(
            [
                define_context_tracer(on_event=seen.append),
                None,
                define_context_tracer(on_event=broken, fail_on_error=True),
            ]
        )
    )
    with pytest.raises(TracerError, match="disk full"):
        await strict.prompt("hi")
    assert seen and seen[0].type == "run_start"  # the composite reached the first tracer


async def test_tool_loop_trace_via_custom_sink(make_agent, fake_anthropic):
    events = []

    async def sink(event):
        events.append((event.type, event.data.get("name")))

    fake_anthropic.set_handler(Script(tool_use("calculator", {"expr": "1+1"}), text("2")))
    await make_agent(tools=[make_calculator()], tracer=define_context_tracer(on_event=sink)).prompt(
        "1+1"
    )
    assert ("tool_use", "calculator") in events
