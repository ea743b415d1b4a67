"""A fake Anthropic Messages API server for tests.

`FakeAnthropicServer` is a real HTTP server (stdlib only, running in a daemon thread on
``127.0.0.1``, or the ``host`` given, and an ephemeral port) that speaks the Messages API wire format:
``POST /v1/messages`` answered as JSON, or as server-sent events when the request body
has ``"stream": true``. Point any Anthropic-compatible client at ``server.base_url``.
It works from any event loop and from other processes (e.g. worker subprocesses).

Each response is decided by a *handler*: a plain function of the `RecordedRequest`
returning a `Reply`, called in a server thread. `Script` is a handler that replays
replies in order. Replies are built with `text`, `tool_use`, `message`, `error`,
`overloaded`, `rate_limited`, and wrapped for fault injection with `slow`, `hang`,
`stream_error` and `disconnect` (all in `._script`). Every request is recorded on
``server.requests``.

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
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from ._script import Handler, RecordedRequest, Reply, error, text

__all__ = ["FakeAnthropicServer"]

_REASONS: dict[int, str] = {529: "Overloaded"}


def _default_handler(request: RecordedRequest) -> Reply:
    return text("ok")


# --------------------------------------------------------------------------- server


class FakeAnthropicServer:
    """A fake Anthropic Messages API server on ``127.0.0.1`` and an ephemeral port.

    Use as a context manager (or call `start` / `stop`) and pass `base_url` to the
    client. The handler (default: always ``text("ok")``) decides each reply. ``host``: the
    address to listen on instead, for workers on other hosts (network namespaces).

    Attributes:
        requests: Every ``POST /v1/messages`` request with a valid JSON body, in
            arrival order (requests answered 404/400 by the server are not recorded).
        handler_errors: Exceptions raised by the handler, in order.
    """

    def __init__(self, handler: Handler | None = None, *, host: str = "127.0.0.1") -> None:
        self._host = host
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
        """``http://HOST:PORT``, the client's ``base_url``."""
        if self._httpd is None:
            raise RuntimeError("FakeAnthropicServer is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeAnthropicServer:
        """Start serving in a daemon thread; returns self."""
        if self._httpd is not None:
            raise RuntimeError("FakeAnthropicServer can only be started once")
        httpd = _HTTPServer((self._host, 0), _RequestHandler)
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

    # -- the request handler's side (called from request threads)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def record(self, body: dict[str, Any], headers: dict[str, str], path: str) -> RecordedRequest:
        with self._lock:
            request = RecordedRequest(
                body=body, headers=headers, path=path, index=len(self.requests)
            )
            self.requests.append(request)
        return request

    def reply_for(self, request: RecordedRequest) -> Reply:
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

    def next_request_id(self) -> str:
        with self._lock:
            self._request_ids += 1
            return f"req_fake_{self._request_ids:06d}"

    def track_connection(self, conn: socket.socket, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def sleep_unless_stopping(self, seconds: float) -> bool:
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
    server: _HTTPServer  # pyright: ignore[reportIncompatibleVariableOverride]  socketserver sets it to our server
    request_id = ""

    def setup(self) -> None:
        super().setup()
        self.server.fake.track_connection(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.fake.track_connection(self.connection, add=False)

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
        self.request_id = fake.next_request_id()
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
        request = fake.record(body, headers, self.path)
        reply = fake.reply_for(request)
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
        if reply.before > 0 and not fake.sleep_unless_stopping(reply.before):
            self._drop()
            return
        if (not request.stream or reply.status != 200) and reply.delay > 0:
            if not fake.sleep_unless_stopping(reply.delay):
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
            if reply.delay > 0 and not fake.sleep_unless_stopping(reply.delay):
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
        while (remaining := deadline - time.monotonic()) > 0 and not fake.stopping:
            try:
                readable, _, _ = select.select([self.connection], [], [], min(remaining, 0.1))
                if readable and not self.connection.recv(1, socket.MSG_PEEK):
                    break  # the client closed the connection
            except (OSError, ValueError):
                break
            if readable and not fake.sleep_unless_stopping(min(remaining, 0.1)):
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
