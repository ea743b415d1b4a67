"""A worker process's health endpoints for probes (``lattice worker --health-port``).

``GET /livez``: 200 while the process's event loop answers (a hung loop fails the probe, and
the orchestrator restarts the process). It asks nothing of the Temporal server: a server
that is away does not make every worker restart (a worker that lost it for good exits on
its own, ``LATTICE_RECONNECT_S``).

``GET /readyz``: 200 when every worker of the process runs and the server lists this
process among the pollers of each of their task queues (``DescribeTaskQueue``: connected
and polling), 503 with the reason otherwise, and from the moment the process is told to
stop. The answer is kept for ``READY_TTL_S``, so probes cost the server one call per queue
at most that often.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from datetime import timedelta

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from .._errors import ConfigurationError

__all__ = ["READY_TTL_S", "HealthEndpoints"]

log = logging.getLogger("agent_lattice.worker")

READY_TTL_S = 2.0
_REQUEST_TIMEOUT_S = 5.0
_RPC_TIMEOUT = timedelta(seconds=_REQUEST_TIMEOUT_S)


class HealthEndpoints:
    """``/livez`` and ``/readyz`` on ``port`` (every interface) for ``workers`` of ``client``
    (not ready until :meth:`running` gives their tasks)."""

    def __init__(
        self, client: Client, workers: Sequence[Worker], port: int, host: str = "0.0.0.0"
    ) -> None:
        self._client = client
        self._workers = list(workers)
        self._tasks: list[asyncio.Task[None]] = []
        self._port, self._host = port, host
        self._server: asyncio.Server | None = None
        self._stopping = False
        self._checked: tuple[float, str | None] | None = None  # (when, why not ready)

    async def start(self) -> None:
        """Listen (a ConfigurationError when the port cannot be had)."""
        try:
            self._server = await asyncio.start_server(self._answer, self._host, self._port)
        except OSError as err:
            raise ConfigurationError(
                f"health port {self._port}: cannot listen on it ({err.strerror or err})"
            ) from None

    def running(self, tasks: Sequence[asyncio.Task[None]]) -> None:
        """The workers run as ``tasks`` (in the order of the workers)."""
        self._tasks = list(tasks)

    def stopping(self) -> None:
        """The process was told to stop: not ready from now on."""
        self._stopping = True

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def not_ready(self) -> str | None:
        """Why the process is not ready (None: it is)."""
        if self._stopping:
            return "shutting down"
        if not self._tasks:
            return "the workers have not started"
        ended = [w.task_queue for w, t in zip(self._workers, self._tasks, strict=True) if t.done()]
        if ended:
            return f"the worker of task queue {ended[0]} has stopped"
        now = time.monotonic()
        if self._checked is None or now - self._checked[0] > READY_TTL_S:
            self._checked = (now, await self._unpolled())
        return self._checked[1]

    async def _unpolled(self) -> str | None:
        """The first task queue the server does not list this process as polling, and why."""
        for worker in self._workers:
            identity = worker.config(active_config=True).get("identity") or self._client.identity
            try:
                response = await self._client.workflow_service.describe_task_queue(
                    DescribeTaskQueueRequest(
                        namespace=self._client.namespace,
                        task_queue=TaskQueue(
                            name=worker.task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL
                        ),
                        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
                    ),
                    timeout=_RPC_TIMEOUT,
                )
            except RPCError as err:
                return f"the Temporal server does not answer: {err.message}"
            if not any(p.identity == identity for p in response.pollers):
                return f"not polling task queue {worker.task_queue} yet"
        return None

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), _REQUEST_TIMEOUT_S)
            while (await asyncio.wait_for(reader.readline(), _REQUEST_TIMEOUT_S)).strip():
                pass  # the headers: nothing in them matters here
            method, _, rest = line.decode("latin-1").partition(" ")
            path = rest.partition(" ")[0].partition("?")[0]
            if method not in ("GET", "HEAD"):
                status, body = "405 Method Not Allowed", "GET or HEAD"
            elif path == "/livez":
                status, body = "200 OK", "ok"
            elif path == "/readyz":
                why = await self.not_ready()
                status, body = (
                    ("200 OK", "ready") if why is None else ("503 Service Unavailable", why)
                )
            else:
                status, body = "404 Not Found", "/livez or /readyz"
            payload = (body + "\n").encode()
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
            ).encode()
            writer.write(head if method == "HEAD" else head + payload)
            await writer.drain()
        except (OSError, TimeoutError, UnicodeDecodeError) as err:
            log.debug("health request ended: %s", err)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
