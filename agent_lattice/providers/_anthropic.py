"""The built-in client for Anthropic and Anthropic-compatible endpoints (DeepSeek, Kimi, ...)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import sys
import threading
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from .. import _settings
from .._loop_holds import LoopHolds
from .._messages import ModelMessage, Usage
from ._base import EventSink, ModelRequest, ProviderError, is_retryable_status

if TYPE_CHECKING:
    import anthropic

__all__ = ["AnthropicModelClient"]

_RAW_EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    }
)
_RETRYABLE_ERROR_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error"})

# The SDK's aiohttp transport (``anthropic[aiohttp]``) rather than its httpx default: a streamed
# request cost 3.4-4.4 ms of CPU through httpx's connection pool and 1.8 ms through aiohttp,
# one at a time and 50 at once alike (bench/README.md, seventh round); requests, errors and
# timeouts are the SDK's own either way (it maps aiohttp's exceptions onto httpx's).
#
# One HTTP client per event loop, shared by every AnthropicModelClient of the process. Building
# one (its TLS context, with the CA bundle) costs ~21 ms of CPU, and a service that makes an
# agent per request or session paid it per query, with a new connection pool each time. An
# httpx client's connections belong to the loop that opened them, hence one per loop; the
# SDK's client objects around it (key, base URL, headers) stay each agent's own.
_HTTP_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
    weakref.WeakKeyDictionary()
)
_SPARE_HTTP: list[Any] = []  # built off the loop by warm_up(), taken by the first loop
_HTTP_LOCK = threading.Lock()


def _http_client() -> Any:
    """The running loop's shared HTTP client (built, or taken from warm_up, on first use)."""
    import anthropic

    loop = asyncio.get_running_loop()
    with _HTTP_LOCK:
        # a closed loop's client can serve no one (its connections were that loop's), and
        # its pooled connections would keep the loop, the weak key, alive: let both go
        for closed in [other for other in _HTTP_BY_LOOP if other.is_closed()]:
            del _HTTP_BY_LOOP[closed]
            _CLOSERS.pop(closed, None)  # a suspended closer holds the client too
        http = _HTTP_BY_LOOP.get(loop)
        if http is None or http.is_closed:
            http = _SPARE_HTTP.pop() if _SPARE_HTTP else anthropic.DefaultAioHttpClient()
            _HTTP_BY_LOOP[loop] = http
            _CLOSERS[loop] = _closed_with_loop(http)
        return http


# Each loop's client is also closed when the loop shuts down its async generators (asyncio.run
# does, before it closes the loop), for a request made outside any worker: an async generator
# is the one hook a loop's shutdown offers
_CLOSERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


def _closed_with_loop(http: Any) -> Any:
    async def closer() -> AsyncIterator[None]:
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                await http.aclose()

    generator = closer()
    step: Any = generator.__anext__()  # registers it with the running loop; runs to its yield
    with contextlib.suppress(StopIteration):
        step.send(None)
    return generator


async def _release_http_client(loop: asyncio.AbstractEventLoop) -> None:
    with _HTTP_LOCK:
        _HTTP_BY_LOOP.pop(loop, None)
        closer = _CLOSERS.pop(loop, None)
    if closer is not None:  # it closes the client (see _closed_with_loop)
        await closer.aclose()


# The workers of each loop that may make model requests: the last to stop closes the loop's
# shared client (aiohttp reports a session left open, at exit, as an error)
_HOLDS = LoopHolds(_release_http_client)


def shared_http_client_held() -> contextlib.AbstractAsyncContextManager[None]:
    """Held while a worker runs: the running loop's shared HTTP client is closed once no
    worker of that loop holds it (a later request builds another)."""
    return _HOLDS.held()


def _prepare_http_client() -> None:
    """Build the first loop's HTTP client now, in this (non-loop) thread."""
    import anthropic

    with _HTTP_LOCK:
        if not _HTTP_BY_LOOP and not _SPARE_HTTP:
            _SPARE_HTTP.append(anthropic.DefaultAioHttpClient())


class AnthropicModelClient:
    """Calls the Messages API with the official ``anthropic`` SDK.

    The SDK's own retries are off: the durable runtime owns retries, so a failure is
    classified once (:class:`ProviderError`) and retried by Temporal with ``retry-after``.
    ``api_key`` falls back to ``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_API_KEY_FILE``) and
    ``base_url`` to ``ANTHROPIC_BASE_URL``, read where the client is built (the worker), never
    sent through workflow history.
    """

    # it never changes the request's messages (it sends their to_wire() dumps): the model
    # activity may hand it the transcript cache's own messages, not copies
    reads_messages_only = True

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        default_headers: dict[str, str] | None = None,
    ) -> None:
        self._api_key = api_key
        self._base_url = base_url
        self._default_headers = default_headers
        self._client: anthropic.AsyncAnthropic | None = None
        self._client_http: Any = None  # the shared HTTP client self._client was built on

    @property
    def base_url(self) -> str | None:
        return self._base_url or os.environ.get("ANTHROPIC_BASE_URL")

    @property
    def warmed(self) -> bool:
        """Whether warm_up() has nothing left to do (the SDK imported, an HTTP client built)."""
        return "anthropic" in sys.modules and bool(_HTTP_BY_LOOP or _SPARE_HTTP)

    def warm_up(self) -> None:
        """Import the SDK and build its HTTP client now (seconds on a cold process), so that
        the first request's deadline measures the request, not the import. Called off the
        event loop (``asyncio.to_thread``)."""
        _prepare_http_client()

    def _sdk(self) -> anthropic.AsyncAnthropic:
        """The SDK client on the running loop's shared HTTP client (built on first use)."""
        # Imported on first use: the SDK takes seconds to import, and only workers call it.
        import anthropic

        http = _http_client()
        if self._client is None or self._client_http is not http:
            self._client = anthropic.AsyncAnthropic(
                api_key=self._api_key or _settings.model_api_key() or "missing-api-key",
                base_url=self.base_url,
                max_retries=0,
                default_headers=self._default_headers,
                http_client=http,
            )
            self._client_http = http
        return self._client

    def params(self, request: ModelRequest, *, messages: bool = True) -> dict[str, Any]:
        """The Messages API parameters for ``request`` (exposed for tests and debugging;
        ``messages=False``: all but the messages)."""
        params: dict[str, Any] = {"model": request.model, "max_tokens": request.max_tokens}
        if messages:
            params["messages"] = [m.to_wire() for m in request.messages]
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in request.tools
            ]
        extra: dict[str, Any] = {}
        if request.thinking is not None:
            params["thinking"] = request.thinking
        if request.reasoning_effort is not None:
            extra["reasoning_effort"] = request.reasoning_effort
        if request.output_format is not None:
            params["output_config"] = {"format": request.output_format}
        if extra:
            params["extra_body"] = extra
        if request.timeout_ms is not None:
            params["timeout"] = request.timeout_ms / 1000
        return params

    async def _post_streamed(self, params: dict[str, Any], wire: list[str] | None) -> Any:
        """POST ``params`` as a streamed Messages request; its events come as plain dicts.

        The SDK's ``messages.create`` copies the whole body (every message and tool schema,
        on every request) before it encodes it, and builds a pydantic model of each event
        that ``_read_stream`` would only dump back to a dict: 0.5-0.8 ms of CPU per request,
        a third of the request's cost (bench/README.md, ninth round). The body here is
        encoded once from the dicts ``params()`` already built, and the events are the SSE
        data as parsed. Everything else stays the SDK's: the client's headers and key, the
        SSE decoding, an ``error`` event raised as ``APIStatusError``, timeouts and
        connection errors. What it leaves out: the SDK's span of the call, which exists only
        with OpenTelemetry installed (then ``messages.create`` sends the request, see
        ``_sdk_traces``), and the SDK's warning about a deprecated model.

        ``wire``: the messages already encoded (``ModelRequest.wire_messages``; ``params`` then
        has none), joined into the body as they are, so a request's encoding does not grow
        with the conversation (bench/README.md, eleventh round).
        """
        from anthropic import AsyncStream

        body = {k: v for k, v in params.items() if k not in ("timeout", "extra_body")}
        body.update(params.get("extra_body") or {})
        body["stream"] = True
        options: dict[str, Any] = {}
        if "timeout" in params:
            options["timeout"] = params["timeout"]
        content = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
        if wire is not None:  # the object's last "}" closes the messages' array instead
            content = f'{content[:-1]},"messages":[{",".join(wire)}]}}'
        return await self._sdk().post(
            "/v1/messages",
            cast_to=object,
            content=content.encode(),
            options=options,  # type: ignore[arg-type]  # a RequestOptions TypedDict
            stream=True,
            stream_cls=AsyncStream[object],
        )

    async def create(
        self, request: ModelRequest, *, on_event: EventSink | None = None
    ) -> ModelMessage:
        import anthropic

        wire = request.wire_messages if request.stream and not _sdk_traces() else None
        params = self.params(request, messages=wire is None)
        try:
            if request.stream:
                if _sdk_traces():  # its span of the call, with the request's trace context
                    stream = await self._sdk().messages.create(**params, stream=True)
                else:
                    stream = await self._post_streamed(params, wire)
                async with stream:
                    final = await _read_stream(stream, on_event)
            else:
                reply = await self._sdk().messages.create(**params)
                final = reply.model_dump(mode="json", exclude_none=True, warnings=False)
        except anthropic.APIStatusError as err:
            raise _classify_status(err) from None
        except anthropic.APITimeoutError as err:
            raise ProviderError(
                f"model request timed out: {err}", retryable=True, error_type="timeout"
            ) from None
        except anthropic.APIConnectionError as err:
            why = f"{err} ({err.__cause__})" if err.__cause__ is not None else str(err)
            raise ProviderError(
                f"could not reach the model provider at {self._sdk().base_url}: {why}",
                retryable=True,
                error_type="connection",
            ) from None
        return _to_message(final)


async def _read_stream(stream: Any, on_event: EventSink | None) -> dict[str, Any]:
    """The message a stream of raw events carries, as a wire-format dict.

    Built here rather than by the SDK's accumulating stream, which gives up the whole message
    when one tool input does not parse (a bare string cut into chunks, text that is no JSON),
    losing a billed turn, and runs a cut object (``{"a": ``) as ``{}``. Here each tool input
    is parsed once, whole, and one that does not parse is marked, to be answered with an error.
    """
    message: dict[str, Any] = {}
    json_bufs: dict[int, str] = {}
    async for event in stream:
        data = _event_dict(event)
        kind = data.get("type")
        if on_event is not None and kind in _RAW_EVENTS:
            await on_event(data)
        # copies: the side channel keeps the event dicts it was given
        if kind == "message_start":
            message = copy.deepcopy(data["message"])
            message.setdefault("content", [])
        elif kind == "content_block_start":
            message["content"].append(copy.deepcopy(data["content_block"]))
        elif kind == "content_block_delta":
            index, delta = data["index"], data["delta"]
            block, dtype = message["content"][index], delta.get("type")
            if dtype == "text_delta":
                block["text"] = block.get("text", "") + delta["text"]
            elif dtype == "input_json_delta":
                json_bufs[index] = json_bufs.get(index, "") + delta.get("partial_json", "")
            elif dtype == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta["thinking"]
            elif dtype == "signature_delta":
                block["signature"] = delta["signature"]
            elif dtype == "citations_delta":
                block.setdefault("citations", []).append(copy.deepcopy(delta["citation"]))
        elif kind == "content_block_stop" and data["index"] in json_bufs:
            _set_input(message["content"][data["index"]], json_bufs.pop(data["index"]))
        elif kind == "message_delta":
            message.update(copy.deepcopy(data.get("delta", {})))
            # usage counts here are cumulative totals; absent ones keep message_start's
            message["usage"] = {**message.get("usage", {}), **data.get("usage", {})}
    if not message:
        raise ProviderError(
            "the model stream ended before its message started",
            retryable=True,
            error_type="incomplete_stream",
        )
    for index, text in json_bufs.items():  # a stream that ended inside a block
        _set_input(message["content"][index], text)
    return message


def _sdk_traces() -> bool:
    """Whether the SDK traces its calls: a process with an OpenTelemetry tracer provider set
    (``otel=True`` sets one) gets the SDK's ``anthropic.messages.create`` span inside the
    model request's ``chat`` span, and its trace context sent to the provider."""
    try:
        from opentelemetry import trace
    except ImportError:  # the SDK itself imports it; without it, it has no spans
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _event_dict(event: Any) -> dict[str, Any]:
    """One streamed event as a wire-format dict, without null fields."""
    if isinstance(event, dict):  # the SSE data as parsed (_post_streamed)
        return _without_none(event)
    if hasattr(event, "model_dump"):  # the SDK's event model (a traced request)
        return event.model_dump(mode="json", exclude_none=True)
    return {}  # no JSON object: none of the Messages API's events, skipped


def _without_none(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without its null fields, at every depth but inside tool inputs (the model's
    arguments, kept as sent): what the SDK's models dumped with ``exclude_none`` gave."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if value is None:
            continue
        if key != "input":
            if isinstance(value, dict):
                value = _without_none(value)
            elif isinstance(value, list):
                value = [_without_none(v) if isinstance(v, dict) else v for v in value]
        out[key] = value
    return out


def _set_input(block: dict[str, Any], text: str) -> None:
    if not text.strip():
        return  # no input streamed: content_block_start's holds it whole
    try:
        block["input"] = json.loads(text)
    except ValueError as err:
        if block.get("type") != "tool_use":
            return  # a server tool's input is only shown; keep what the start gave
        why = f"{err.msg} at character {err.pos}" if isinstance(err, json.JSONDecodeError) else err
        block["input"] = {}
        block["input_error"] = (
            f"the input must be a JSON object; got invalid JSON '{_shorten(text)}' ({why})"
        )


def _to_message(final: dict[str, Any]) -> ModelMessage:
    return ModelMessage.model_validate(
        {
            "role": "assistant",
            "content": [_block(b) for b in final.get("content") or []],
            "provider_response_id": final.get("id"),
            "model": final.get("model"),
            "stop_reason": final.get("stop_reason"),
            "usage": Usage.model_validate(final.get("usage") or {}),
        }
    )


def _block(block: dict[str, Any]) -> dict[str, Any]:
    data = dict(block)
    raw = data.get("input")
    if data.get("type") == "tool_use" and "input_error" not in data and not isinstance(raw, dict):
        # The model sent a tool input that is no JSON object: the call cannot run, and the
        # API refuses such a tool_use in the next request. Keep an empty input and say why,
        # so the call is answered with an error at once (not retried as a failed request).
        kind = _JSON_TYPES.get(type(raw), type(raw).__name__)
        data["input"] = {}
        data["input_error"] = (
            f"the input must be a JSON object; got {kind} {_shorten(json.dumps(raw, ensure_ascii=False))}"
        )
    return data


def _shorten(shown: str) -> str:
    return shown if len(shown) <= 200 else shown[:200] + "…"


_JSON_TYPES = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def _classify_status(err: anthropic.APIStatusError) -> ProviderError:
    status = err.status_code
    body = err.body if isinstance(err.body, dict) else {}
    detail = body.get("error") if isinstance(body.get("error"), dict) else body
    error_type = detail.get("type") if isinstance(detail, dict) else None
    message = detail.get("message") if isinstance(detail, dict) else None
    retry_after: float | None = None
    raw_retry = err.response.headers.get("retry-after") if err.response is not None else None
    if raw_retry:
        try:
            retry_after = max(0.0, float(raw_retry))
        except ValueError:
            retry_after = None
    retryable = is_retryable_status(status) or error_type in _RETRYABLE_ERROR_TYPES
    # An error event inside a 200 stream carries the real cause in its type.
    if status < 400 and error_type is not None:
        retryable = error_type in _RETRYABLE_ERROR_TYPES
    return ProviderError(
        message or str(err),
        status_code=status if status >= 400 else None,
        retryable=retryable,
        retry_after=retry_after,
        error_type=error_type,
    )
