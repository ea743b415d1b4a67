"""The built-in Anthropic client on the wire: what a streamed request sends and how the
events it gets back become the reply (agent_lattice/providers/_anthropic.py). Each test runs
both ways the client sends a streamed request: its own post (no OpenTelemetry) and the SDK's
``messages.create`` (a process that traces: the SDK's span of the call)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from agent_lattice._messages import ModelMessage
from agent_lattice.providers import ModelRequest, ProviderError, _anthropic
from agent_lattice.providers._anthropic import AnthropicModelClient
from agent_lattice.testing import (
    FakeAnthropicServer,
    hang,
    message,
    stream_error,
    text,
    text_block,
    tool_use_block,
)
from agent_lattice.tools._tool import ToolSpec


@pytest.fixture(autouse=True, params=["posted", "sdk-traced"])
def way(request, monkeypatch) -> str:
    traced = request.param == "sdk-traced"
    monkeypatch.setattr(_anthropic, "_sdk_traces", lambda: traced)
    return request.param


SCHEMA = {"type": "object", "properties": {"q": {"type": ["string", "null"]}}}


def _request(**overrides: Any) -> ModelRequest:
    fields: dict[str, Any] = {
        "model": "claude-test",
        "max_tokens": 300,
        "system": "Be brief.",
        "messages": [
            ModelMessage(role="user", content="Find it."),
            ModelMessage(role="assistant", content=[tool_use_block("look", {"q": "x"}, id="t1")]),
            ModelMessage(
                role="user",
                content=[{"type": "tool_result", "tool_use_id": "t1", "content": "ünïcode ✓"}],
            ),
        ],
        "tools": [ToolSpec(name="look", description="Looks.", input_schema=SCHEMA)],
        "thinking": {"type": "enabled", "budget_tokens": 100},
        "reasoning_effort": "high",
        "output_format": {"type": "json_schema", "schema": SCHEMA},
    }
    return ModelRequest(**{**fields, **overrides})


async def test_a_streamed_request_sends_exactly_its_parameters():
    """The body is params() as JSON (extra_body's fields at the top, stream on, no timeout
    field), with the client's key and the SDK's headers."""
    client = AnthropicModelClient(api_key="sk-wire")
    request = _request(timeout_ms=30_000)
    with FakeAnthropicServer(lambda r: text("ok")) as fake:
        client._base_url = fake.base_url
        reply = await client.create(request)
        (sent,) = fake.requests

    expected = client.params(request)
    expected.pop("timeout")
    expected.update(expected.pop("extra_body"))
    assert sent.body == {**expected, "stream": True}
    assert sent.body["messages"][2]["content"][0]["content"] == "ünïcode ✓"
    assert sent.api_key == "sk-wire"
    assert sent.headers["content-type"] == "application/json"
    assert "anthropic-version" in sent.headers
    assert reply.text == "ok"


async def test_messages_encoded_already_make_the_same_body():
    """``wire_messages`` (the transcript cache's encoding, as the model activity hands it over)
    are joined into the body as they are: the provider gets the body it gets without them."""
    client = AnthropicModelClient(api_key="sk-wire")
    plain = _request(timeout_ms=30_000)
    encoded = _request(timeout_ms=30_000, wire_messages=[m.wire_json() for m in plain.messages])
    with FakeAnthropicServer(lambda r: text("ok")) as fake:
        client._base_url = fake.base_url
        replies = [await client.create(plain), await client.create(encoded)]
        first, second = fake.requests
    assert second.body == first.body
    assert second.body["messages"][2]["content"][0]["content"] == "ünïcode ✓"
    assert [r.text for r in replies] == ["ok", "ok"]


async def test_null_fields_of_the_events_are_dropped_but_not_inside_tool_inputs():
    """Providers send null for absent fields (stop_sequence, usage counts, a search result's
    page_age): the reply and the streamed events leave them out, as the SDK's models did,
    while a tool's own null argument reaches the tool."""
    whole = {
        "type": "web_search_tool_result",
        "tool_use_id": "s1",
        "content": [{"type": "web_search_result", "url": "u", "title": "t", "page_age": None}],
    }
    reply = message(
        [text_block("Found."), whole, tool_use_block("look", {"q": None, "deep": {"k": None}})],
        stop_reason="tool_use",
    )
    events: list[dict[str, Any]] = []

    async def on_event(event: dict[str, Any]) -> None:
        events.append(event)

    with FakeAnthropicServer(lambda r: reply) as fake:
        client = AnthropicModelClient(api_key="k", base_url=fake.base_url)
        got = await client.create(_request(), on_event=on_event)

    assert got.stop_reason == "tool_use"
    blocks = got.content
    assert isinstance(blocks, list)
    dumped = [b if isinstance(b, dict) else b.model_dump(exclude_none=True) for b in blocks]
    assert dumped[1]["content"] == [{"type": "web_search_result", "url": "u", "title": "t"}]
    assert got.tool_uses[0].input == {"q": None, "deep": {"k": None}}
    start = events[0]
    assert start["type"] == "message_start"
    assert "stop_reason" not in start["message"] and "stop_sequence" not in start["message"]
    assert [e["type"] for e in events][-2:] == ["message_delta", "message_stop"]
    assert events[-2]["delta"] == {"stop_reason": "tool_use"}


async def test_null_usage_counts_count_as_zero():
    reply = message([text_block("hi")], usage={"cache_read_input_tokens": None})  # type: ignore[dict-item]
    with FakeAnthropicServer(lambda r: reply) as fake:
        got = await AnthropicModelClient(api_key="k", base_url=fake.base_url).create(_request())
    assert got.usage is not None and got.usage.cache_read_input_tokens == 0


async def test_an_error_event_in_the_stream_is_classified_by_its_type():
    cases = [("overloaded_error", True), ("invalid_request_error", False)]
    for error_type, retryable in cases:
        failing = stream_error(text("partial answer"), after_events=3, type=error_type)
        with FakeAnthropicServer(lambda r, failing=failing: failing) as fake:
            client = AnthropicModelClient(api_key="k", base_url=fake.base_url)
            with pytest.raises(ProviderError) as info:
                await client.create(_request())
        assert info.value.error_type == error_type and info.value.retryable is retryable
        assert info.value.status_code is None  # the stream itself answered 200


async def test_the_request_timeout_is_the_requests_own():
    with FakeAnthropicServer(lambda r: hang(30)) as fake:
        client = AnthropicModelClient(api_key="k", base_url=fake.base_url)
        started = time.monotonic()
        with pytest.raises(ProviderError) as info:
            await client.create(_request(timeout_ms=300))
    assert info.value.error_type == "timeout" and info.value.retryable
    assert time.monotonic() - started < 10  # the client's default is 600 s
