"""A local stand-in for the LangSmith and Langfuse ingestion APIs, for tests and demos.

The vendors' real clients talk HTTP to it: LangSmith's run API (``POST /runs``,
``PATCH /runs/{id}``; use ``langsmith.Client(auto_batch_tracing=False)``) and Langfuse's OTLP
endpoint (``POST /api/public/otel/v1/traces``, protobuf).
"""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeTracingServer"]


class FakeTracingServer:
    """Records LangSmith runs (with their patches applied) and Langfuse OTLP spans."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        self.patches: dict[str, dict[str, Any]] = {}
        self.spans: list[Any] = []
        self.credentials: list[str | None] = []
        self._http: _HTTPServer | None = None

    @property
    def url(self) -> str:
        if self._http is None:
            raise RuntimeError("FakeTracingServer is not started")
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def start(self) -> FakeTracingServer:
        self._http = _HTTPServer(self)
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def __enter__(self) -> FakeTracingServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def runs(self) -> dict[str, dict[str, Any]]:
        """Every LangSmith run by id, its final patch applied."""
        return {p["id"]: {**p, **self.patches.get(p["id"], {})} for p in self.posts}

    @staticmethod
    def attribute(span: Any, key: str) -> Any:
        """A Langfuse span attribute's value (lists for array attributes)."""
        for kv in span.attributes:
            if kv.key == key:
                value = kv.value
                if value.HasField("array_value"):
                    return [v.string_value for v in value.array_value.values]
                return getattr(value, value.WhichOneof("value"))
        return None


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, owner: FakeTracingServer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.owner = owner


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer  # pyright: ignore[reportIncompatibleVariableOverride]  socketserver sets it to our server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        return gzip.decompress(raw) if self.headers.get("Content-Encoding") == "gzip" else raw

    def _reply(self, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def do_GET(self) -> None:
        self._reply()

    def do_POST(self) -> None:
        owner, body = self.server.owner, self._body()
        if self.path.endswith("/otel/v1/traces"):
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                ExportTraceServiceRequest,
            )

            owner.credentials.append(self.headers.get("Authorization"))
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    owner.spans.extend(scope.spans)
        elif self.path == "/runs":
            owner.credentials.append(self.headers.get("x-api-key"))
            owner.posts.append(json.loads(body))
        else:
            self._reply(404)
            return
        self._reply()

    def do_PATCH(self) -> None:
        run_id = self.path.rsplit("/", 1)[-1]
        self.server.owner.patches[run_id] = json.loads(self._body())
        self._reply()
