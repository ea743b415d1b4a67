"""The runtime: a Temporal client (configured or embedded), inline workers, the stream listener."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from .. import _settings
from .._keys import keys_of
from .._messages import (
    ModelMessage,
    ResultMessage,
    SDKMessage,
    UserMessage,
)
from ..activities._registry import AgentRegistry
from ..activities._tools import DEFAULT_TOOL_THREADS, ToolThreads
from ..history._transcripts import TranscriptStore, hydrate, open_transcript_store, run_transcript
from ..live._channel import StreamReceiver
from ..live._keys import ChannelKey, caller_channel_key
from ..teams._delegation import delegation_targets
from ..teams._team import team_of
from ..tracing._logs import configure_if_asked
from ..worker._encryption import EncryptionCodec, EncryptionKeysLike
from ..worker._plugin import (
    LatticePlugin,
    create_mailbox_worker,
    lattice_worker,
    worker_identity,
)
from ..worker._pollers import PRIVATE_STICKY_TIMEOUT, serving
from ..worker._telemetry import flush_tracing, temporal_runtime
from ..workflows._agent import MESSAGES_TOPIC
from ..workflows._mailbox import mailbox_task_queue
from ..workflows._types import ActivitySettings, AgentRunInput, AgentRunOutput
from ._attach import attached_messages
from ._closed import closed_output, closed_result, recorded_messages
from ._connection import PemSource, TemporalConnection
from ._follow import Landed, published
from ._inline import WORKER_SHUTDOWN_GRACE_S, WorkerTask, preload_provider_sdk
from ._landed import landed_conversation
from ._open import open_client
from ._orphans import (
    RunState,
    adoptable,
    end_orphan,
    run_queues,
    run_state,
    team_may_start,
)
from ._reconnect import DEFAULT_RECONNECT_S, ServerWatch, reconnect_limit
from ._server import DevServer
from ._visibility import missing_attributes, register_attributes

if TYPE_CHECKING:
    from .._agent import Agent

__all__ = ["Runtime"]

log = logging.getLogger("agent_lattice.runtime")

SDK_MESSAGE: TypeAdapter[SDKMessage] = TypeAdapter(SDKMessage)


# Between looks for a run that is about to appear (a team's member, started by its team)
POLL_COOLDOWN_S = 0.05
# how long a reader waits for a workflow that another workflow is about to start
WORKFLOW_APPEARS_S = 60.0


class Runtime:
    """Where queries run: a Temporal client plus, for agents defined inline, workers in-process.

    ``await Runtime.connect()`` connects like the Temporal CLI (``TEMPORAL_ADDRESS``,
    ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS_*``, a profile); without an
    address it starts or reuses the embedded dev server under ``LATTICE_HOME``. ``inline_workers=False`` leaves execution to separate ``lattice worker``
    processes.
    """

    def __init__(
        self,
        client: Client,
        *,
        inline_workers: bool = True,
        settings: ActivitySettings | None = None,
        stream_host: str | None = None,
        server: DevServer | None = None,
        tool_threads: int = DEFAULT_TOOL_THREADS,
        otel: bool = False,
    ) -> None:
        ToolThreads(tool_threads)  # its check now: the workers that use it start at a query
        self.client = client
        self.otel = otel  # inline workers trace too (the client's interceptor reaches them)
        self.tool_threads = tool_threads  # sync tool handlers the inline workers run at once
        self.inline_workers = inline_workers
        self.settings = settings or ActivitySettings()
        self.server = server
        self._registry = AgentRegistry()
        # agents whose workers (and delegation targets') this runtime started, by their key
        self._served: weakref.WeakKeyDictionary[Agent, str] = weakref.WeakKeyDictionary()
        self._transcripts: TranscriptStore | None = None
        self._workers: dict[str, tuple[Worker, asyncio.Task[None]]] = {}
        self._stopping: set[asyncio.Future[None]] = set()  # workers of a server gone for good
        # Inline workers serve this process's agent objects (their tools, keys and clients):
        # their task queues are private to the process, so no other process with a
        # look-alike definition ever takes their work, nor they its.
        self._process_tag = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._receiver = StreamReceiver(stream_host or _settings.stream_host())
        self._lock = asyncio.Lock()
        self._indexed: bool | None = None  # the server has the Lattice search attributes
        # the client's identity names a person or service: the inline workers get their own
        self._worker_identity = False
        # the server's health as this runtime sees it (connect() starts watching it)
        self.watch = ServerWatch(client.service_client.config.target_host, DEFAULT_RECONNECT_S)

    @classmethod
    async def connect(
        cls,
        address: str | None = None,
        *,
        namespace: str | None = None,
        api_key: str | None = None,
        tls: bool | None = None,
        tls_cert: PemSource | None = None,
        tls_key: PemSource | None = None,
        tls_ca: PemSource | None = None,
        tls_server_name: str | None = None,
        profile: str | None = None,
        connection: TemporalConnection | None = None,
        inline_workers: bool | None = None,
        settings: ActivitySettings | None = None,
        quiet: bool = False,
        tool_threads: int = DEFAULT_TOOL_THREADS,
        reconnect_s: float | None = None,
        otel: bool | None = None,
        metrics_port: int | None = None,
        encryption_keys: EncryptionKeysLike | None = None,
        log_level: str | None = None,
        log_format: str | None = None,
        identity: str | None = None,
    ) -> Runtime:
        """Connect the way the Temporal CLI does: the arguments over the ``TEMPORAL_*``
        environment over the profile file (``TemporalConnection.load``; or a ``connection``
        loaded already, instead of the arguments). No address from anywhere: the embedded
        dev server. ``tls_cert``/``tls_key`` (mTLS), ``tls_ca``: paths, or PEM bytes.

        ``reconnect_s`` (default ``LATTICE_RECONNECT_S``, else 600): how long the runtime,
        its workers and its queries keep retrying a server they cannot reach before failing
        with :class:`ServerUnreachableError`; meanwhile stderr says it is retrying.

        ``otel`` (default ``LATTICE_OTEL``): trace every query with OpenTelemetry, exported
        over OTLP (the ``otel`` extra). ``metrics_port`` (default ``LATTICE_METRICS_PORT``):
        serve this process's metrics for Prometheus there (the first connect decides).
        ``encryption_keys`` (default ``LATTICE_ENCRYPTION_KEYS[_FILE]``): encrypt every payload
        of this client and its workers (``KEY_ID:BASE64_KEY,...``; the first key encrypts);
        its workers then refuse what reaches a run unencrypted (``LATTICE_ENCRYPTION_STRICT``,
        default on). ``log_level`` and ``log_format`` (default ``LATTICE_LOG_LEVEL``,
        ``LATTICE_LOG_FORMAT``): set up this process's logs on stderr, as text lines or one JSON
        object a line (``tracing/_logs``); given neither, nor the variables, logging is left as it is.
        ``identity``: this client's Temporal identity (default the SDK's ``pid@host``), which
        Temporal records with each of its requests and which names the approver of its
        approval decisions when they name none; its inline workers keep their own."""
        configure_if_asked(log_level, log_format)
        connection = TemporalConnection.given(
            connection,
            address,
            namespace=namespace,
            api_key=api_key,
            tls=tls,
            tls_cert=tls_cert,
            tls_key=tls_key,
            tls_ca=tls_ca,
            tls_server_name=tls_server_name,
            profile=profile,
        )
        limit = reconnect_limit(reconnect_s)
        ToolThreads(tool_threads)  # refused before a server is started or reached
        # a missing extra or a bad key is said before any server starts
        plugin = LatticePlugin(otel=otel, encryption_keys=encryption_keys)
        client, watch, server = await open_client(
            connection,
            limit,
            quiet=quiet,
            plugins=[plugin],  # the converter, tracing; workers made from it inherit them
            runtime=temporal_runtime(metrics_port),
            **({"identity": identity} if identity is not None else {}),
        )
        runtime = cls(
            client,
            inline_workers=_settings.inline_workers() if inline_workers is None else inline_workers,
            settings=settings,
            server=server,
            tool_threads=tool_threads,
            otel=plugin.otel,
        )
        runtime.watch = watch
        runtime._worker_identity = identity is not None  # its workers are named as workers
        watch.on_gone.append(runtime._server_gone)
        watch.start(client)
        return runtime

    def _server_gone(self) -> None:
        """The server is gone for good: the inline workers stop taking tasks (from whatever
        answers at its address now); the client's calls raise ``ServerGoneError``."""
        for worker, _task in self._workers.values():
            stopping = asyncio.ensure_future(worker.shutdown())
            self._stopping.add(stopping)
            stopping.add_done_callback(self._stopped)

    def _stopped(self, stopping: asyncio.Future[None]) -> None:
        self._stopping.discard(stopping)
        if not stopping.cancelled():
            stopping.exception()  # a worker that would not stop: close() tries again

    # -- workers -------------------------------------------------------------------------

    def task_queue_for(self, agent: Agent) -> str:
        """Where ``agent``'s queries go: its explicit ``task_queue``; else, served inline, a
        queue private to this process; else its definition's queue (``lattice worker``)."""
        if agent.config.task_queue or not self.inline_workers:
            return agent.task_queue
        return f"{agent.task_queue}@{self._process_tag}"

    async def ensure_worker(self, agent: Agent) -> None:
        """Serve ``agent`` from this process (inline agents of a script)."""
        if not self.inline_workers or self._served.get(agent) == agent.key:
            return  # its workers run already (walking its delegation targets again spawns specs)
        if self.watch.gone is not None:
            raise self.watch.error()
        preload_provider_sdk()
        # the agents it delegates to run here too, as child workflows on their own queues
        for served in delegation_targets([agent]):
            if team_of(served) is not None:  # its members' mailbox tools reach the team mailbox
                await self.ensure_mailbox_worker()
            self._registry.add_session(served)
            self._registry.add(served)
            queue = self.task_queue_for(served)
            async with self._lock:
                if queue in self._workers:
                    continue
                worker = lattice_worker(
                    self.client,
                    task_queue=queue,
                    plugin=LatticePlugin(
                        self._registry, tool_threads=self.tool_threads, otel=self.otel
                    ),
                    # when this process dies, an adopter gets its runs' next tasks soon
                    sticky_queue_schedule_to_start_timeout=PRIVATE_STICKY_TIMEOUT,
                    **({"identity": worker_identity()} if self._worker_identity else {}),
                )
                task = WorkerTask(worker.run(), name=f"lattice-worker-{queue}")
                self._workers[queue] = (worker, task)
        self._served[agent] = agent.key

    async def ensure_mailbox_worker(self) -> None:
        """Host the team mailbox workflows from this process too (inline workers only)."""
        if not self.inline_workers:
            return
        if self.watch.gone is not None:
            raise self.watch.error()
        queue = mailbox_task_queue()
        async with self._lock:
            if queue not in self._workers:
                worker = create_mailbox_worker(self.client)
                task = WorkerTask(worker.run(), name=f"lattice-worker-{queue}")
                self._workers[queue] = (worker, task)

    def bind_query_tracer(self, session_id: str, tracer: Any, root: str) -> None:
        """``query(tracer=)``: this process's workers trace ``session_id`` (and the runs it
        delegates to) with ``tracer`` until the query ``root`` ends. The tracer is an object of
        this process: it is found here by session id and never enters a workflow."""
        self._registry.bind_tracer(session_id, tracer, root)

    def release_query_tracers(self, root: str) -> None:
        self._registry.release_tracers(root)

    def channel_key(self) -> ChannelKey | None:
        """The key every line a worker sends this process's queries and attached readers is
        checked by (``live/_keys``); None: it has none (no live tokens over TCP)."""
        codec = self.client.data_converter.payload_codec
        return codec.channel_key() if isinstance(codec, EncryptionCodec) else caller_channel_key()

    async def stream_receiver(self) -> StreamReceiver:
        if self._receiver.key is None:
            self._receiver.key = self.channel_key()
        await self._receiver.start()
        return self._receiver

    async def close(self) -> None:
        """Stop inline workers (gracefully) and the stream listener."""
        workers, self._workers = list(self._workers.values()), {}
        self._served.clear()
        for worker, _task in workers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(worker.shutdown(), WORKER_SHUTDOWN_GRACE_S * 5)
        for _worker, task in workers:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        await self._receiver.close()
        await self.watch.close()
        if self.otel:  # a script's spans leave before it exits
            await asyncio.to_thread(flush_tracing)

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- runs ----------------------------------------------------------------------------

    def durable_messages(
        self,
        workflow_id: str,
        *,
        from_offset: int = 0,
        appears_within: float | None = None,
        landed: Landed | None = None,
    ) -> AsyncIterator[SDKMessage]:
        """The durable messages of a run (system, assistant, user, result) from ``from_offset``.

        A run that does not exist raises ``RPCError`` (NOT_FOUND) at once, unless it may be
        about to start: it waits ``appears_within`` seconds for it (default: 60 s when a
        running team workflow may start it as its lead's query, else none). ``landed``: how
        many messages the run's live events say it published (they are then read at once)."""
        return self._durable(workflow_id, from_offset, appears_within, landed)

    def attach(self, workflow_id: str, *, from_offset: int = 0) -> AsyncIterator[SDKMessage]:
        """A run's messages as its own ``query()`` caller sees them, from anywhere: the durable
        messages from ``from_offset`` and, while it runs, the live ``stream_event`` messages
        of its model requests (read from the worker that runs each one; see ``_attach``)."""
        return attached_messages(self, workflow_id, from_offset)

    async def _durable(
        self,
        workflow_id: str,
        from_offset: int,
        appears_within: float | None,
        landed: Landed | None = None,
    ) -> AsyncIterator[SDKMessage]:
        handle = self.client.get_workflow_handle(workflow_id)
        deadline: float | None = None
        while True:
            try:
                status = (await handle.describe()).status
                break
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                if deadline is None:
                    if appears_within is None:
                        appears_within = (
                            WORKFLOW_APPEARS_S
                            if await team_may_start(self.client, workflow_id)
                            else 0
                        )
                    deadline = time.monotonic() + appears_within
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(POLL_COOLDOWN_S)
        if status != WorkflowExecutionStatus.RUNNING:
            # A closed run is read from its recorded history: no worker needed.
            for message in (await self._recorded_messages(workflow_id))[from_offset:]:
                yield message
            return
        # read without writing to the run's history (see _follow); it ends once the run closed
        items = published(self.client, workflow_id, MESSAGES_TOPIC, from_offset, landed)
        seen = from_offset  # the messages given so far
        try:
            async for item in items:
                message = await self.hydrated(SDK_MESSAGE.validate_python(item))
                yield message
                seen += 1
                if isinstance(message, ResultMessage):
                    if landed is not None:  # a query's own reader: see _read_to_close
                        await _read_to_close(items)
                    return
        except Exception as err:
            # Temporal already retried the server for the reconnect limit: do not wait again.
            self.watch.raise_if_lost(err)
            # The run closed while we read and no worker answers for it: use the record.
            log.debug("stream of %s unavailable: %s", workflow_id, err)
        finally:
            await items.aclose()
        # every message not given yet (a tool result, the last reply), not the result alone
        try:
            rest = (await self._recorded_messages(workflow_id))[seen:]
        except Exception as err:  # no agent run's record (a team's): its result alone
            log.debug("record of %s unavailable: %s", workflow_id, err)
            rest = []
        for message in rest or [await self.outcome(workflow_id)]:
            yield message

    async def _recorded_messages(self, workflow_id: str) -> list[SDKMessage]:
        """The durable messages of a closed run, rebuilt from its input and output."""
        return await recorded_messages(self.client, self.transcripts, workflow_id)

    @property
    def transcripts(self) -> TranscriptStore:
        """Where this process reads and writes transcripts (see ``history/_transcripts``), encrypted
        with the client's encryption keys when it has them."""
        if self._transcripts is None:
            keys = keys_of(self.client.data_converter.payload_codec)
            self._transcripts = open_transcript_store(keys=keys)
        return self._transcripts

    async def landed(self, workflow_id: str) -> list[ModelMessage] | None:
        """The conversation as a run that closed without an output (terminated, timed out)
        had landed it, or None when it landed no reply (``_landed``)."""
        return await landed_conversation(self.client, self.transcripts, workflow_id)

    async def run_transcript(
        self, output: AgentRunOutput, run_input: AgentRunInput | None = None
    ) -> tuple[list[ModelMessage], list[ModelMessage], str | None]:
        """A finished run's whole conversation, the messages it added, and the final head."""
        history = run_input.history if run_input is not None else []
        return await run_transcript(self.transcripts, output, history)

    async def hydrated(self, message: SDKMessage) -> SDKMessage:
        """A user message with its tool results stored by reference resolved."""
        if isinstance(message, UserMessage):
            (resolved,) = await hydrate([message.message], self.transcripts)
            if resolved is not message.message:
                return message.model_copy(update={"message": resolved})
        return message

    async def session_state(
        self, agent_name: str, session_id: str, *, agent: Agent | None = None
    ) -> tuple[list[ModelMessage], int] | None:
        """An earlier session's conversation as Temporal holds it, and how many queries it ran;
        None for a new session. Query workflows are numbered ``<name>-<session>-<n>``: the
        last one is found by probing (doubling, then bisecting), no visibility search needed.

        A last query still running whose process died (an orphan) is adopted when ``agent``
        has its definition: served from here until it ends, then its turns are the history."""

        async def exists(n: int) -> bool:
            try:
                await self.client.get_workflow_handle(f"{agent_name}-{session_id}-{n}").describe()
                return True
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return False
                raise

        if not await exists(1):
            return None
        low, high = 1, 2
        while await exists(high):
            low, high = high, high * 2
        while high - low > 1:  # exists(low) and not exists(high)
            mid = (low + high) // 2
            low, high = (mid, high) if await exists(mid) else (low, mid)
        workflow_id = f"{agent_name}-{session_id}-{low}"
        handle = self.client.get_workflow_handle(workflow_id)
        if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
            await self._adopt(await run_state(self.client, workflow_id), agent)
        history = await handle.fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        (run_input,) = await self.client.data_converter.decode(
            started.input.payloads, [AgentRunInput]
        )
        output = await self._output(workflow_id)
        if output is None and (landed := await self.landed(workflow_id)) is not None:
            return landed, low  # ended from outside: what it had landed (see _landed)
        if output is None:  # it landed nothing: the conversation as it went into it
            if run_input.head is None:  # a run from before transcripts: history by value
                return list(run_input.history), low
            store = self.transcripts
            went_in = await hydrate(await store.messages(run_input.head), store)
            return went_in[:-1], low  # the head ends with that query's prompt
        messages, _, _ = await self.run_transcript(output, run_input)
        return messages, low

    async def _adopt(self, state: RunState, agent: Agent | None) -> None:
        """Serve an orphaned run of ``agent``'s session until it closes, or say why not."""
        tag = adoptable(state, agent if self.inline_workers else None)
        if tag is None or agent is None:
            return  # it closed meanwhile
        queues = [state.task_queue]
        for served in delegation_targets([agent]):
            if team_of(served) is not None:
                await self.ensure_mailbox_worker()
            self._registry.add_session(served)
            self._registry.add(served)
            if not served.config.task_queue:  # its delegates ran on the same process's queues
                queues.append(f"{served.task_queue}@{tag}")
        queues += await run_queues(self.client, state.workflow_id)
        async with serving(self.client, queues, self._registry):
            await self._output(state.workflow_id)

    async def end_orphan(self, workflow_id: str, within: float = 60.0) -> ResultMessage | None:
        """End a run no worker serves (``lattice interrupt --force``), keeping its completed
        turns: serve its queues here with no agent (workflow code only: an activity fails
        ``AgentNotRegistered``, so an in-flight tool becomes an error result) and interrupt it.
        None when it did not end within ``within`` seconds: it is then terminated."""
        return await end_orphan(self.client, workflow_id, self.outcome(workflow_id), within)

    async def _output(self, workflow_id: str) -> AgentRunOutput | None:
        """The run's output, however it closed (see ``_closed``); None: it has none."""
        return await closed_output(self.client, workflow_id)

    async def outcome(self, workflow_id: str) -> ResultMessage:
        """The result of a run, waiting for it to close (see ``_closed.closed_result``)."""
        return await closed_result(self.client, workflow_id)

    async def interrupt(self, workflow_id: str) -> bool:
        """Interrupt a running query by workflow id; False when it is not running."""
        handle = self.client.get_workflow_handle(workflow_id)
        desc = await handle.describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return False
        await handle.signal("interrupt")
        return True

    async def list_runs(self, limit: int = 20, query: str | None = None) -> list[Any]:
        """The newest agent runs (``query``: a visibility query they must also match)."""
        runs = []
        where = "WorkflowType = 'AgentWorkflow'" + (f" AND ({query})" if query else "")
        async for execution in self.client.list_workflows(where, limit=limit):
            runs.append(execution)
        return runs

    async def search_attributes_ready(self) -> bool:
        """Whether queries may set the Lattice search attributes (asked once): a server
        lacking them would fail the runs' upserts. An embedded server started before they
        existed gets them registered, for the processes that come next."""
        if self._indexed is None:
            missing = await missing_attributes(self.client)
            if missing and self.server is not None:
                with contextlib.suppress(RPCError):
                    await register_attributes(self.client)
            self._indexed = not missing
        return self._indexed


async def _read_to_close(items: AsyncIterator[Any]) -> None:
    """Read a run's stream on past its result message, to the run's close: the reader then
    has the run's output (``Landed.output``), and its query needs no long poll of its own."""
    with contextlib.suppress(Exception):
        async for _ in items:
            pass
