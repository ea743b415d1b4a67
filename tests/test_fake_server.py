"""Tests for the fake Anthropic server, driven by the real `anthropic` client."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import pytest

from agent_lattice.testing import (
    FakeAnthropicServer,
    RecordedRequest,
    Reply,
    Script,
    ScriptExhaustedError,
    disconnect,
    error,
    hang,
    message,
    overloaded,
    rate_limited,
    slow,
    stream_error,
    text,
    text_block,
    thinking_block,
    tool_use,
    tool_use_block,
)

try:  # the transport library under the anthropic SDK
    import httpx2 as _httpx
except ImportError:  # pragma: no cover - older SDKs
    import httpx as _httpx  # type: ignore[no-redef]

MODEL = "claude-test"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def _shared_server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as srv:
        yield srv


@pytest.fixture(scope="module")
async def _shared_client(
    _shared_server: FakeAnthropicServer,
) -> AsyncIterator[anthropic.AsyncAnthropic]:
    # One client for the module: building one costs ~50 ms (TLS context).
    async with anthropic.AsyncAnthropic(
        api_key="test-key", base_url=_shared_server.base_url, max_retries=0
    ) as c:
        yield c


@pytest.fixture
def server(_shared_server: FakeAnthropicServer) -> FakeAnthropicServer:
    _shared_server.set_handler(lambda r: text("ok"))
    _shared_server.reset()
    return _shared_server


@pytest.fixture
def client(
    server: FakeAnthropicServer, _shared_client: anthropic.AsyncAnthropic
) -> anthropic.AsyncAnthropic:
    return _shared_client


async def create(client: anthropic.AsyncAnthropic, **kwargs: Any) -> Any:
    params: dict[str, Any] = {"model": MODEL, "max_tokens": 100, "messages": HI, **kwargs}
    return await client.messages.create(**params)


async def stream_final(client: anthropic.AsyncAnthropic, **kwargs: Any) -> tuple[list[Any], Any]:
    """Stream a request; return (events, final message)."""
    params: dict[str, Any] = {"model": MODEL, "max_tokens": 100, "messages": HI, **kwargs}
    events = []
    async with client.messages.stream(**params) as s:
        async for event in s:
            events.append(event)
        final = await s.get_final_message()
    return events, final


# --------------------------------------------------------------------------- happy paths


async def test_default_handler_replies_ok(client: anthropic.AsyncAnthropic) -> None:
    msg = await create(client)
    assert [b.text for b in msg.content] == ["ok"]


async def test_non_stream_text(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    server.set_handler(lambda r: text("Hello there!", usage={"output_tokens": 7}))
    msg = await create(client)
    assert msg.id == "msg_fake_0"
    assert msg.model == MODEL
    assert msg.role == "assistant"
    assert msg.content[0].type == "text"
    assert msg.content[0].text == "Hello there!"
    assert msg.stop_reason == "end_turn"
    assert msg.stop_sequence is None
    assert msg.usage.input_tokens >= 1
    assert msg.usage.output_tokens == 7
    assert msg.usage.cache_read_input_tokens == 0
    assert msg.usage.cache_creation_input_tokens == 0


async def test_stream_text(server: FakeAnthropicServer, client: anthropic.AsyncAnthropic) -> None:
    server.set_handler(
        lambda r: text(
            "The quick brown fox jumps over the lazy dog",
            model="claude-other",
            id="msg_custom",
            usage={"input_tokens": 11, "output_tokens": 13, "cache_read_input_tokens": 5},
        )
    )
    chunks = []
    async with client.messages.stream(model=MODEL, max_tokens=100, messages=HI) as s:
        async for chunk in s.text_stream:
            chunks.append(chunk)
        final = await s.get_final_message()
    assert len(chunks) >= 3
    assert "".join(chunks) == "The quick brown fox jumps over the lazy dog"
    assert final.content[0].text == "The quick brown fox jumps over the lazy dog"
    assert final.stop_reason == "end_turn"
    assert final.id == "msg_custom"
    assert final.model == "claude-other"
    assert final.usage.input_tokens == 11
    assert final.usage.output_tokens == 13
    assert final.usage.cache_read_input_tokens == 5


async def test_stream_and_non_stream_agree(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    reply = message(
        [text_block("Let me check."), tool_use_block("lookup", {"q": "x"}, id="toolu_1")],
        stop_reason="tool_use",
    )
    server.set_handler(lambda r: reply)
    plain = await create(client)
    _, streamed = await stream_final(client)
    assert streamed.usage.input_tokens == plain.usage.input_tokens
    assert streamed.usage.output_tokens == plain.usage.output_tokens
    assert [b.model_dump(exclude_none=True) for b in plain.content] == [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "x"}},
    ]
    assert streamed.content[1].input == {"q": "x"}
    assert streamed.stop_reason == plain.stop_reason == "tool_use"


async def test_create_stream_true_raw_events(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    server.set_handler(lambda r: text("abcdefghijkl"))
    stream = await create(client, stream=True)
    types = [event.type async for event in stream]
    # `ping` is dropped by the client's SSE parser.
    assert types[0] == "message_start"
    assert types[1] == "content_block_start"
    assert types.count("content_block_delta") >= 2
    assert types[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert server.requests[0].stream is True


async def test_tool_use_block_partial_json_is_streamed_as_given(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    block = tool_use_block("calculator", {"expr": "1+1"}, id="toolu_1", partial_json='{"expr": ')
    server.set_handler(lambda r: message([block], stop_reason="tool_use"))
    stream = await create(client, stream=True)
    deltas = [
        e.delta.partial_json
        async for e in stream
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert len(deltas) >= 2 and "".join(deltas) == '{"expr": '
    plain = await create(client)  # a JSON response carries input, and no partial_json key
    assert plain.content[0].input == {"expr": "1+1"}
    assert not hasattr(plain.content[0], "partial_json")


def test_sync_client_stream(server: FakeAnthropicServer) -> None:
    server.set_handler(lambda r: text("synchronous hello"))
    with anthropic.Anthropic(api_key="test-key", base_url=server.base_url, max_retries=0) as c:
        with c.messages.stream(model=MODEL, max_tokens=10, messages=HI) as s:
            assert "".join(s.text_stream) == "synchronous hello"
        assert c.messages.create(model=MODEL, max_tokens=10, messages=HI).content[0].text == (
            "synchronous hello"
        )


async def test_tool_use_streamed_input_reassembled(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    tool_input = {"expr": "2 + 2", "options": {"precise": True, "digits": [1, 2, 3]}, "s": "é ✓"}
    server.set_handler(lambda r: tool_use("calculator", tool_input, text="Computing."))
    events, final = await stream_final(client)
    json_deltas = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert len(json_deltas) >= 2
    assert json.loads("".join(json_deltas)) == tool_input
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[0].text == "Computing."
    block = final.content[1]
    assert block.name == "calculator"
    assert block.input == tool_input
    assert block.id == "toolu_fake_0_1"  # assigned deterministically when not given
    assert final.stop_reason == "tool_use"


async def test_thinking_round_trip(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    server.set_handler(
        Script(
            message(
                [
                    thinking_block("Let me think step by step.", signature="sig-123"),
                    {"type": "redacted_thinking", "data": "opaque-bytes"},
                    text_block("42"),
                ]
            ),
            text("done"),
        )
    )
    events, final = await stream_final(client)
    delta_types = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert "thinking_delta" in delta_types
    assert "signature_delta" in delta_types
    assert [b.type for b in final.content] == ["thinking", "redacted_thinking", "text"]
    thinking, redacted, answer = final.content
    assert thinking.thinking == "Let me think step by step."
    assert thinking.signature == "sig-123"
    assert redacted.data == "opaque-bytes"
    assert answer.text == "42"

    # Send the blocks back, as a tool loop would; the server sees them intact.
    assistant_content = [
        {"type": "thinking", "thinking": thinking.thinking, "signature": thinking.signature},
        {"type": "redacted_thinking", "data": redacted.data},
        {"type": "text", "text": answer.text},
    ]
    await create(
        client,
        messages=[*HI, {"role": "assistant", "content": assistant_content}, *HI],
    )
    assert server.requests[1].messages[1]["content"] == assistant_content


# --------------------------------------------------------------------------- Script


async def test_script_replays_in_order_then_exhausts(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    seen: list[int] = []

    def echo(request: RecordedRequest) -> Reply:
        seen.append(request.index)
        return text(f"echo: {request.last_user_text}")

    script = Script(text("first"), echo)
    server.set_handler(script)
    assert script.remaining == 2
    assert (await create(client)).content[0].text == "first"
    second = await create(client, messages=[{"role": "user", "content": "again"}])
    assert second.content[0].text == "echo: again"
    assert seen == [1]
    assert script.remaining == 0

    with pytest.raises(anthropic.InternalServerError) as info:
        await create(client)
    assert info.value.status_code == 500
    assert "Script exhausted after 2 replies" in str(info.value)
    assert len(server.handler_errors) == 1
    assert isinstance(server.handler_errors[0], ScriptExhaustedError)
    assert isinstance(server.handler_errors[0], AssertionError)


async def test_handler_exception_becomes_500(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    def broken(request: RecordedRequest) -> Reply:
        raise ValueError("boom in handler")

    server.set_handler(broken)
    with pytest.raises(anthropic.InternalServerError) as info:
        await create(client)
    assert "ValueError: boom in handler" in (info.value.api_message or "")
    assert [type(e) for e in server.handler_errors] == [ValueError]

    server.set_handler(lambda r: "not a reply")  # type: ignore[arg-type,return-value]
    with pytest.raises(anthropic.InternalServerError, match="expected a Reply"):
        await create(client)
    assert isinstance(server.handler_errors[1], TypeError)


# --------------------------------------------------------------------------- errors


async def test_error_400(server: FakeAnthropicServer, client: anthropic.AsyncAnthropic) -> None:
    server.set_handler(lambda r: error(400, "max_tokens: too large"))
    with pytest.raises(anthropic.BadRequestError) as info:
        await create(client)
    exc = info.value
    assert exc.status_code == 400
    assert exc.type == "invalid_request_error"
    assert exc.api_message == "max_tokens: too large"
    assert "max_tokens: too large" in str(exc)
    assert exc.request_id is not None and exc.request_id.startswith("req_fake_")

    # A streaming request gets the same HTTP error before any event.
    with pytest.raises(anthropic.BadRequestError, match="max_tokens: too large"):
        await stream_final(client)


@pytest.mark.parametrize(
    ("status", "exc_type", "error_type"),
    [
        (401, anthropic.AuthenticationError, "authentication_error"),
        (403, anthropic.PermissionDeniedError, "permission_error"),
        (404, anthropic.NotFoundError, "not_found_error"),
        (413, anthropic.APIStatusError, "request_too_large"),
        (500, anthropic.InternalServerError, "api_error"),
    ],
)
async def test_error_types_by_status(
    server: FakeAnthropicServer,
    client: anthropic.AsyncAnthropic,
    status: int,
    exc_type: type[Exception],
    error_type: str,
) -> None:
    server.set_handler(lambda r: error(status, "nope"))
    with pytest.raises(exc_type) as info:
        await create(client)
    assert info.value.status_code == status  # type: ignore[attr-defined]
    assert info.value.body["error"] == {"type": error_type, "message": "nope"}  # type: ignore[attr-defined]


async def test_rate_limited_retry_after(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    server.set_handler(Script(rate_limited(retry_after=2.5, message="slow down"), rate_limited()))
    with pytest.raises(anthropic.RateLimitError) as info:
        await create(client)
    assert info.value.status_code == 429
    assert info.value.type == "rate_limit_error"
    assert info.value.api_message == "slow down"
    assert info.value.response.headers["retry-after"] == "2.5"
    with pytest.raises(anthropic.RateLimitError) as info:
        await create(client)
    assert info.value.response.headers["retry-after"] == "0"


async def test_overloaded_529(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    server.set_handler(lambda r: overloaded())
    with pytest.raises(anthropic.InternalServerError) as info:
        await create(client)
    assert info.value.status_code == 529
    assert info.value.type == "overloaded_error"
    assert info.value.api_message == "Overloaded"
    with pytest.raises(anthropic.APIStatusError) as info:
        await stream_final(client)
    assert info.value.status_code == 529


async def test_client_retries_on_529(server: FakeAnthropicServer) -> None:
    server.set_handler(
        Script(
            error(529, "busy", retry_after=0.01),
            rate_limited(retry_after=0.01),
            text("finally"),
        )
    )
    async with anthropic.AsyncAnthropic(
        api_key="test-key", base_url=server.base_url, max_retries=2
    ) as c:
        msg = await c.messages.create(model=MODEL, max_tokens=10, messages=HI)
    assert msg.content[0].text == "finally"
    assert len(server.requests) == 3
    assert [r.headers["x-stainless-retry-count"] for r in server.requests] == ["0", "1", "2"]


async def test_stream_error_raises_during_iteration(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    server.set_handler(lambda r: stream_error(text("abcdefghijkl"), after_events=4))
    received = []
    with pytest.raises(anthropic.APIStatusError) as info:
        async with client.messages.stream(model=MODEL, max_tokens=10, messages=HI) as s:
            async for event in s:
                received.append(event.type)
    # message_start, ping (dropped by the client), content_block_start, one delta
    assert received == ["message_start", "content_block_start", "content_block_delta", "text"]
    assert "content_block_stop" not in received
    exc = info.value
    assert exc.type == "overloaded_error"
    assert exc.api_message == "Overloaded"
    assert exc.status_code == 200  # the HTTP status had already been sent

    server.set_handler(
        lambda r: stream_error(text("abc"), after_events=0, message="boom", type="api_error")
    )
    with pytest.raises(anthropic.APIStatusError) as info:
        await stream_final(client)
    assert info.value.type == "api_error"
    assert info.value.api_message == "boom"

    # Not streaming: a 529 with the given message.
    server.set_handler(lambda r: stream_error(text("abc"), after_events=3))
    with pytest.raises(anthropic.InternalServerError) as info:
        await create(client)
    assert info.value.status_code == 529
    assert info.value.type == "overloaded_error"


async def test_disconnect_raises_during_iteration(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    server.set_handler(lambda r: disconnect(text("abcdefghijkl"), after_events=4))
    received = []
    with pytest.raises((anthropic.APIConnectionError, _httpx.TransportError)):
        async with client.messages.stream(model=MODEL, max_tokens=10, messages=HI) as s:
            async for event in s:
                received.append(event.type)
    # message_start, ping (dropped by the client), content_block_start, one delta; the
    # MessageStream also yields a derived `text` event after each text delta.
    assert received == ["message_start", "content_block_start", "content_block_delta", "text"]

    # Not streaming: the connection drops before any response.
    with pytest.raises(anthropic.APIConnectionError):
        await create(client)

    # The server keeps serving afterwards.
    server.set_handler(lambda r: text("still here"))
    assert (await create(client)).content[0].text == "still here"


# --------------------------------------------------------------------------- timing


async def test_slow_stream_delays_each_event(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    delay = 0.04
    server.set_handler(lambda r: slow(text("abcdefgh"), delay=delay))
    stamps = []
    start = time.monotonic()
    stream = await create(client, stream=True)  # headers arrive at once
    assert time.monotonic() - start < delay * 6
    async for _ in stream:
        stamps.append(time.monotonic())
    # 8 events: message_start, ping, block start, 2 deltas, block stop, message_delta/stop
    assert len(stamps) == 7  # the client drops `ping`
    assert stamps[-1] - start >= 8 * delay * 0.9
    assert stamps[-1] - stamps[0] >= 3 * delay  # events trickle in, not all at once


async def test_slow_non_stream_delays_once(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    server.set_handler(lambda r: slow(text("late"), delay=0.2))
    start = time.monotonic()
    msg = await create(client)
    elapsed = time.monotonic() - start
    assert msg.content[0].text == "late"
    assert 0.2 <= elapsed < 1.5


async def test_slow_before_is_a_time_to_first_token_then_the_rest_at_once(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    """``before`` delays the start of a reply once, streamed or not: a streamed reply of 8
    events is not 8 times as slow as the same reply unstreamed (what ``delay`` does)."""
    server.set_handler(lambda r: slow(text("abcdefgh"), before=0.3))
    start = time.monotonic()
    stamps = [time.monotonic() async for _ in await create(client, stream=True)]
    assert len(stamps) == 7
    assert stamps[0] - start >= 0.3
    assert stamps[-1] - stamps[0] < 0.1  # after the first, nothing waits
    start = time.monotonic()
    msg = await create(client)
    assert msg.content[0].text == "abcdefgh"
    assert 0.3 <= time.monotonic() - start < 0.6


async def test_hang_with_client_timeout(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    server.set_handler(lambda r: hang())
    start = time.monotonic()
    with pytest.raises(anthropic.APITimeoutError):
        await create(client, timeout=0.3)
    assert time.monotonic() - start < 2
    with pytest.raises(anthropic.APITimeoutError):
        await stream_final(client, timeout=0.3)


async def test_short_hang_then_connection_closed(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    server.set_handler(lambda r: hang(0.2))
    with pytest.raises(anthropic.APIConnectionError) as info:
        await create(client)
    assert not isinstance(info.value, anthropic.APITimeoutError)


async def test_stop_returns_promptly_with_hanging_request() -> None:
    server = FakeAnthropicServer(lambda r: hang()).start()
    async with anthropic.AsyncAnthropic(
        api_key="test-key", base_url=server.base_url, max_retries=0, timeout=30
    ) as c:
        task = asyncio.create_task(c.messages.create(model=MODEL, max_tokens=10, messages=HI))
        for _ in range(200):
            if server.requests:
                break
            await asyncio.sleep(0.01)
        assert len(server.requests) == 1
        start = time.monotonic()
        server.stop()
        assert time.monotonic() - start < 1.0
        with pytest.raises(anthropic.APIConnectionError):
            await asyncio.wait_for(task, 5)
    server.stop()  # idempotent


# --------------------------------------------------------------------------- recording


async def test_requests_are_recorded(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    tools = [{"name": "calc", "description": "math", "input_schema": {"type": "object"}}]
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "what is"}, {"type": "text", "text": "2+2?"}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_9", "name": "calc", "input": {"e": "2+2"}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "4"}],
        },
    ]
    await create(client, system="be brief", tools=tools, messages=messages)
    await create(client, system=[{"type": "text", "text": "sys"}])

    first, second = server.requests
    assert (first.index, second.index) == (0, 1)
    assert first.path == "/v1/messages"
    # anthropic 2.x sends the key as `authorization: Bearer ...`; older SDKs as `x-api-key`.
    assert first.api_key == "test-key"
    assert "x-api-key" in first.headers or first.headers["authorization"] == "Bearer test-key"
    assert first.headers["content-type"] == "application/json"
    assert "anthropic-version" in first.headers
    assert first.body["max_tokens"] == 100
    assert first.model == MODEL
    assert first.stream is False
    assert first.system == "be brief"
    assert first.tools == tools
    assert first.messages == messages
    assert first.last_user_text is None  # tool_result-only message
    assert first.tool_results == [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "4"}]

    assert second.system == [{"type": "text", "text": "sys"}]
    assert second.tools == []
    assert second.last_user_text == "hi"
    assert second.tool_results == []

    multi = RecordedRequest(body={"messages": messages[:1]}, headers={}, path="/", index=0)
    assert multi.last_user_text == "what is\n2+2?"

    server.reset()
    assert server.requests == []
    await create(client)
    assert server.requests[0].index == 0


async def test_concurrent_requests(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    server.set_handler(lambda r: slow(text(f"n={r.index}"), delay=0.05))
    results = await asyncio.gather(*(create(client) for _ in range(8)))
    assert len(server.requests) == 8
    assert sorted(r.index for r in server.requests) == list(range(8))
    assert len({m.id for m in results}) == 8


async def test_unknown_paths_and_bad_bodies(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    with pytest.raises(anthropic.NotFoundError):
        await client.models.list()

    def post(path: str, data: bytes) -> tuple[int, dict[str, Any]]:
        req = urllib.request.Request(
            server.base_url + path, data=data, headers={"content-type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    status, body = await asyncio.to_thread(post, "/v1/complete", b"{}")
    assert status == 404
    assert body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"

    status, body = await asyncio.to_thread(post, "/v1/messages", b"{not json")
    assert status == 400
    assert body["error"]["type"] == "invalid_request_error"

    status, body = await asyncio.to_thread(post, "/v1/messages", b"[1, 2]")
    assert status == 400
    assert server.requests == []


def test_reachable_from_another_process(server: FakeAnthropicServer) -> None:
    server.set_handler(lambda r: text(f"hello {r.last_user_text}"))
    code = (
        "import json, sys, urllib.request\n"
        "req = urllib.request.Request(sys.argv[1] + '/v1/messages', data=json.dumps("
        "{'model': 'm', 'max_tokens': 5, 'messages': [{'role': 'user', 'content': 'proc'}]}"
        ").encode(), headers={'content-type': 'application/json', 'x-api-key': 'k'})\n"
        "print(json.loads(urllib.request.urlopen(req, timeout=5).read())['content'][0]['text'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, server.base_url],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert out.stdout.strip() == "hello proc"
    assert server.requests[0].headers["x-api-key"] == "k"
    assert server.requests[0].api_key == "k"


def test_lifecycle() -> None:
    server = FakeAnthropicServer()
    with pytest.raises(RuntimeError):
        _ = server.base_url
    with server:
        assert server.base_url.startswith("http://127.0.0.1:")
        assert int(server.base_url.rsplit(":", 1)[1]) > 0
        with pytest.raises(RuntimeError):
            server.start()
    server.stop()


def test_builders_validate_wrapping() -> None:
    with pytest.raises(ValueError):
        stream_error(error(400, "x"), after_events=1)
    with pytest.raises(ValueError):
        disconnect(hang(), after_events=1)
    with pytest.raises(ValueError):
        disconnect(stream_error(text("x"), after_events=1), after_events=1)
