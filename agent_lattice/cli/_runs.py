"""Queries and runs: ``lattice run``, ``interrupt`` and ``attach``."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from logging import WARNING
from typing import Annotated, Any

import typer
from rich.text import Text
from temporalio.service import RPCError, RPCStatusCode

from .._agent import Agent
from .._messages import (
    AssistantMessage,
    ResultMessage,
    SDKMessage,
    StreamEventMessage,
    SystemMessage,
)
from .._team import Team
from ..client._connection import TemporalConnection
from ..client._orphans import (
    RunState,
    orphan_hint,
    run_state,
    team_may_start,
    until_served,
)
from ..client._orphans import queue_served as has_live_worker
from ..client._runtime import Runtime
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
    stderr,
    stdout,
    waiting,
)
from ._render import Renderer

# Without a message after this long, a run that relies on an external worker says so.
WORKER_HINT_AFTER_S = 5.0


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
        bool, typer.Option("--json", help="One JSON object per message on stdout, nothing else.")
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
    cannot be reached or was lost (retried for LATTICE_RECONNECT_S, 600 s by default),
    130 after Ctrl-C (which interrupts the query; a second Ctrl-C leaves without waiting).
    """
    if prompt == "-":
        prompt = sys.stdin.read()
    with errors_as_exit():
        agent = resolve_agent(target)
    execute(
        lambda: _run(
            connection,
            agent,
            prompt,
            json_lines=json_lines,
            stream=not no_stream,
            serve=serve,
            otel=otel,
        ),
        spinner=not json_lines,
    )


async def _run(
    connection: TemporalConnection,
    agent: Agent | Team,
    prompt: str,
    *,
    json_lines: bool,
    stream: bool,
    serve: bool | None,
    otel: bool | None = None,
) -> int:
    runtime = await Runtime.connect(connection=connection, inline_workers=False, otel=otel)
    try:
        return await _run_query(runtime, agent, prompt, json_lines, stream, serve)
    finally:
        await runtime.close()


async def _run_query(
    runtime: Runtime,
    agent: Agent | Team,
    prompt: str,
    json_lines: bool,
    stream: bool,
    serve: bool | None,
) -> int:
    # a team runs through its lead (and is served, members included, with it)
    queue = agent.lead.task_queue if isinstance(agent, Team) else agent.task_queue
    if serve is None:
        serve = not await has_live_worker(runtime.client, queue)
        if serve:
            note(f"no worker polls {queue}; serving {agent.name} in this process")
    runtime.inline_workers = serve
    messages = agent.query(prompt, runtime=runtime, stream=stream)
    screen = _Screen(Renderer(stdout, json_lines=json_lines))
    waiting.show(f"starting {agent.name}…")
    main_task = asyncio.current_task()
    interrupted: list[int] = []

    def on_signal(signum: int) -> None:
        if interrupted and main_task is not None:
            main_task.cancel()  # second Ctrl-C: leave now (the run is interrupted on exit)
            return
        interrupted.append(signum)
        note("interrupting… (Ctrl-C again to leave now)", "yellow", WARNING)
        agent.interrupt()

    hint = None if serve else asyncio.create_task(_worker_hint(queue))
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
            if hint is not None:
                hint.cancel()
            await _aclose(messages)
    if interrupted:
        return 128 + interrupted[0]
    if result is None:  # never silent: say why there is no result
        fail(f"the messages of {agent.name}'s run ended without its result")
    return EXIT_FAILED if result is None or result.is_error else 0


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


async def _worker_hint(task_queue: str) -> None:
    await asyncio.sleep(WORKER_HINT_AFTER_S)
    note(
        f"still waiting: is a worker running for task queue {task_queue}? "
        "(start one with `lattice worker APP`)",
        "yellow",
        WARNING,
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
