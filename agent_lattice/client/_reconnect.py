"""Riding out an outage of the Temporal server: how long to retry, and saying so.

Temporal Core retries a worker's task polls forever and every other call for 10 s, then
gives up silently: a client's lost call ended ``lattice run`` without a word. A runtime
connects with a retry budget as long as its reconnect limit (a worker's own reports are not
covered: Core resets their retries to the default, see ``worker._server_wait``) and watches
its server, to say on stderr when it is unreachable and when it is back.

A process talks to one server. Core reconnects to whatever answers at the address, so the
watch checks, at each health check, that it is still the server the process connected to
(its namespace has the id it had then: a dev server's is stored in its database, another
home's database has another), and, for the embedded server, that its home's record still
names it (``lattice server stop`` removes it). Otherwise the server is gone for good: the
runtime's workers stop taking tasks and its client's calls raise :class:`ServerGoneError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from temporalio import client as temporal_client
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RetryConfig, RPCError, RPCStatusCode

from .._errors import ConfigurationError, ServerGoneError, ServerUnreachableError
from ..tracing._logs import configured_format
from ..worker._server_wait import DEFAULT_RECONNECT_S, RECONNECT_ENV, reconnect_limit
from ._connection import handshake_problem
from ._server import DevServer

__all__ = [
    "DEFAULT_RECONNECT_S",
    "GoneCheck",
    "ServerWatch",
    "connect_client",
    "reconnect_limit",
    "retry_config",
    "transport_reason",
    "unreachable",
]

T = TypeVar("T")

# Core's default backoff grows to 5 s between tries, which is how late a call notices that
# the server is back; 1 s keeps resuming prompt for about one refused connection per second.
RETRY_MAX_INTERVAL_MS = 1000
PROBE_UP_S = 2.0  # between health checks of a server that answers
PROBE_DOWN_S = 0.5  # between health checks while it does not
PROBE_TIMEOUT_S = 3.0
# An embedded server unreachable this long whose process is gone is started again (once per
# RESTART_EVERY_S): a crash then costs seconds, not a human noticing it.
RESTART_AFTER_S = 3.0
RESTART_EVERY_S = 10.0
# between looks at the embedded server's record (one small file read): a worker whose server
# was stopped stops before another server can start on its port and hand it tasks
RECORD_EVERY_S = 0.5


def retry_config(limit_s: float) -> RetryConfig:
    """Core's retry of every call but task polls: as long as the reconnect limit."""
    return RetryConfig(
        initial_interval_millis=100,
        multiplier=1.5,
        max_interval_millis=RETRY_MAX_INTERVAL_MS,
        max_elapsed_time_millis=int(limit_s * 1000),
        # Enough tries for the whole limit (the elapsed time ends them first); not 0, which is
        # unlimited but makes Core print an error line to stdout for every try after 15.
        max_retries=int(limit_s * 2) + 20,
    )


def unreachable(err: BaseException) -> bool:
    """Whether ``err`` says the server could not be reached (rather than refused the call or
    the connection's TLS: a certificate problem is not an outage, retrying cannot mend it)."""
    if handshake_problem(err, tls=True) is not None:
        return False
    if isinstance(err, RPCError):
        return err.status == RPCStatusCode.UNAVAILABLE
    text = str(err)
    return isinstance(err, RuntimeError) and (
        "Server connection error" in text or "not healthy yet" in text
    )


def transport_reason(err: BaseException) -> str:
    """What failed, for a person: "connection refused", "DNS lookup failed: ...", not Core's
    nested transport error (``LATTICE_DEBUG=1`` shows that)."""
    text = err.message if isinstance(err, RPCError) else str(err)
    if match := re.search(r'message: "([^"]+)"', text):
        return match[1][:1].lower() + match[1][1:]
    if "dns error" in text:
        found = re.search(r'error: "([^"]+)"', text)
        return "DNS lookup failed" + (f": {found[1]}" if found else "")
    if re.search(r"timed? ?out|deadline", text, re.IGNORECASE):
        return "timed out"
    if "tls" in text.lower() or "certificate" in text.lower():
        return "TLS handshake failed"
    # Core's wrapping says nothing a person can act on; the innermost text does
    inner = re.findall(r'"([^"]+)"', text)
    return inner[-1] if inner else text.removeprefix("Failed client connect: ")


async def connect_client(
    address: str, watch: ServerWatch, *, ready_s: float = 0.0, **options: Any
) -> Client:
    """``Client.connect`` with the reconnect limit's retries, tried again while the server
    cannot be reached (saying so); a server just started is waited for ``ready_s`` quietly.
    A connection refused for its TLS fails at once, saying why."""
    started = time.monotonic()
    while True:
        try:
            client = await Client.connect(
                address, retry_config=retry_config(watch.limit_s), **options
            )
        except Exception as err:
            if not unreachable(err):
                reason = handshake_problem(err, bool(options.get("tls"))) or transport_reason(err)
                raise ConfigurationError(
                    f"could not connect to Temporal at {address}: {reason}"
                ) from err
            waited = time.monotonic() - started
            if waited >= watch.limit_s:
                raise ServerUnreachableError(
                    f"could not reach the Temporal server at {address} within "
                    f"{watch.limit_s:g} s ({RECONNECT_ENV}): {transport_reason(err)}"
                ) from err
            if waited >= ready_s:
                watch.down()
            await asyncio.sleep(0.2 if waited < ready_s else 0.5)
            continue
        watch.up()
        return client


# Told when a server becomes unreachable (True) and when it is back (False): the CLI's
# spinner on a terminal.
on_outage: Callable[[str, bool], None] | None = None


log = logging.getLogger("agent_lattice.server")


def _say(text: str, level: int = logging.WARNING) -> None:
    """Once per change: on stderr, or as a record where this process logs JSON lines
    (``tracing/_logs``: its stderr stays JSON)."""
    if configured_format() == "json":
        log.log(level, text)
    else:
        print(f"agent-lattice: {text}", file=sys.stderr, flush=True)


class ServerWatch:
    """Watches the server of one runtime: says once when it becomes unreachable and when it is
    back, restarts the embedded server when its process is gone, and sets :attr:`lost` once
    it has been unreachable for the reconnect limit (workers wait on it to give up), or at
    once when it is gone for good (:attr:`gone`: stopped, moved, or another server answers at
    its address)."""

    def __init__(
        self, address: str, limit_s: float, *, home: Path | None = None, namespace: str = ""
    ) -> None:
        self.address = address
        self.limit_s = limit_s
        self.home = home  # the embedded server's home, when this runtime uses one
        self.namespace = namespace
        # the id of the namespace where this runtime connected: the server's identity
        self.identity: str | None = None
        self.gone: str | None = None  # why the server is gone for good (then ``lost`` is set)
        self.on_gone: list[Callable[[], None]] = []
        self.down_since: float | None = None
        self.lost = asyncio.Event()
        self._restarted_at = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self, client: Client) -> None:
        self._task = asyncio.create_task(self._run(client), name=f"lattice-watch-{self.address}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None

    def down(self) -> None:
        now = time.monotonic()
        if self.gone is not None:
            return
        if self.down_since is None:
            self.down_since = now
            _say(
                f"Temporal server at {self.address} unreachable, retrying… "
                f"(for up to {self.limit_s:g} s, {RECONNECT_ENV})"
            )
            if on_outage is not None:
                on_outage(self.address, True)
        elif now - self.down_since >= self.limit_s:
            self.lost.set()

    def up(self) -> None:
        if self.down_since is not None and self.gone is None:
            _say(
                f"reconnected to {self.address} "
                f"(unreachable for {time.monotonic() - self.down_since:.0f} s)",
                logging.INFO,
            )
            self.down_since = None
            self.lost.clear()
            if on_outage is not None:
                on_outage(self.address, False)

    def error(self, cause: BaseException | None = None) -> ServerUnreachableError:
        if self.gone is not None:
            return ServerGoneError(self.gone)
        detail = f": {transport_reason(cause)}" if cause is not None else ""
        return ServerUnreachableError(
            f"lost the Temporal server at {self.address}: unreachable for more than "
            f"{self.limit_s:g} s ({RECONNECT_ENV}){detail}"
        )

    def raise_if_lost(self, err: BaseException) -> None:
        """Raise :class:`ServerUnreachableError` naming the server when ``err`` says it could
        not be reached: Temporal has retried it for the whole reconnect limit by then."""
        if isinstance(err, ServerUnreachableError):
            raise err
        if self.gone is not None:  # whatever failed, it failed on another server, or none
            raise self.error() from err
        if unreachable(err):
            raise self.error(err) from err

    async def until_lost(self, awaitable: Awaitable[T], *, from_server: bool = False) -> T:
        """``await awaitable``, unless the server has been unreachable for the reconnect limit
        first: then :class:`ServerUnreachableError` (and the awaited call is cancelled).
        ``from_server``: the awaitable is a call to the server, so its answer means the server
        is back (said at once, not at the next probe)."""
        if self.lost.is_set():
            raise self.error()
        waited = asyncio.ensure_future(awaitable)
        lost = asyncio.ensure_future(self.lost.wait())
        try:
            done, _ = await asyncio.wait([waited, lost], return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            waited.cancel()
            raise
        finally:
            lost.cancel()
        if waited in done:
            result = waited.result()
            if from_server:
                self.up()
            return result
        waited.cancel()
        raise self.error()

    async def _run(self, client: Client) -> None:
        slow_answers = 0
        probe_at = 0.0
        while not self._record_gone():
            if time.monotonic() >= probe_at:
                serving, slow = await self._health(client)
                slow_answers = slow_answers + 1 if slow else 0
                if serving:
                    if await self._replaced(client):
                        return
                    self.up()
                elif not slow or slow_answers > 1:  # one slow answer is a busy machine
                    if self._record_gone():  # stopped on purpose: not an outage to ride out
                        return
                    self.down()
                    await self._restart_if_dead()
                probe_at = time.monotonic() + (
                    PROBE_DOWN_S if self.down_since is not None else PROBE_UP_S
                )
            wait = probe_at - time.monotonic()
            if self.home is not None:
                wait = min(wait, RECORD_EVERY_S)
            await asyncio.sleep(max(0.0, wait))

    @staticmethod
    async def _health(client: Client) -> tuple[bool, bool]:
        """Whether the server serves, and whether it failed to answer in time."""
        try:
            serving = await client.service_client.check_health(
                timeout=timedelta(seconds=PROBE_TIMEOUT_S)
            )
            return serving, False
        except RPCError as err:
            return False, err.status == RPCStatusCode.DEADLINE_EXCEEDED
        except Exception:
            return False, False

    def _record_gone(self) -> bool:
        """Whether the embedded server's record says it is gone for good (then said)."""
        if self.home is None:
            return False
        why = DevServer.gone_from(self.home, self.address)
        if why is not None:
            self._gone(
                f"the embedded Temporal server at {self.address} of {self.home} {why}: this "
                "process stopped using it; restart the process to use the embedded server again"
            )
        return why is not None

    async def _replaced(self, client: Client) -> bool:
        """Whether the server answering is another than the one this runtime connected to:
        its namespace has another id (then said). A failed call proves nothing (nor does a
        namespace not found: a server starting may not know its namespaces yet)."""
        if self.identity is None:
            return False
        try:
            described = await client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=self.namespace),
                timeout=timedelta(seconds=PROBE_TIMEOUT_S),
            )
        except RPCError:
            return False
        found = described.namespace_info.id
        if found in (self.identity, ""):
            return False
        self._gone(
            f"the Temporal server at {self.address} is not the one this process connected "
            f"to (namespace {self.namespace!r}: id {self.identity} then, {found} now; another "
            "server took its address, another LATTICE_HOME's embedded server on its port "
            "perhaps): this process stopped using it; restart the process to use the server "
            "there now"
        )
        return True

    def _gone(self, why: str) -> None:
        """The server is gone for good: waiters on :attr:`lost` and :attr:`on_gone` hear it."""
        self.gone = why
        if self.down_since is not None and on_outage is not None:
            on_outage(self.address, False)
        self.lost.set()
        for callback in self.on_gone:
            callback()

    async def _restart_if_dead(self) -> None:
        """Start the embedded server again on its recorded ports if its process is gone (a
        server stopped with ``lattice server stop`` has no record and stays stopped)."""
        now = time.monotonic()
        if (
            self.home is None
            or self.down_since is None
            or now - self.down_since < RESTART_AFTER_S
            or now - self._restarted_at < RESTART_EVERY_S
        ):
            return
        self._restarted_at = now
        try:
            server = await asyncio.to_thread(DevServer.revive, self.home, self.address)
        except Exception as err:
            _say(f"could not restart the embedded Temporal server: {err}")
            return
        if server is not None:
            _say(
                f"restarted the embedded Temporal server at {server.address} (pid {server.pid})",
                logging.INFO,
            )


class GoneCheck(temporal_client.Interceptor):
    """A client's calls raise :class:`ServerGoneError` once ``watch`` found its server gone
    for good, instead of going to whatever answers at its address now."""

    def __init__(self, watch: ServerWatch) -> None:
        self.watch = watch

    def intercept_client(
        self, next: temporal_client.OutboundInterceptor
    ) -> temporal_client.OutboundInterceptor:
        return _Checked(next, self.watch)


class _Checked(temporal_client.OutboundInterceptor):
    def __init__(self, next: temporal_client.OutboundInterceptor, watch: ServerWatch) -> None:
        super().__init__(next)
        self._watch = watch

    def _check(self) -> None:
        if self._watch.gone is not None:
            raise self._watch.error()

    async def start_workflow(self, input: temporal_client.StartWorkflowInput) -> Any:
        self._check()
        return await self.next.start_workflow(input)

    async def cancel_workflow(self, input: temporal_client.CancelWorkflowInput) -> None:
        self._check()
        await self.next.cancel_workflow(input)

    async def describe_workflow(
        self, input: temporal_client.DescribeWorkflowInput
    ) -> temporal_client.WorkflowExecutionDescription:
        self._check()
        return await self.next.describe_workflow(input)

    def fetch_workflow_history_events(
        self, input: temporal_client.FetchWorkflowHistoryEventsInput
    ) -> temporal_client.WorkflowHistoryEventAsyncIterator:
        self._check()
        return self.next.fetch_workflow_history_events(input)

    def list_workflows(
        self, input: temporal_client.ListWorkflowsInput
    ) -> temporal_client.WorkflowExecutionAsyncIterator:
        self._check()
        return self.next.list_workflows(input)

    async def count_workflows(
        self, input: temporal_client.CountWorkflowsInput
    ) -> temporal_client.WorkflowExecutionCount:
        self._check()
        return await self.next.count_workflows(input)

    async def query_workflow(self, input: temporal_client.QueryWorkflowInput) -> Any:
        self._check()
        return await self.next.query_workflow(input)

    async def signal_workflow(self, input: temporal_client.SignalWorkflowInput) -> None:
        self._check()
        await self.next.signal_workflow(input)

    async def terminate_workflow(self, input: temporal_client.TerminateWorkflowInput) -> None:
        self._check()
        await self.next.terminate_workflow(input)

    async def start_workflow_update(
        self, input: temporal_client.StartWorkflowUpdateInput
    ) -> temporal_client.WorkflowUpdateHandle[Any]:
        self._check()
        return await self.next.start_workflow_update(input)

    async def start_update_with_start_workflow(
        self, input: temporal_client.StartWorkflowUpdateWithStartInput
    ) -> temporal_client.WorkflowUpdateHandle[Any]:
        self._check()
        return await self.next.start_update_with_start_workflow(input)
