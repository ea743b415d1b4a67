"""Agent.add_tools(): more tools from the next query on; the live output_schema property; the
option and schema types importable from the package."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import BaseModel

from agent_lattice import (
    SUBMIT_OUTPUT_TOOL_NAME,
    ConcurrentQueryError,
    OptionError,
    ToolResult,
    tool,
)
from agent_lattice.testing import Script, text, tool_use

from conftest import Expr, make_calculator


class Review(BaseModel):
    approved: bool


def _names(tools: list[dict[str, object]]) -> list[object]:
    return [t["name"] for t in tools]


def _echo(name: str):
    return tool(name, f"The {name} tool", Expr, lambda input: ToolResult(content=input.expr))


async def test_added_tool_is_offered_and_runs_from_the_next_query(make_agent, fake_anthropic):
    calls: list[str] = []
    fake_anthropic.set_handler(
        Script(text("no tools yet"), tool_use("calculator", {"expr": "2+3"}), text("5"))
    )
    agent = make_agent(name="adder", tools=[_echo("echo")])
    first_key = agent.key

    assert (await agent.prompt("What is 2+3?")).result == "no tools yet"
    agent.add_tools([make_calculator(calls)])
    result = await agent.prompt("And now?")

    assert result.subtype == "success" and result.result == "5"
    assert _names(fake_anthropic.requests[0].tools) == ["echo"]
    assert _names(fake_anthropic.requests[1].tools) == ["echo", "calculator"]
    assert calls == ["2+3"]
    assert fake_anthropic.requests[2].tool_results[0]["content"] == "5"
    assert [t.name for t in agent.tools] == ["echo", "calculator"]
    assert agent.key != first_key  # a new definition, served under its own key
    history = await agent.get_history()
    assert len(history) == 6  # one conversation across both queries


async def test_add_tools_is_refused_while_a_query_runs(make_agent, fake_anthropic):
    fake_anthropic.set_handler(Script(text("done")))
    agent = make_agent()

    messages = agent.query("Hello")  # the session is taken from here on
    with pytest.raises(ConcurrentQueryError, match="add_tools"):
        agent.add_tools([make_calculator()])
    assert [m.type async for m in messages][-1] == "result"

    agent.add_tools([make_calculator()])  # idle again
    assert [t.name for t in agent.tools] == ["calculator"]


def test_submit_output_is_reserved_while_output_schema_is_set(make_agent):
    submit = _echo(SUBMIT_OUTPUT_TOOL_NAME)
    agent = make_agent(output_schema=Review)
    with pytest.raises(OptionError, match='"submit_output" is reserved while output_schema'):
        agent.add_tools([submit])
    assert [t.name for t in agent.tools] == [SUBMIT_OUTPUT_TOOL_NAME]

    plain = make_agent()  # no output_schema: the name is free
    plain.add_tools([submit])
    assert [t.name for t in plain.tools] == [SUBMIT_OUTPUT_TOOL_NAME]


def test_bad_additions_raise_option_error_and_change_nothing(make_agent):
    agent = make_agent(tools=[make_calculator()])
    key = agent.key

    with pytest.raises(OptionError, match="already has a tool named 'calculator'"):
        agent.add_tools([make_calculator()])
    with pytest.raises(OptionError, match="already has a tool named 'echo'"):
        agent.add_tools([_echo("echo"), _echo("echo")])
    with pytest.raises(OptionError, match=r"ToolDefinition objects .*got dict"):
        agent.add_tools([{"name": "raw"}])  # type: ignore[list-item]
    with pytest.raises(OptionError, match="a list of ToolDefinition objects; got ToolDefinition"):
        agent.add_tools(_echo("echo"))  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="tool name must be"):
        agent.add_tools([dataclasses.replace(_echo("echo"), name="has space")])

    assert [t.name for t in agent.tools] == ["calculator"]
    assert agent.key == key
    agent.add_tools([])  # nothing to add
    assert agent.key == key


def test_output_schema_property_reflects_the_option(make_agent):
    assert make_agent(output_schema=Review).output_schema is Review
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    assert make_agent(output_schema=schema).output_schema == schema
    agent = make_agent()
    assert agent.output_schema is None
    agent.add_tools([make_calculator()])
    assert agent.output_schema is None


def test_option_and_schema_types_are_importable():
    from agent_lattice import (
        AgentOptions,
        AgentToolOptions,
        DelegateToolOptions,
        OutputSchema,
        QueryOptions,
        ToolOptions,
    )

    def declared(schema: OutputSchema) -> OutputSchema:
        return schema

    assert declared(Review) is Review
    assert declared({"type": "object"}) == {"type": "object"}
    for options in (AgentOptions, QueryOptions, AgentToolOptions, DelegateToolOptions, ToolOptions):
        assert options.__annotations__  # TypedDicts with their keys
