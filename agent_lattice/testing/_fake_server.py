"""A fake Anthropic Messages API server for tests.

`FakeAnthropicServer` is a real HTTP server (stdlib only, running in a daemon thread on
``127.0.0.1`` and an ephemeral port) that speaks the Messages API wire format:
``POST /v1/messages`` answered as JSON, or as server-sent events when the request body
has ``"stream": true``. Point any Anthropic-compatible client at ``server.base_url``.
It works from any event loop and from other processes (e.g. worker subprocesses).

Each response is decided by a *handler*: a plain function of the `RecordedRequest`
returning a `Reply`, called in a server thread. `Script` is a handler that replays
replies in order. Replies are built with `text`, `tool_use`, `message`, `error`,
`overloaded`, `rate_limited`, and wrapped for fault injection with `slow`, `hang`,
`stream_error` and `disconnect`. Every request is recorded on ``server.requests``.

Example::

    from agent_lattice.testing import FakeAnthropicServer, Script, text, tool_use

    with FakeAnthropicServer(Script(tool_use("calculator", {"expr": "2+2"}), text("4"))) as server:
        agent = create_agent(api_key="test", base_url=server.base_url, model="claude-test", tools=[...])
        ...
        assert server.requests[1].tool_results[0]["content"] == "4"

A handler can also branch on the request::

    def handler(request: RecordedRequest) -> Reply:
        if request.tool_results:
            return text("done")
        return tool_use("search", {"q": request.last_user_text})

    server.set_handler(handler)

An exception raised by a handler (including a failed ``assert``) becomes an HTTP 500
reply whose message contains the exception text, and is stored on
``server.handler_errors`` so the test can re-raise or assert on it.
"""

from __future__ import annotations

import copy
import json
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, TypeAlias
from urllib.parse import urlsplit

__all__ = [
    "FakeAnthropicServer",
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
_REASONS: dict[int, str] = {529: "Overloaded"}


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


def slow(reply: Reply, *, delay: float) -> Reply:
    """``reply``, delayed: when streaming, ``delay`` seconds before each SSE event (the
    response headers are sent at once); otherwise ``delay`` seconds before responding."""
    return replace(reply, delay=delay)


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


def _default_handler(request: RecordedRequest) -> Reply:
    return text("ok")


# --------------------------------------------------------------------------- server


class FakeAnthropicServer:
    """A fake Anthropic Messages API server on ``127.0.0.1`` and an ephemeral port.

    Use as a context manager (or call `start` / `stop`) and pass `base_url` to the
    client. The handler (default: always ``text("ok")``) decides each reply.

    Attributes:
        requests: Every ``POST /v1/messages`` request with a valid JSON body, in
            arrival order (requests answered 404/400 by the server are not recorded).
        handler_errors: Exceptions raised by the handler, in order.
    """

    def __init__(self, handler: Handler | None = None) -> None:
        self.requests: list[RecordedRequest] = []
        self.handler_errors: list[BaseException] = []
        self._handler: Handler = handler or _default_handler
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._request_ids = 0
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``, the client's ``base_url``."""
        if self._httpd is None:
            raise RuntimeError("FakeAnthropicServer is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeAnthropicServer:
        """Start serving in a daemon thread; returns self."""
        if self._httpd is not None:
            raise RuntimeError("FakeAnthropicServer can only be started once")
        httpd = _HTTPServer(("127.0.0.1", 0), _RequestHandler)
        httpd.fake = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name=f"FakeAnthropicServer:{httpd.server_address[1]}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close open connections, including hanging or slow ones."""
        if self._httpd is None or self._stopping.is_set():
            return
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)

    def set_handler(self, handler: Handler) -> None:
        """Replace the handler for subsequent requests."""
        self._handler = handler

    def reset(self) -> None:
        """Forget recorded requests and handler errors; indices restart at 0."""
        with self._lock:
            self.requests.clear()
            self.handler_errors.clear()

    def __enter__(self) -> FakeAnthropicServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        url = self.base_url if self._httpd is not None else "not started"
        return f"<FakeAnthropicServer {url} requests={len(self.requests)}>"

    # -- called from request threads

    def _record(self, body: dict[str, Any], headers: dict[str, str], path: str) -> RecordedRequest:
        with self._lock:
            request = RecordedRequest(
                body=body, headers=headers, path=path, index=len(self.requests)
            )
            self.requests.append(request)
        return request

    def _reply_for(self, request: RecordedRequest) -> Reply:
        try:
            reply = self._handler(request)
            if not isinstance(reply, Reply):
                raise TypeError(
                    f"handler returned {reply!r}; expected a Reply (text(), tool_use(), error(), ...)"
                )
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            with self._lock:
                self.handler_errors.append(exc)
            return error(500, f"Fake server handler raised {type(exc).__name__}: {exc}")
        return reply

    def _next_request_id(self) -> str:
        with self._lock:
            self._request_ids += 1
            return f"req_fake_{self._request_ids:06d}"

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopping; False if the server is stopping."""
        return not self._stopping.wait(seconds)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # many concurrent clients (default 5 drops connects for ~1 s)
    fake: FakeAnthropicServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # the client went away, or the server is stopping
        super().handle_error(request, client_address)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeAnthropic/1.0"
    disable_nagle_algorithm = True  # else small writes wait ~40 ms for delayed ACKs
    server: _HTTPServer
    request_id = ""

    def setup(self) -> None:
        super().setup()
        self.server.fake._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.fake._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self._handle("POST")

    def do_GET(self) -> None:
        self._handle("GET")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # -- request handling

    def _handle(self, method: str) -> None:
        fake = self.server.fake
        self.request_id = fake._next_request_id()
        raw = self._read_body()
        if method != "POST" or urlsplit(self.path).path.rstrip("/") != "/v1/messages":
            self._send_error("not_found_error", f"Not found: {method} {self.path}", 404)
            return
        try:
            body = json.loads(raw)
        except ValueError as exc:
            self._send_error("invalid_request_error", f"Malformed JSON body: {exc}", 400)
            return
        if not isinstance(body, dict):
            self._send_error("invalid_request_error", "Request body must be a JSON object", 400)
            return
        headers = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        request = fake._record(body, headers, self.path)
        reply = fake._reply_for(request)
        try:
            self._render(request, reply)
        except OSError:
            self.close_connection = True

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(chunks)
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _render(self, request: RecordedRequest, reply: Reply) -> None:
        fake = self.server.fake
        if reply.hang_seconds is not None:
            self._hang(reply.hang_seconds)
            return
        if (not request.stream or reply.status != 200) and reply.delay > 0:
            if not fake._sleep(reply.delay):
                self._drop()
                return
        if reply.status != 200:
            extra = {}
            if reply.retry_after is not None:
                extra["retry-after"] = _format_seconds(reply.retry_after)
            self._send_error(
                reply.error_type or "api_error", reply.error_message or "", reply.status, extra
            )
            return
        if not request.stream:
            if reply.stream_error_after is not None:
                self._send_error(
                    reply.error_type or "overloaded_error", reply.error_message or "", 529
                )
            elif reply.disconnect_after is not None:
                self._drop()
            else:
                self._send_json(200, _message_json(request, reply))
            return
        self._stream(request, reply)

    def _stream(self, request: RecordedRequest, reply: Reply) -> None:
        fake = self.server.fake
        events = _stream_events(_message_json(request, reply))
        limit = reply.stream_error_after
        if limit is None:
            limit = reply.disconnect_after
        if limit is not None:
            events = events[:limit]
        if reply.stream_error_after is not None:
            events.append(("error", _error_body(reply.error_type, reply.error_message)))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", self.request_id)
        self.end_headers()
        for name, data in events:
            if reply.delay > 0 and not fake._sleep(reply.delay):
                self._drop()
                return
            payload = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
        if reply.disconnect_after is not None:
            self._drop()
            return
        self.wfile.write(b"0\r\n\r\n")

    def _hang(self, seconds: float) -> None:
        fake = self.server.fake
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0 and not fake._stopping.is_set():
            try:
                readable, _, _ = select.select([self.connection], [], [], min(remaining, 0.1))
                if readable and not self.connection.recv(1, socket.MSG_PEEK):
                    break  # the client closed the connection
            except (OSError, ValueError):
                break
            if readable and not fake._sleep(min(remaining, 0.1)):
                break
        self._drop()

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _send_error(
        self, type: str, message: str, status: int, extra: Mapping[str, str] | None = None
    ) -> None:
        self._send_json(status, _error_body(type, message), extra)

    def _send_json(
        self, status: int, payload: dict[str, Any], extra: Mapping[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status, _REASONS.get(status))
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", self.request_id)
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


# --------------------------------------------------------------------------- rendering


def _error_body(type: str | None, message: str | None) -> dict[str, Any]:
    return {"type": "error", "error": {"type": type or "api_error", "message": message or ""}}


def _format_seconds(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)


def _message_json(request: RecordedRequest, reply: Reply) -> dict[str, Any]:
    content = []
    for i, block in enumerate(copy.deepcopy(list(reply.content))):
        if block.get("type") == "tool_use" and not block.get("id"):
            block["id"] = f"toolu_fake_{request.index}_{i}"
        if not request.stream:
            block.pop("partial_json", None)
        content.append(block)
    prompt = {k: request.body.get(k) for k in ("system", "tools", "messages")}
    usage = {
        "input_tokens": max(1, len(json.dumps(prompt, default=str)) // 4),
        "output_tokens": max(1, sum(_output_chars(b) for b in content) // 4),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    usage.update(reply.usage or {})
    return {
        "id": reply.id or f"msg_fake_{request.index}",
        "type": "message",
        "role": "assistant",
        "model": reply.model or request.body.get("model") or "claude-fake",
        "content": content,
        "stop_reason": reply.stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def _output_chars(block: dict[str, Any]) -> int:
    if block.get("type") == "tool_use":
        return len(json.dumps(block.get("input", {})))
    return len(block.get("text") or block.get("thinking") or "")


def _chunks(s: str, max_size: int) -> list[str]:
    """Split ``s`` into pieces of at most ``max_size`` chars, at least 2 when possible."""
    size = max(1, min(max_size, len(s) // 2))
    return [s[i : i + size] for i in range(0, len(s), size)]


def _stream_events(msg: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The SSE events, in order, that stream the finished message ``msg``."""
    usage = msg["usage"]
    start = {
        **msg,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(msg["content"]):
        kind = block.get("type")
        deltas: list[dict[str, Any]]
        if kind == "text":
            first: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": c} for c in _chunks(block["text"], 6)]
        elif kind == "tool_use":
            first = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": c}
                for c in _chunks(block.get("partial_json", json.dumps(block.get("input", {}))), 8)
            ]
        elif kind == "thinking":
            first = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": c} for c in _chunks(block["thinking"], 8)
            ]
            deltas.append({"type": "signature_delta", "signature": block.get("signature", "")})
        else:  # redacted_thinking and anything else arrive whole
            first, deltas = block, []
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": first},
            )
        )
        events.extend(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                "usage": dict(usage),
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events
