"""Bad input is refused at assembly or answered at once: a malformed base_url, api_key or
tool name; an unreachable provider (named, within a bounded time); a model request that
keeps failing (given up after model_give_up_s); tool input that is not a JSON object."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from agent_lattice import (
    OptionError,
    ToolDefinition,
    agent_tool,
    create_bare_agent,
    define_agent,
    tool,
)
from agent_lattice.testing import (
    FAST_SETTINGS,
    Script,
    message,
    rate_limited,
    text,
    text_block,
    tool_use_block,
)

from conftest import API_KEY, make_calculator


@pytest.mark.parametrize(
    "base_url", ["not a url", "ftp://example.com", "http://", "https://example.com:99999", 8080]
)
def test_a_malformed_base_url_is_refused_at_assembly(base_url):
    with pytest.raises(OptionError, match="base_url") as caught:
        create_bare_agent(model="claude-test", api_key=API_KEY, base_url=base_url)
    assert repr(base_url) in str(caught.value)


@pytest.mark.parametrize("api_key", [123, "", b"sk-bytes"])
def test_an_api_key_that_is_not_a_string_is_refused_at_assembly(api_key):
    with pytest.raises(OptionError, match="api_key must be a non-empty string"):
        create_bare_agent(model="claude-test", api_key=api_key)


def test_a_tool_name_the_api_would_reject_is_refused_at_assembly():
    with pytest.raises(OptionError, match=r"tool\(\): a tool name must be 1-64 letters.*'my tool'"):
        tool("my tool", "Has a space", {"type": "object"}, lambda _input: "x")
    spec = define_agent(name="helper", model="claude-test", api_key=API_KEY)
    with pytest.raises(OptionError, match=r"agent_tool\(\): a tool name.*'ask helper'"):
        agent_tool("ask helper", spec)
    calculator = make_calculator()
    renamed = ToolDefinition(**{**calculator.__dict__, "name": "x" * 65})
    with pytest.raises(OptionError, match="AgentOptions: tools: a tool name"):
        create_bare_agent(model="claude-test", api_key=API_KEY, tools=[renamed])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_an_unreachable_provider_fails_soon_naming_the_url(lattice_runtime):
    lattice_runtime.settings = FAST_SETTINGS.model_copy(
        update={"model_unreachable_give_up_s": 2.0, "model_max_attempts": 20}
    )
    url = f"http://127.0.0.1:{_closed_port()}"
    agent = create_bare_agent(model="claude-test", api_key=API_KEY, base_url=url)

    started = time.monotonic()
    result = await asyncio.wait_for(agent.prompt("Hello?"), 30)
    elapsed = time.monotonic() - started

    assert result.subtype == "error_during_execution"
    assert f"could not reach the model provider at {url}" in result.result
    assert "model_unreachable_give_up_s" in result.result
    assert elapsed < 8, f"took {elapsed:.1f} s"


async def test_a_model_request_is_given_up_after_model_give_up_s(
    make_agent, fake_anthropic, lattice_runtime
):
    lattice_runtime.settings = FAST_SETTINGS.model_copy(
        update={"model_give_up_s": 3.0, "model_max_attempts": 8}
    )
    fake_anthropic.set_handler(lambda _request: rate_limited(retry_after=2))
    agent = make_agent()

    started = time.monotonic()
    result = await asyncio.wait_for(agent.prompt("Hello?"), 30)
    elapsed = time.monotonic() - started

    assert result.subtype == "error_during_execution"
    assert result.result == (
        "the model request was given up: no answer within model_give_up_s (3 s); "
        "last attempt: Rate limited"
    )
    assert elapsed < 8, f"took {elapsed:.1f} s"  # 8 attempts 2 s apart would take 14 s
    assert len(fake_anthropic.requests) <= 3


class _Broken(str):
    """Tool input JSON text that does not parse, streamed as the model sent it."""


_BAD_INPUTS = [
    *(
        pytest.param(stream, raw, shown, id=f"{kind}-{'stream' if stream else 'no-stream'}")
        for stream in (True, False)
        for kind, raw, shown in [
            ("array", [1, 2], "an array [1, 2]"),
            ("number", 7, "a number 7"),
            ("string", "abc", 'a string "abc"'),  # streamed, the SDK could not parse it
        ]
    ),
    # only a stream can carry JSON that does not parse (the SDK gave up the whole message,
    # or, for a cut object, ran the tool with {})
    *(
        pytest.param(True, _Broken(text), shown, id=f"broken-{i}-stream")
        for i, (text, shown) in enumerate(
            [
                ('{"expr": ', "invalid JSON '{\"expr\": ' (Expecting value at character 9)"),
                ("not json", "invalid JSON 'not json' (Expecting value at character 0)"),
            ]
        )
    ),
]


@pytest.mark.parametrize(("stream", "raw", "shown"), _BAD_INPUTS)
async def test_tool_input_that_is_not_an_object_is_answered_with_an_error_at_once(
    make_agent, fake_anthropic, stream, raw, shown
):
    calls: list[str] = []
    if isinstance(raw, _Broken):
        bad = tool_use_block("calculator", {}, id="toolu_bad", partial_json=raw)
    else:
        bad = {"type": "tool_use", "id": "toolu_bad", "name": "calculator", "input": raw}
    fake_anthropic.set_handler(
        Script(message([bad], stop_reason="tool_use"), text("I will send an object next time."))
    )
    agent = make_agent(tools=[make_calculator(calls)])
    result = await asyncio.wait_for(agent.prompt("Add 2+2.", stream=stream), 30)

    assert result.subtype == "success"
    assert len(fake_anthropic.requests) == 2  # no retried (billed) model call
    assert calls == []  # the handler never ran
    (answer,) = fake_anthropic.requests[1].tool_results
    assert answer["is_error"] is True
    assert answer["content"] == (
        f"Invalid input for tool 'calculator': the input must be a JSON object; got {shown}"
    )
    # the call goes back to the provider in a form it accepts
    call = fake_anthropic.requests[1].messages[1]["content"][0]
    assert call == {"type": "tool_use", "id": "toolu_bad", "name": "calculator", "input": {}}


async def test_a_streamed_message_keeps_its_other_blocks_after_a_tool_input_that_does_not_parse(
    make_agent, fake_anthropic
):
    calls: list[str] = []
    turn = message(
        [
            text_block("Two sums."),
            tool_use_block("calculator", {}, id="toolu_bad", partial_json='"2+'),
            tool_use_block("calculator", {"expr": "2+3"}, id="toolu_good"),
        ],
        stop_reason="tool_use",
    )
    fake_anthropic.set_handler(Script(turn, text("5, and one I sent wrong.")))
    agent = make_agent(tools=[make_calculator(calls)])
    result = await asyncio.wait_for(agent.prompt("Add 2+2 and 2+3.", stream=True), 30)

    assert result.result == "5, and one I sent wrong."
    assert len(fake_anthropic.requests) == 2
    assert calls == ["2+3"]  # the call after the broken one ran
    bad, good = fake_anthropic.requests[1].tool_results
    assert bad["is_error"] is True
    assert "got invalid JSON '\"2+'" in bad["content"]
    assert good["tool_use_id"] == "toolu_good" and good["content"] == "5"
    assert fake_anthropic.requests[1].messages[1]["content"][0] == text_block("Two sums.")
