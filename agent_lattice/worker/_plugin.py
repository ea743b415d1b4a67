"""LatticePlugin: all the Temporal wiring of agent-lattice in one plugin."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import warnings
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pydantic
from temporalio.client import Client
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker, WorkerConfig
from temporalio.worker.workflow_sandbox import SandboxRestrictions

from .. import _settings
from .._errors import LatticeError
from .._version import __version__
from ..activities import AgentActivities
from ..activities._registry import AgentRegistry
from ..activities._tools import DEFAULT_TOOL_THREADS
from ..live._feeds import LIVE_MARK, live_feeds
from ..live._keys import configured_channel_key
from ..providers._anthropic import shared_http_client_held
from ..tools._mcp import mcp_connections_held
from ..workflows import AgentWorkflow, TeamWorkflow
from ..workflows._mailbox import TeamMailboxWorkflow, mailbox_task_queue
from ._commits import send_commit_notices
from ._encryption import EncryptionKeysLike, lattice_data_converter
from ._park import park_after_seconds, park_idle_runs
from ._sdk_internals import sandbox_runner
from ._server_wait import ServerWaitInterceptor
from ._signals import SignalArgumentsInterceptor
from ._telemetry import tracing_interceptor
from ._versioning import versioned_for

if TYPE_CHECKING:
    from .._agent import Agent

log = logging.getLogger("agent_lattice.worker")

# What an unversioned worker calls its build (see LatticePlugin.configure_worker).
UNVERSIONED_BUILD_ID = f"agent-lattice-{__version__}"

# Sizes for agent loops, where Temporal's defaults are not (a value given wins): a model
# request is an activity that waits on the network for seconds, so the SDK's 100 activity
# slots made the 101st concurrent query wait for a free one (1,000 queries waiting 20 s on the
# model took 211 s in bench/idle_memory.py, 48 s with these); and a run evicted from the
# workflow cache is replayed from its history on its next task, so the cache holds more runs
# than can wait. The plugin sets the slots (unless a tuner is given); the cache size, whose
# SDK default cannot be told from a value given, is set by lattice_worker (create_workers,
# runtimes' inline workers, `lattice worker`).
ACTIVITY_SLOTS = 1000
CACHED_RUNS = 2000

# Modules the workflow sandbox passes through instead of re-importing per run:
PASSTHROUGH = (
    "agent_lattice",  # our own message and input models: pure, deterministic, and heavy to reload
    "pydantic",  # models in every workflow input and output
    "pydantic_core",  # pydantic's compiled core
    "annotated_types",  # pydantic's constraint types
    "anthropic",  # imported by agent_lattice.providers; never called from workflow code
    "httpx",  # imported by anthropic
)


def _pid_namespace() -> str:
    try:
        return " " + os.readlink("/proc/self/ns/pid")  # " pid:[4026531836]"
    except OSError:  # no /proc (macOS): pids are the host's
        return ""


_PID_NAMESPACE = _pid_namespace()


def process_identity(pid: int | None = None) -> str:
    """What this process's workers call themselves: the SDK's ``pid@host`` and, on Linux,
    the pid namespace. Containers can share a host name (a Kubernetes pod, docker --network
    host) but not their pids: a poller's pid is only looked up here (``client/_orphans``)
    when its identity is what this process would have with that pid."""
    return f"{os.getpid() if pid is None else pid}@{socket.gethostname()}{_PID_NAMESPACE}"


def worker_identity() -> str:
    """What this process's agent workers call themselves: :func:`process_identity` and the
    port where it serves its model requests' live tokens to attached readers
    (``live/_feeds``; nothing when turned off)."""
    feeds = live_feeds()
    return process_identity() + (LIVE_MARK + feeds.start() if feeds is not None else "")


class LatticePlugin(SimplePlugin):
    """Give a Temporal client or worker everything agent-lattice needs.

    On a client, ``LatticePlugin()`` sets the pydantic data converter, and every worker made
    from that client inherits it. On a worker, pass the agents it serves:
    ``Worker(client, task_queue=..., plugins=[LatticePlugin(agents=[...])])`` adds the
    workflows and activities (a client's plugin then leaves that worker to it). A worker on
    the team mailbox queue gets the mailbox workflow only. Workflow failure types are set so
    a deterministic error (bad input, a library error) fails the workflow instead of
    retrying its task forever. ``tool_threads`` (default 32) is how many sync tool handlers
    the worker runs at once, each in its own thread. ``otel`` (default ``LATTICE_OTEL``)
    traces with OpenTelemetry: on a client, its calls and every worker made from it.
    ``encryption_keys`` (default ``LATTICE_ENCRYPTION_KEYS`` / ``LATTICE_ENCRYPTION_KEYS_FILE``)
    encrypts every payload with AES-256-GCM (``_encryption``): on a client, its calls and
    every worker made from it; on a ``Replayer``, what it decodes. With keys, a run refuses
    what reaches it unencrypted (``LATTICE_ENCRYPTION_STRICT``, default on). ``park_after``
    (default ``LATTICE_PARK_AFTER``, else 10 s; ``math.inf`` never): a worker evicts a run from
    its cache once it has waited that long with no step (``worker/_park``).
    """

    def __init__(
        self,
        agents: Iterable[Agent] | AgentRegistry | None = None,
        *,
        tool_threads: int = DEFAULT_TOOL_THREADS,
        otel: bool | None = None,
        encryption_keys: EncryptionKeysLike | None = None,
        park_after: float | None = None,
    ) -> None:
        self.park_after = park_after_seconds(park_after)
        # the keys are checked (and the extra's presence) here, before any server is reached
        converter = lattice_data_converter(encryption_keys)
        configured_channel_key()  # a bad LATTICE_CHANNEL_KEY[_FILE] is said now, not per request
        self.otel = _settings.otel() if otel is None else otel
        tracing = [tracing_interceptor()] if self.otel else []
        registry = (
            agents if isinstance(agents, AgentRegistry) or agents is None else AgentRegistry(agents)
        )
        self.registry = registry
        activities = (
            AgentActivities(registry, tool_threads=tool_threads) if registry is not None else None
        )
        # the tracing interceptor's spans are opentelemetry objects, shared with the host
        passthrough = [*PASSTHROUGH, "opentelemetry"] if self.otel else PASSTHROUGH
        runner = sandbox_runner(SandboxRestrictions.default.with_passthrough_modules(*passthrough))
        failures: list[type[BaseException]] = [LatticeError, pydantic.ValidationError]
        super().__init__(
            "agent-lattice",
            data_converter=converter,
            # the mailbox workflow too, so a Replayer with this plugin replays it
            workflows=[AgentWorkflow, TeamWorkflow, TeamMailboxWorkflow] if activities else None,
            activities=[
                activities.model_request,
                activities.tool_call,
                activities.compact,
                activities.delegate_prepare,
                activities.delegate_finish,
                activities.land_message,
                activities.team_start,
                activities.team_adapter,
                activities.team_report,
                activities.team_mailbox,
                activities.team_claim,
                activities.team_settle,
                activities.team_lead_mail,
                activities.tool_result_hooks,
                activities.trace,
                activities.check_tool_input,
                activities.report_spend,
            ]
            if activities
            else None,
            workflow_runner=runner,
            workflow_failure_exception_types=failures,
            # a finished tool's result must reach a server that is down for a while; a signal
            # its handler cannot take is dropped, not a stuck run (_signals)
            interceptors=[ServerWaitInterceptor(), SignalArgumentsInterceptor(), *tracing]
            if activities
            else tracing or None,
        )
        # the team mailbox queue's wiring: its workflow, nothing of any agent
        self._mailbox = SimplePlugin(
            "agent-lattice-mailbox",
            workflows=[TeamMailboxWorkflow],
            workflow_runner=runner,
            workflow_failure_exception_types=failures,
            interceptors=[SignalArgumentsInterceptor(), *tracing],
        )

    @staticmethod
    def _steps_aside(plugin: LatticePlugin, config: WorkerConfig) -> bool:
        """Whether ``plugin`` is a client's, beside the worker's own LatticePlugin."""
        own = [p for p in config.get("plugins") or () if isinstance(p, LatticePlugin)]
        return bool(own) and plugin not in own

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        if self._steps_aside(self, config):
            return config  # a client's plugin: the worker's own LatticePlugin wires it
        mailboxes = config.get("task_queue") == mailbox_task_queue()
        deployment = config.get("deployment_config")
        if not (deployment or config.get("build_id") or config.get("use_worker_versioning")):
            # An unversioned worker's build id only labels it (nothing is routed by it).
            # The SDK's default hashes the bytecode of every loaded module, about 0.75 s of
            # CPU in each process that starts a worker; the library's version names it here.
            config["build_id"] = UNVERSIONED_BUILD_ID
        if deployment is not None:  # a versioned worker: the behaviour of its queue's runs
            config["deployment_config"] = versioned_for(deployment, mailboxes=mailboxes)
        if _settings.drill_kill() is not None:
            # a durability drill kills this worker: the run's next task leaves its sticky
            # queue for the next worker after 1 s, not the default 10 (activities/_drill)
            config["sticky_queue_schedule_to_start_timeout"] = timedelta(seconds=1)
        if mailboxes:
            return self._mailbox.configure_worker(config)
        if config.get("tuner") is None and config.get("max_concurrent_activities") is None:
            config["max_concurrent_activities"] = ACTIVITY_SLOTS  # a tuner sizes them itself
        config = super().configure_worker(config)
        client = config.get("client")
        sdk_default = client is None or client.identity == f"{os.getpid()}@{socket.gethostname()}"
        # an identity the user chose (on the worker or its client) is kept
        if self.registry is not None and config.get("identity") is None and sdk_default:
            config["identity"] = worker_identity()
        return config

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        if self._steps_aside(self, worker.config()):
            return await next(worker)
        _log_start(worker, self.registry)
        # runs idle for park_after leave the cache while they wait (worker/_park)
        parking = asyncio.create_task(park_idle_runs(worker, self.park_after))
        # a query's reader hears from the worker what each task published (worker/_commits)
        undo = send_commit_notices(worker) if _settings.commit_notices() else None
        try:
            # the loop's shared model client and MCP connections close with its last worker
            async with shared_http_client_held(), mcp_connections_held():
                await super().run_worker(worker, next)
        finally:
            parking.cancel()
            if undo is not None:
                undo()


def _log_start(worker: Worker, registry: AgentRegistry | None) -> None:
    """A worker says at INFO where it serves what: server, namespace, task queue, build."""
    config = worker.config(active_config=True)  # as the plugins made it
    client, queue = worker.client, config.get("task_queue", "")
    deployment = config.get("deployment_config")
    build = deployment.version.build_id if deployment else config.get("build_id")
    serves = (
        "team mailboxes"
        if queue == mailbox_task_queue()
        else ", ".join(sorted({a.name for a in registry or ()})) or "no agents yet"
    )
    target = client.service_client.config.target_host
    log.info(
        "worker started: %s on task queue %s at %s (namespace %s), build %s",
        serves,
        queue,
        target,
        client.namespace,
        build,
        extra={
            "server": target,
            "namespace": client.namespace,
            "task_queue": queue,
            "build_id": build,
            "deployment": deployment.version.deployment_name if deployment else None,
            "serves": serves,
        },
    )


def lattice_worker(
    client: Client, *, task_queue: str, plugin: LatticePlugin | None = None, **options: Any
) -> Worker:
    """A worker wired by a LatticePlugin: ``plugin`` (the agents it serves), else the
    client's own (every client a lattice Runtime connects has one), else a new one."""
    inherited = any(isinstance(p, LatticePlugin) for p in client.config()["plugins"])
    if plugin is None and not inherited:
        plugin = LatticePlugin()
    if task_queue != mailbox_task_queue():
        options.setdefault("max_cached_workflows", CACHED_RUNS)
    with warnings.catch_warnings():
        # The SDK warns when a worker and its client carry the same plugin type, as the
        # plugin might configure the worker twice; LatticePlugin.configure_worker makes the
        # client's instance step aside for the worker's own.
        warnings.filterwarnings("ignore", "The same plugin type", UserWarning)
        return Worker(client, task_queue=task_queue, plugins=[plugin] if plugin else [], **options)


def create_mailbox_worker(
    client: Client, *, plugin: LatticePlugin | None = None, **options: Any
) -> Worker:
    """A worker for the team mailbox workflows (``create_workflow_mailbox``) of this task
    queue namespace. Any lattice process can host them: they hold no process's objects.
    ``plugin``: a LatticePlugin of its own (its ``park_after``), else the client's."""
    # Short-lived processes (a `lattice team` command, a script) host mailboxes too: when
    # one has gone, the next process should not wait long on its sticky queue. (A value
    # given to create_workers() wins: it was a TypeError.)
    options.setdefault("sticky_queue_schedule_to_start_timeout", timedelta(seconds=1))
    return lattice_worker(client, task_queue=mailbox_task_queue(), plugin=plugin, **options)
