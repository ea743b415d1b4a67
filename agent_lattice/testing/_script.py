"""Scripting the fake Anthropic server: the requests it records and the replies it sends.

A *handler* is a plain function of the `RecordedRequest` returning a `Reply`; `Script`
is a handler that replays replies in order. Replies are built with `text`, `tool_use`,
`message`, `error`, `overloaded`, `rate_limited`, and wrapped for fault injection with
`slow`, `hang`, `stream_error` and `disconnect`. Serving them over HTTP/SSE is
`agent_lattice.testing._fake_server`'s job; everything here is importable from
`agent_lattice.testing`.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeAlias

__all__ = [
    "Handler",
    "RecordedRequest",
    "Reply",
    "Script",
    "ScriptExhaustedError",
    "disconnect",
    "error",
    "hang",
    "message",
    "overloaded",
    "rate_limited",
    "slow",
    "stream_error",
    "text",
    "text_block",
    "thinking_block",
    "tool_use",
    "tool_use_block",
]

_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class RecordedRequest:
    """One ``POST /v1/messages`` request as received by the fake server.

    Attributes:
        body: The parsed JSON request body.
        headers: Request headers, with lower-case names.
        path: The request path (including any query string).
        index: 0-based arrival index among the server's recorded requests.
    """

    body: dict[str, Any]
    headers: dict[str, str]
    path: str
    index: int

    @property
    def stream(self) -> bool:
        """Whether the client asked for a streamed (SSE) response."""
        return bool(self.body.get("stream", False))

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's ``messages``."""
        return self.body.get("messages") or []

    @property
    def model(self) -> str:
        """The requested model name."""
        return str(self.body.get("model", ""))

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The request's tool definitions (empty when none were sent)."""
        return self.body.get("tools") or []

    @property
    def system(self) -> Any:
        """The system prompt as sent: a string, a list of blocks, or None."""
        return self.body.get("system")

    @property
    def api_key(self) -> str | None:
        """The API key sent, from ``x-api-key`` or an ``authorization: Bearer`` header."""
        if "x-api-key" in self.headers:
            return self.headers["x-api-key"]
        scheme, _, token = self.headers.get("authorization", "").partition(" ")
        return token if scheme.lower() == "bearer" and token else None

    @property
    def last_user_text(self) -> str | None:
        """Text of the last user message: its string content, or its text blocks joined
        by newlines; None if there is no user message or it has no text blocks
        (e.g. a message holding only tool results)."""
        content = self._last_user_content()
        if isinstance(content, str):
            return content
        texts = [
            block.get("text", "")
            for block in content or []
            if isinstance(block, dict) and block.get("type") == "text"
        ]
        return "\n".join(texts) if texts else None

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """The ``tool_result`` blocks of the last user message."""
        content = self._last_user_content()
        if not isinstance(content, list):
            return []
        return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]

    def _last_user_content(self) -> Any:
        for msg in reversed(self.messages):
            if isinstance(msg, dict) and msg.get("role") == "user":
                return msg.get("content")
        return None


# --------------------------------------------------------------------------- replies


@dataclass(frozen=True)
class Reply:
    """Description of one response; rendered as JSON or SSE per the request's ``stream``.

    Build replies with the module functions (`text`, `tool_use`, `message`, `error`,
    `slow`, `hang`, `stream_error`, `disconnect`, ...) rather than directly.
    """

    content: tuple[dict[str, Any], ...] = ()
    stop_reason: str | None = "end_turn"
    usage: Mapping[str, int] | None = None
    model: str | None = None
    id: str | None = None
    status: int = 200
    error_type: str | None = None
    error_message: str | None = None
    retry_after: float | None = None
    delay: float = 0.0
    before: float = 0.0
    hang_seconds: float | None = None
    stream_error_after: int | None = None
    disconnect_after: int | None = None


Handler: TypeAlias = Callable[[RecordedRequest], Reply]
"""A function deciding the reply to a request; called synchronously in a server thread."""


def text_block(text: str) -> dict[str, Any]:
    """A ``text`` content block."""
    return {"type": "text", "text": text}


def tool_use_block(
    name: str, input: Mapping[str, Any], id: str | None = None, *, partial_json: str | None = None
) -> dict[str, Any]:
    """A ``tool_use`` content block. Without ``id``, one is assigned when rendered
    (``toolu_fake_<request index>_<block index>``).

    ``partial_json`` is the input's JSON text as a streamed response sends it (in
    ``input_json_delta`` chunks) instead of ``input`` as JSON: to test a model that streams
    broken JSON such as ``'{"a": '``. Non-streamed responses send ``input``."""
    block = {"type": "tool_use", "id": id, "name": name, "input": dict(input)}
    if partial_json is not None:
        block["partial_json"] = partial_json
    return block


def thinking_block(thinking: str, signature: str = "sig") -> dict[str, Any]:
    """A ``thinking`` content block with its signature."""
    return {"type": "thinking", "thinking": thinking, "signature": signature}


def message(
    content: list[dict[str, Any]],
    *,
    stop_reason: str | None = "end_turn",
    usage: Mapping[str, int] | None = None,
    model: str | None = None,
    id: str | None = None,
) -> Reply:
    """An assistant message with arbitrary wire-format content blocks.

    Args:
        content: Blocks such as `text_block`, `tool_use_block`, `thinking_block` or
            ``{"type": "redacted_thinking", "data": ...}``.
        stop_reason: The message's ``stop_reason``.
        usage: Overrides for usage keys (``input_tokens``, ``output_tokens``,
            ``cache_creation_input_tokens``, ``cache_read_input_tokens``); unset keys
            get deterministic estimates (or 0 for the cache keys).
        model: Model name to report; defaults to the request's ``model``.
        id: Message id; defaults to ``msg_fake_<request index>``.
    """
    return Reply(
        content=tuple(copy.deepcopy(content)),
        stop_reason=stop_reason,
        usage=dict(usage) if usage else None,
        model=model,
        id=id,
    )


def text(
    text: str,
    *,
    stop_reason: str | None = "end_turn",
    usage: Mapping[str, int] | None = None,
    model: str | None = None,
    id: str | None = None,
) -> Reply:
    """An assistant message holding one text block."""
    return message([text_block(text)], stop_reason=stop_reason, usage=usage, model=model, id=id)


def tool_use(
    name: str,
    input: Mapping[str, Any],
    *,
    id: str | None = None,
    text: str | None = None,
    stop_reason: str | None = "tool_use",
    usage: Mapping[str, int] | None = None,
) -> Reply:
    """An assistant message calling tool ``name`` with ``input``, optionally preceded by
    a text block. ``id`` is the tool_use block id (assigned if omitted)."""
    blocks = [text_block(text)] if text is not None else []
    blocks.append(tool_use_block(name, input, id=id))
    return message(blocks, stop_reason=stop_reason, usage=usage)


def error(
    status: int,
    message: str,
    *,
    type: str | None = None,
    retry_after: float | None = None,
) -> Reply:
    """An HTTP error response with the API's error body.

    The body is ``{"type": "error", "error": {"type": ..., "message": message}}``; the
    error type defaults to the one the API uses for ``status``. A ``retry-after``
    header is sent when ``retry_after`` is given. Streaming requests get the same
    HTTP error (as the real API does before a stream starts).
    """
    if type is None:
        type = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return Reply(
        content=(),
        stop_reason=None,
        status=status,
        error_type=type,
        error_message=message,
        retry_after=retry_after,
    )


def overloaded(message: str = "Overloaded") -> Reply:
    """A 529 ``overloaded_error``."""
    return error(529, message)


def rate_limited(retry_after: float = 0.0, message: str = "Rate limited") -> Reply:
    """A 429 ``rate_limit_error`` with a ``retry-after`` header."""
    return error(429, message, retry_after=retry_after)


def slow(reply: Reply, *, delay: float = 0.0, before: float = 0.0) -> Reply:
    """``reply``, delayed: when streaming, ``delay`` seconds before each SSE event (the
    response headers are sent at once); otherwise ``delay`` seconds before responding.
    ``before``: seconds before the response starts, once (a provider's time to first
    token; the stream's events then follow at once, a reply that is not streamed too)."""
    return replace(reply, delay=delay, before=before)


def hang(seconds: float = 3600) -> Reply:
    """Accept the request, send nothing (not even headers) for ``seconds``, then close
    the connection. Ends early when the client disconnects or the server stops."""
    return Reply(stop_reason=None, hang_seconds=seconds)


def stream_error(
    reply: Reply,
    *,
    after_events: int,
    message: str = "Overloaded",
    type: str = "overloaded_error",
) -> Reply:
    """A stream that fails midway.

    Streaming requests get the first ``after_events`` SSE events of ``reply`` (counting
    ``message_start`` and ``ping``), then an ``error`` event
    ``{"type": "error", "error": {"type": type, "message": message}}``, then the stream
    ends. Non-streaming requests get ``error(529, message, type=type)``.
    """
    _check_message_reply(reply, "stream_error")
    return replace(reply, stream_error_after=after_events, error_type=type, error_message=message)


def disconnect(reply: Reply, *, after_events: int) -> Reply:
    """A stream whose connection drops: streaming requests get the first
    ``after_events`` SSE events of ``reply``, then the TCP connection is closed without
    ending the response. Non-streaming requests have the connection closed before
    any response is sent."""
    _check_message_reply(reply, "disconnect")
    return replace(reply, disconnect_after=after_events)


def _check_message_reply(reply: Reply, what: str) -> None:
    if reply.status != 200 or reply.hang_seconds is not None:
        raise ValueError(f"{what}() wraps a message reply, not an error or hang reply")
    if reply.stream_error_after is not None or reply.disconnect_after is not None:
        raise ValueError(f"{what}() cannot wrap a reply that already fails midway")


# --------------------------------------------------------------------------- Script


class ScriptExhaustedError(AssertionError):
    """Raised by `Script` when a request arrives after all its replies were used."""


class Script:
    """A handler replaying ``replies`` in order, one per request.

    Each entry is a `Reply` or a function of the `RecordedRequest` returning one
    (to assert on or adapt to the request). A request arriving after the last reply
    raises `ScriptExhaustedError`, which the server turns into an HTTP 500 with message
    ``"Script exhausted after N replies"`` and records on ``server.handler_errors``.
    """

    def __init__(self, *replies: Reply | Callable[[RecordedRequest], Reply]) -> None:
        self._replies = list(replies)
        self._used = 0
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        """How many replies have not been used yet."""
        return len(self._replies) - self._used

    def __call__(self, request: RecordedRequest) -> Reply:
        with self._lock:
            if self._used >= len(self._replies):
                raise ScriptExhaustedError(f"Script exhausted after {len(self._replies)} replies")
            entry = self._replies[self._used]
            self._used += 1
        return entry if isinstance(entry, Reply) else entry(request)
