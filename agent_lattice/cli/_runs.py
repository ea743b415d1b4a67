"""Queries and runs: ``lattice run``, ``interrupt`` and ``attach``."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from logging import WARNING
from typing import Annotated, Any, NoReturn

import typer
from rich.text import Text
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from .._agent import Agent, start_query
from .._errors import ConfigurationError
from .._messages import (
    AssistantMessage,
    ResultMessage,
    SDKMessage,
    StreamEventMessage,
    SystemMessage,
)
from .._session import QueryRunner
from ..client._connection import TemporalConnection
from ..client._orphans import (
    RunState,
    UnroutedBuild,
    orphan_hint,
    run_state,
    team_may_start,
    unrouted_builds,
    until_served,
)
from ..client._runtime import Runtime
from ..teams._team import Team
from ..worker._pollers import queue_served as has_live_worker
from ..worker._worker import resolve_agent
from ._connect import connection_options
from ._logs import log_options
from ._plumbing import (
    EXIT_FAILED,
    errors_as_exit,
    execute,
    fail,
    note,
    on_signals,
    print_json,
    stderr,
    stdout,
    waiting,
)
from ._render import Renderer

# Without a message after this long, a run that relies on an external worker says so.
WORKER_HINT_AFTER_S = 5.0
# After SIGINT or SIGTERM, how long `lattice run` waits for the interrupted result (--grace)
DEFAULT_GRACE_S = 10.0


@log_options("WARNING")
@connection_options
def run(
    target: Annotated[
        str,
        typer.Argument(metavar="APP:AGENT", help="The agent, e.g. examples/quickstart.py:agent."),
    ],
    prompt: Annotated[
        str, typer.Argument(metavar="PROMPT", help="The prompt; '-' reads it from stdin.")
    ],
    json_lines: Annotated[
        bool,
        typer.Option(
            "--json",
            help="One JSON object per message on stdout, nothing else (with --detach: one "
            'object, {"workflow_id", "run_id"}).',
        ),
    ] = False,
    no_stream: Annotated[
        bool, typer.Option("--no-stream", help="Skip live model streaming.")
    ] = False,
    serve: Annotated[
        bool | None,
        typer.Option(
            "--worker/--no-worker",
            help="Serve the agent in this process (default: only when no worker polls its "
            "task queue).",
            show_default=False,
        ),
    ] = None,
    detach: Annotated[
        bool,
        typer.Option(
            "--detach",
            help="Start the run for the app's workers and return at once, printing its "
            "workflow id (follow it with `lattice attach`); never serves it in this process.",
        ),
    ] = False,
    session: Annotated[
        str | None,
        typer.Option(
            "--session",
            metavar="ID",
            help="Continue this session's conversation: the model sees its earlier queries and "
            "answers (a new id starts a session under that id).",
            show_default=False,
        ),
    ] = None,
    grace: Annotated[
        float,
        typer.Option(
            metavar="SECONDS",
            help="On SIGTERM or Ctrl-C: how long to wait for the interrupted result before "
            "leaving the run to its workers.",
        ),
    ] = DEFAULT_GRACE_S,
    otel: Annotated[
        bool | None,
        typer.Option(
            "--otel/--no-otel",
            help="Trace the query with OpenTelemetry over OTLP (default LATTICE_OTEL).",
            show_default=False,
        ),
    ] = None,
    *,
    connection: TemporalConnection,
) -> None:
    """Run one query and watch it: streamed text, tool calls, tool results, the result.

    Exit code 0 on success, 1 when the result is an error, 3 when the Temporal server
    cannot be reached or was lost (retried for LATTICE_RECONNECT_S, 600 s by default).

    SIGINT (Ctrl-C) or SIGTERM (systemd, Kubernetes, timeout) interrupts the query and waits
    up to --grace seconds for its interrupted result, then leaves, saying how to attach to
    the run; a second signal leaves at once. Exit code 130 after SIGINT, 143 after SIGTERM.
    """
    if prompt == "-":
        prompt = sys.stdin.read()
    with errors_as_exit():
        if grace < 0:
            raise ConfigurationError(f"--grace takes seconds, 0 or more; got {grace:g}")
        if detach and serve:
            raise ConfigurationError(
                "--detach leaves the run to the app's workers: it cannot be served here (--worker)"
            )
        agent = resolve_agent(target, session_id=session)
        if detach and isinstance(agent, Team):
            raise ConfigurationError(
                f"{target!r} is a team: --detach starts one agent's query (run a team in "
                "the foreground)"
            )
    if detach:
        assert isinstance(agent, Agent)
        main = lambda: _detached(connection, agent, prompt, json_lines, otel)  # noqa: E731
    else:
        main = lambda: _run(  # noqa: E731
            connection,
            agent,
            prompt,
            json_lines=json_lines,
            stream=not no_stream,
            serve=serve,
            grace=grace,
            otel=otel,
            target=target,
        )
    execute(main, spinner=not json_lines)


async def _detached(
    connection: TemporalConnection,
    agent: Agent,
    prompt: str,
    json_lines: bool,
    otel: bool | None,
) -> int:
    """``--detach``: start the query on the agent's task queue and leave it to its workers."""
    runtime = await Runtime.connect(connection=connection, inline_workers=False, otel=otel)
    try:
        workflow_id = await agent.start(prompt, runtime=runtime)
        described = await runtime.client.get_workflow_handle(workflow_id).describe()
        served = await has_live_worker(runtime.client, agent.task_queue)
        unrouted = await unrouted_builds(runtime.client, agent.task_queue)
    finally:
        await runtime.close()
    if json_lines:
        print_json({"workflow_id": workflow_id, "run_id": described.run_id})
    else:
        stdout.print(workflow_id)
    if not served:
        stderr.print(
            Text(
                f"no worker polls task queue {agent.task_queue} now: the run starts once one "
                "does (`lattice worker APP` for its app)",
                "yellow",
            )
        )
    if unrouted:
        stderr.print(
            Text(f"the run waits: {_versioning_hint(agent.task_queue, unrouted)}", "yellow")
        )
    stderr.print(Text(f"follow it with `lattice attach {workflow_id}`", "dim"))
    return 0


async def _run(
    connection: TemporalConnection,
    agent: Agent | Team,
    prompt: str,
    *,
    json_lines: bool,
    stream: bool,
    serve: bool | None,
    grace: float = DEFAULT_GRACE_S,
    otel: bool | None = None,
    target: str = "APP:AGENT",
) -> int:
    runtime = await Runtime.connect(connection=connection, inline_workers=False, otel=otel)
    try:
        return await _run_query(runtime, agent, prompt, json_lines, stream, serve, grace, target)
    finally:
        await runtime.close()


async def _run_query(
    runtime: Runtime,
    agent: Agent | Team,
    prompt: str,
    json_lines: bool,
    stream: bool,
    serve: bool | None,
    grace: float = DEFAULT_GRACE_S,
    target: str = "APP:AGENT",
) -> int:
    # a team runs through its lead (and is served, members included, with it)
    team = agent if isinstance(agent, Team) else None
    lead = agent.lead if isinstance(agent, Team) else agent
    queue = lead.task_queue
    if serve is None:
        serve = not await has_live_worker(runtime.client, queue)
        if serve:
            note(f"no worker polls {queue}; serving {agent.name} in this process")
    runtime.inline_workers = serve
    query = start_query(lead, prompt, {"runtime": runtime, "stream": stream}, team=team)
    messages = query.messages()
    screen = _Screen(Renderer(stdout, json_lines=json_lines))
    waiting.show(f"starting {agent.name}…")
    interrupted: list[int] = []
    leaving = _Leaving(query, queue, served_here=serve, grace=grace)

    def on_signal(signum: int) -> None:
        if interrupted:
            leaving.now(interrupted[0])  # a second signal: leave without the result
        interrupted.append(signum)
        leaving.start(signum)

    hint = None if serve else asyncio.create_task(_worker_hint(runtime.client, queue))
    result: ResultMessage | None = None
    with on_signals(on_signal, signal.SIGINT, signal.SIGTERM):
        try:
            async for message in messages:
                if hint is not None:
                    hint.cancel()
                    hint = None
                if json_lines and isinstance(message, SystemMessage) and message.subtype == "init":
                    where = f"workflow {message.workflow_id} · run {message.run_id}"
                    note(where)
                screen.show(message)
                if isinstance(message, ResultMessage):
                    result = message
        finally:
            leaving.cancel()
            if hint is not None:
                hint.cancel()
            await _aclose(messages)
    if interrupted:
        return 128 + interrupted[0]
    if result is None:  # never silent: say why there is no result
        fail(f"the messages of {agent.name}'s run ended without its result")
    elif team is None and not json_lines:
        again = f"lattice run {target} PROMPT --session {lead.session_id}"
        stderr.print(Text(f"session {lead.session_id} · `{again}` continues it", style="dim"))
    return EXIT_FAILED if result is None or result.is_error else 0


class _Leaving:
    """After SIGINT or SIGTERM: the query is interrupted, and the process leaves after
    ``grace`` seconds (or a second signal) if the interrupted result has not come, saying
    where the run is and how to follow it. It leaves with ``os._exit``: whatever still waits
    (a tool that ignores cancellation, a server that went away) cannot hold it."""

    def __init__(self, query: QueryRunner, queue: str, *, served_here: bool, grace: float):
        self.query = query
        self.queue = queue
        self.served_here = served_here
        self.grace = grace
        self._timer: asyncio.TimerHandle | None = None

    def start(self, signum: int) -> None:
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        stderr.print(
            Text(
                f"{name}: interrupting… (waiting up to {self.grace:g} s for the interrupted "
                "result; a second signal leaves now)",
                style="yellow",
            )
        )
        self.query.interrupt()
        self._timer = asyncio.get_running_loop().call_later(self.grace, self.now, signum)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def now(self, signum: int) -> NoReturn:
        waiting.stop()
        workflow_id = getattr(self.query, "workflow_id", "")
        if not workflow_id:
            said = "left before the run started (it may not exist)"
        elif self.served_here:
            said = (
                f"left {workflow_id} without its interrupted result: this process served it, "
                "so it is orphaned now, with the interrupt requested; `lattice worker APP` for "
                "its app adopts it, and it ends interrupted there. Follow it with `lattice "
                f"attach {workflow_id}`; end it now, keeping its completed turns, with "
                f"`lattice interrupt --force {workflow_id}`"
            )
        else:
            said = (
                f"left {workflow_id} without its interrupted result: the interrupt is "
                f"requested, and the run ends on the workers of task queue {self.queue}. "
                f"Follow it with `lattice attach {workflow_id}`"
            )
        stderr.print(Text(said, style="yellow"))
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signum)


class _Screen:
    """The run's messages on stdout, and between them a spinner on stderr saying what the run
    waits for (the model, a tool); hidden before anything is printed."""

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer
        self.model = "the model"

    def show(self, message: SDKMessage) -> None:
        waiting.hide()
        self.renderer.show(message)
        if isinstance(message, SystemMessage) and message.subtype == "init" and message.model:
            self.model = message.model
        label = self._waits_for(message)
        if label is not None and self.renderer.at_line_start:
            waiting.show(label)

    def _waits_for(self, message: SDKMessage) -> str | None:
        if isinstance(message, StreamEventMessage | ResultMessage):
            return None  # text is arriving, or the run is over
        if isinstance(message, SystemMessage) and message.subtype == "approval_request":
            return None  # a person decides: the lines printed say how
        if isinstance(message, AssistantMessage):
            uses = message.message.tool_uses
            return f"running {', '.join(u.name for u in uses)}…" if uses else None
        return f"waiting for {self.model}…"


async def _worker_hint(client: Client, task_queue: str) -> None:
    await asyncio.sleep(WORKER_HINT_AFTER_S)
    unrouted = await unrouted_builds(client, task_queue)
    said = (
        "still waiting: " + _versioning_hint(task_queue, unrouted)
        if unrouted
        else f"still waiting: is a worker running for task queue {task_queue}? "
        "(start one with `lattice worker APP`)"
    )
    note(said, "yellow", WARNING)


def _versioning_hint(task_queue: str, unrouted: list[UnroutedBuild]) -> str:
    """Why versioned workers polling ``task_queue`` get no new runs, and the command that
    routes them there (Temporal Worker Versioning: an operator sets the current version)."""
    first = unrouted[0]
    builds = ", ".join(b.build_id for b in unrouted)
    why = (
        "it has none"
        if first.current is None
        else f"that is build {first.current}, which no worker serves"
    )
    return (
        f"the workers polling task queue {task_queue} are versioned (worker deployment "
        f"{first.deployment}, build{'s' if len(unrouted) > 1 else ''} {builds}), but new "
        f"queries go to the deployment's current version, and {why}. Make the build current: "
        f"`temporal worker deployment set-current-version --deployment-name {first.deployment} "
        f"--build-id {first.build_id}`"
    )


async def _aclose(messages: AsyncIterator[Any]) -> None:
    close = getattr(messages, "aclose", None)
    if close is not None:
        await close()


@connection_options
def interrupt(
    workflow_id: Annotated[str, typer.Argument(help="The workflow id of the run.")],
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="End a run that no worker serves (its process died): serve it here, without "
            "its agent, until it ends interrupted; its completed turns stay in its session.",
        ),
    ] = False,
    *,
    connection: TemporalConnection,
) -> None:
    """Interrupt a running query: it ends with the result subtype `interrupted`.

    Exit code 1 when no worker serves the run (nothing would happen until it is adopted)
    and --force was not given, or when there is no such run.
    """
    execute(lambda: _interrupt(connection, workflow_id, force))


async def _interrupt(connection: TemporalConnection, workflow_id: str, force: bool) -> int:
    runtime = await Runtime.connect(connection=connection, inline_workers=False)
    try:
        state = await _state_or_none(runtime, workflow_id)
        if state is None:
            return 1
        if not state.running:
            stdout.print(f"{workflow_id} is not running; nothing to interrupt")
        elif state.served:
            await runtime.interrupt(workflow_id)
            stdout.print(f"interrupt sent to {workflow_id} (it was running)")
        elif not force:
            fail(
                f"{orphan_hint(state)}. No interrupt was sent: nothing happens to it until it "
                "is adopted."
            )
            return 1
        else:
            stderr.print(Text(f"no worker serves {workflow_id}: ending it from here…", "dim"))
            result = await runtime.end_orphan(workflow_id)
            if result is None:
                fail(f"{workflow_id} did not end within 60 s: terminated (its turns are lost)")
                return 1
            stdout.print(f"{workflow_id} ended: {result.subtype} (completed turns kept)")
        return 0
    finally:
        await runtime.close()


async def _state_or_none(runtime: Runtime, workflow_id: str) -> RunState | None:
    """The run's state; None (with the error said) when there is no run with that id."""
    try:
        return await run_state(runtime.client, workflow_id)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
    fail(f"no run with id {workflow_id!r} (see `lattice runs`)")
    return None


@connection_options
def attach(
    workflow_id: Annotated[str, typer.Argument(help="The workflow id of the run.")],
    json_lines: Annotated[
        bool, typer.Option("--json", help="One JSON object per message on stdout, nothing else.")
    ] = False,
    no_stream: Annotated[
        bool, typer.Option("--no-stream", help="Durable messages only, no live tokens.")
    ] = False,
    *,
    connection: TemporalConnection,
) -> None:
    """Print the messages of a run from its start, following it until its result.

    While the run goes on, its live tokens show too (read from the worker that runs the
    model request: it must be reachable at the address its identity names).
    """
    execute(
        lambda: _attach(connection, workflow_id, json_lines, not no_stream),
        spinner=not json_lines,
    )


async def _attach(
    connection: TemporalConnection, workflow_id: str, json_lines: bool, live: bool
) -> int:
    runtime = await Runtime.connect(connection=connection, inline_workers=False)
    try:
        # a team lead's query may be about to start: durable_messages waits for it then
        if not await team_may_start(runtime.client, workflow_id):
            state = await _state_or_none(runtime, workflow_id)
            if state is None:
                return 1
            if state.orphaned:
                stderr.print(Text(orphan_hint(state), "yellow"))
                # a reader's polls would queue on the dead process's queue: follow once adopted
                await until_served(runtime.client, state)
        screen = _Screen(Renderer(stdout, workflow_id=workflow_id, json_lines=json_lines))
        result: ResultMessage | None = None
        # A run in progress is followed live; a closed one is rebuilt from its history.
        messages = runtime.attach(workflow_id) if live else runtime.durable_messages(workflow_id)
        async for message in messages:
            screen.show(message)
            if isinstance(message, ResultMessage):
                result = message
        return 1 if result is None or result.is_error else 0
    finally:
        await runtime.close()
