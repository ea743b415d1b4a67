"""Serving: ``lattice dev``, ``lattice worker`` and ``lattice server status|stop``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from datetime import timedelta
from logging import WARNING
from typing import Annotated, Any

import typer
from rich.text import Text
from temporalio.client import Client
from temporalio.worker import WorkerDeploymentConfig

from .. import _settings
from .._agent import Agent
from .._settings import lattice_home
from ..activities._tools import DEFAULT_TOOL_THREADS
from ..client._connection import TemporalConnection
from ..client._reconnect import ServerWatch
from ..client._runtime import Runtime
from ..client._server import DevServer
from ..worker._adopt import adopt_orphans
from ..worker._health import HealthEndpoints
from ..worker._plugin import ACTIVITY_SLOTS, CACHED_RUNS
from ..worker._versioning import deployment_config
from ..worker._worker import app_agents, create_workers, load_app
from ._connect import connection_options
from ._logs import log_options
from ._plumbing import (
    HELP_OPTIONS,
    Command,
    Group,
    client_target,
    errors_as_exit,
    execute,
    note,
    on_signals,
    print_json,
    say,
    stdout,
)

server_app = typer.Typer(
    cls=Group,
    help="Report on or stop the embedded Temporal dev server.",
    no_args_is_help=True,
    context_settings=HELP_OPTIONS,
)


async def _serve_agents(
    client: Client,
    agents: dict[str, Agent],
    shutdown_s: float,
    tool_threads: int = DEFAULT_TOOL_THREADS,
    watch: ServerWatch | None = None,
    deployment: WorkerDeploymentConfig | None = None,
    slots: dict[str, Any] | None = None,
    health_port: int | None = None,
) -> int:
    """Run one worker per task queue for ``agents`` until SIGINT/SIGTERM, then shut down;
    or until ``watch`` has seen the server unreachable for its reconnect limit (exit 3).
    ``slots``: worker options that size it (``max_concurrent_activities``, ...);
    ``health_port``: serve ``/livez`` and ``/readyz`` there (``worker/_health``)."""
    workers = create_workers(
        client,
        agents.values(),
        tool_threads=tool_threads,
        graceful_shutdown_timeout=timedelta(seconds=shutdown_s),
        deployment_config=deployment,
        **(slots or {}),
    )
    say(f"serving {len(agents)} agent{'s' if len(agents) != 1 else ''} on {client_target(client)}")
    if deployment is not None:
        say(
            Text.assemble(
                ("  worker deployment version ", "dim"),
                (deployment.version.to_canonical_string(), "cyan"),
            )
        )
    for attr, agent in agents.items():
        tools = ", ".join(t.name for t in agent.tools) or "no tools"
        say(
            Text.assemble(
                ("  ", ""),
                (attr, "bold"),
                (f"  {agent.name} · {agent.config.model} · {tools}  ", "dim"),
                ("task queue ", "dim"),
                (agent.task_queue, "cyan"),
            )
        )
    stop = asyncio.Event()
    main_task = asyncio.current_task()

    def on_signal(signum: int) -> None:
        if stop.is_set() and main_task is not None:
            main_task.cancel()  # a second Ctrl-C: stop waiting for in-flight tasks
        stop.set()

    with on_signals(on_signal, signal.SIGINT, signal.SIGTERM):
        health = HealthEndpoints(client, workers, health_port) if health_port else None
        if health is not None:
            await health.start()
            say(Text.assemble(("  health ", "dim"), f"/livez /readyz on port {health_port}"))
        tasks = [asyncio.create_task(w.run()) for w in workers]
        if health is not None:
            health.running(tasks)
        waiter = asyncio.create_task(stop.wait())
        # Temporal retries the polls of a server that went away forever: give up on the limit
        lost = asyncio.create_task((watch.lost if watch else asyncio.Event()).wait())
        # runs of these agents whose inline process died are served here too
        adopter = asyncio.create_task(
            adopt_orphans(client, agents.values(), lambda said: note(said, "yellow", WARNING))
        )
        say(Text("ready · Ctrl-C to stop", style="green"))
        await asyncio.wait([*tasks, waiter, lost], return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            note("shutting down workers…")
        if health is not None:
            health.stopping()
        adopter.cancel()
        with contextlib.suppress(BaseException):
            await adopter
        pending = [w.shutdown() for w, t in zip(workers, tasks, strict=True) if not t.done()]
        await asyncio.gather(*pending, return_exceptions=True)
        waiter.cancel()
        lost.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        if health is not None:
            await health.close()
    if watch is not None and watch.lost.is_set():
        raise watch.error()
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise result
    note("workers stopped")
    return 0


@log_options("INFO")
def dev(
    app_ref: Annotated[
        str | None,
        typer.Argument(
            metavar="APP",
            help="Module or file whose agents to serve (optional).",
            show_default=False,
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            help="gRPC port when the server is started: default the one it had (a server "
            "that died comes back there), else 7233 (UI on port + 1000); 0 for any free port.",
            show_default=False,
        ),
    ] = None,
    ui: Annotated[bool, typer.Option("--ui/--headless", help="Serve the Temporal UI.")] = True,
    ui_port: Annotated[
        int | None,
        typer.Option(
            help="UI port when the server is started (default: the one it had, else gRPC "
            "port + 1000).",
            show_default=False,
        ),
    ] = None,
    shutdown_timeout: Annotated[
        float, typer.Option(help="Seconds in-flight activities get on shutdown.")
    ] = 10.0,
) -> None:
    """Ensure the embedded Temporal dev server; with APP, also run workers for its agents.

    The server runs detached, persists to SQLite under LATTICE_HOME (default ~/.agent) and
    outlives this command; stop it with `lattice server stop`. Without APP the command only
    ensures the server and exits. With APP it serves the app's agents in the foreground until
    Ctrl-C. TEMPORAL_ADDRESS is ignored here: dev is about the embedded server.
    """
    with errors_as_exit():
        agents = app_agents(load_app(app_ref)) if app_ref else None
    execute(lambda: _dev(agents, port, ui, ui_port, shutdown_timeout))


async def _dev(
    agents: dict[str, Agent] | None,
    port: int | None,
    ui: bool,
    ui_port: int | None,
    shutdown_s: float,
) -> int:
    home = lattice_home()
    server, started = await asyncio.to_thread(
        DevServer.ensure, home, port=port, ui_port=ui_port, ui=ui
    )
    _print_server(server, "started" if started else "reused")
    if not started and port and server.port != port:
        note(f"--port ignored: the running server listens on {server.port}")
    if os.environ.get("TEMPORAL_ADDRESS") and agents:
        note("TEMPORAL_ADDRESS is ignored by `lattice dev`", "yellow", WARNING)
    if agents is None:
        return 0
    embedded = TemporalConnection(address=server.address)  # TEMPORAL_* is not for it
    runtime = await Runtime.connect(connection=embedded, inline_workers=False, quiet=True)
    runtime.watch.home = home  # the server is ours: started again if it dies
    try:
        return await _serve_agents(runtime.client, agents, shutdown_s, watch=runtime.watch)
    finally:
        await runtime.close()


def _print_server(server: DevServer, state: str) -> None:
    say(Text(f"Temporal dev server {state} (pid {server.pid})", style="bold"))
    say(Text.assemble(("  gRPC  ", "dim"), server.address))
    say(Text.assemble(("  UI    ", "dim"), server.ui_url if server.ui_port else "off"))
    say(Text.assemble(("  data  ", "dim"), server.home))


@log_options("INFO")
@connection_options
def worker(
    app_ref: Annotated[
        str, typer.Argument(metavar="APP", help="Module (pkg.mod) or file (path/app.py).")
    ],
    shutdown_timeout: Annotated[
        float, typer.Option(help="Seconds in-flight activities get on shutdown.")
    ] = 10.0,
    tool_threads: Annotated[
        int,
        typer.Option(min=1, help="Sync tool handlers run at once, each in its own thread."),
    ] = DEFAULT_TOOL_THREADS,
    otel: Annotated[
        bool | None,
        typer.Option(
            "--otel/--no-otel",
            help="Trace with OpenTelemetry over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT; default "
            "LATTICE_OTEL).",
            show_default=False,
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="Serve Prometheus metrics on this port, at /metrics (default "
            "LATTICE_METRICS_PORT).",
            show_default=False,
        ),
    ] = None,
    health_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="Serve /livez (the process answers) and /readyz (connected to Temporal and "
            "polling every task queue) on this port, for probes (default LATTICE_HEALTH_PORT).",
            show_default=False,
        ),
    ] = None,
    deployment: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="Temporal Worker Versioning: the worker deployment these workers belong to, "
            "with --build-id (default LATTICE_DEPLOYMENT_NAME). Queries stay on the build "
            "that started them; new ones go to the deployment's current version.",
            show_default=False,
        ),
    ] = None,
    build_id: Annotated[
        str | None,
        typer.Option(
            metavar="ID",
            help="The build of this code within --deployment (default LATTICE_BUILD_ID).",
            show_default=False,
        ),
    ] = None,
    max_concurrent_activities: Annotated[
        int,
        typer.Option(
            min=1,
            help="Model requests and tool calls a worker runs at once (each model request "
            "waits on the network: Temporal's default of 100 queues the 101st query).",
        ),
    ] = ACTIVITY_SLOTS,
    max_cached_workflows: Annotated[
        int,
        typer.Option(
            min=0,
            help="Runs a worker keeps in memory between their steps (one evicted is replayed "
            "from its history on its next step).",
        ),
    ] = CACHED_RUNS,
    park_after: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Seconds a run waits idle (on the model, a tool, a person) before it leaves "
            "the worker's memory until its next step, replayed from its history then "
            "[default: LATTICE_PARK_AFTER, else 10; inf: never].",
            show_default=False,
        ),
    ] = None,
    *,
    connection: TemporalConnection,
) -> None:
    """Run workers for the agents of APP (one per task queue) until SIGINT/SIGTERM.

    APP lists its agents in a module attribute `agents`, or defines them at module level.
    Queries started with `lattice run` or `agent.query()` from anywhere run here.
    """
    with errors_as_exit():
        versioning = deployment_config(
            deployment or _settings.deployment_name(), build_id or _settings.build_id()
        )
        agents = app_agents(load_app(app_ref))
        health = health_port or _settings.health_port()
    slots = {
        "max_concurrent_activities": max_concurrent_activities,
        "max_cached_workflows": max_cached_workflows,
        "park_after": park_after,
    }
    execute(
        lambda: _worker(
            connection,
            agents,
            shutdown_timeout,
            tool_threads,
            otel,
            metrics_port,
            versioning,
            slots,
            health,
        )
    )


async def _worker(
    connection: TemporalConnection,
    agents: dict[str, Agent],
    shutdown_s: float,
    tool_threads: int,
    otel: bool | None = None,
    metrics_port: int | None = None,
    deployment: WorkerDeploymentConfig | None = None,
    slots: dict[str, Any] | None = None,
    health_port: int | None = None,
) -> int:
    runtime = await Runtime.connect(
        connection=connection, inline_workers=False, otel=otel, metrics_port=metrics_port
    )
    try:
        return await _serve_agents(
            runtime.client,
            agents,
            shutdown_s,
            tool_threads,
            runtime.watch,
            deployment,
            slots,
            health_port,
        )
    finally:
        await runtime.close()


@server_app.command("status", cls=Command)
def server_status(
    json_out: Annotated[
        bool, typer.Option("--json", help="One JSON object on stdout, nothing else.")
    ] = False,
) -> None:
    """Report the embedded server under LATTICE_HOME (exit code 1 when it is not running).

    --json: {"running", "pid", "address", "ui_url", "home"} (only "running" and "home" when
    it is not running).
    """
    server = DevServer.running(lattice_home())
    if json_out:
        state: dict[str, object] = {"running": server is not None, "home": str(lattice_home())}
        if server is not None:
            ui_url = server.ui_url if server.ui_port else None
            state.update(pid=server.pid, address=server.address, ui_url=ui_url)
        print_json(state)
    elif server is None:
        stdout.print(f"no embedded Temporal server is running (home {lattice_home()})")
    else:
        _print_server(server, "running")
    if server is None:
        raise typer.Exit(1)


@server_app.command("stop", cls=Command)
def server_stop() -> None:
    """Stop the embedded server under LATTICE_HOME (its data stays).

    The workers and clients that use it as their embedded server stop with it, saying so.
    """
    server = DevServer.running(lattice_home())
    if server is None:
        stdout.print(f"no embedded Temporal server is running (home {lattice_home()})")
        return
    server.stop()
    stdout.print(f"stopped the embedded Temporal server (pid {server.pid}, {server.address})")
