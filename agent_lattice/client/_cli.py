"""The ``lattice`` command line: dev server, workers, queries, runs.

Every command connects like :meth:`Runtime.connect`: ``TEMPORAL_ADDRESS`` (with
``TEMPORAL_NAMESPACE`` and ``TEMPORAL_API_KEY``) names a server; without it the embedded dev
server under ``LATTICE_HOME`` is started or reused; an unreachable server is retried for
``LATTICE_RECONNECT_S`` (600 s by default) while stderr says so. Errors are printed as one
red line on stderr, with exit code 1 (the command failed: a query's error result, a run not
found, ...), 2 (usage: bad arguments, an APP, AGENT or TEAM that cannot be loaded) or 3 (the
Temporal server could not be reached, or was lost); set ``LATTICE_DEBUG=1`` to see the
traceback instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from .._agent import Agent
from .._errors import LatticeError, ServerUnreachableError
from .._messages import (
    AgentMessageEvent,
    AssistantMessage,
    ResultMessage,
    SDKMessage,
    StreamEventMessage,
    SystemMessage,
    TeamAgentEvent,
    TeamMessageEvent,
    ToolResultBlock,
    UserMessage,
)
from .._team import Team
from ..activities._tools import DEFAULT_TOOL_THREADS
from ..worker._adopt import adopt_orphans
from ..worker._worker import app_agents, create_workers, load_app, resolve_agent
from ._orphans import RunState, orphan_hint, owner_of, run_state, team_may_start, until_served
from ._orphans import queue_served as has_live_worker
from ._reconnect import ServerWatch, unreachable
from ._runtime import Runtime
from ._server import DevServer, lattice_home

__all__ = ["Renderer", "app", "main"]

# Without a message after this long, a run that relies on an external worker says so.
WORKER_HINT_AFTER_S = 5.0
TOOL_RESULT_CHARS = 200

stdout = Console(soft_wrap=True, emoji=False, highlight=False)
stderr = Console(stderr=True, soft_wrap=True, emoji=False, highlight=False)

app = typer.Typer(
    name="lattice",
    help="Durable LLM agents on Temporal: dev server, workers, queries and runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
server_app = typer.Typer(
    help="Report on or stop the embedded Temporal dev server.", no_args_is_help=True
)
app.add_typer(server_app, name="server")


# ---------------------------------------------------------------------------- rendering


class Renderer:
    """Prints the messages of one run: for people (rich) or as JSON lines (``json_lines``).

    Live text arrives as ``stream_event`` deltas; the ``assistant`` message that closes the
    turn only adds what the stream did not show. When a model request is retried the
    partial text of the failed attempt stays on screen, a dim line marks the retry, and the
    retry's text starts on a fresh line (never as a continuation of the old one).
    """

    def __init__(
        self, console: Console, *, workflow_id: str | None = None, json_lines: bool = False
    ) -> None:
        self.console = console
        self.workflow_id = workflow_id
        self.json_lines = json_lines
        self._turn = 0  # turn and attempt whose deltas are on screen
        self._attempt = 0
        self._closed_turn = 0  # last turn whose assistant message was shown
        self._streamed = ""  # text streamed for the current attempt
        self._open_line = False

    def show(self, message: SDKMessage) -> None:
        if self.json_lines:
            out = self.console.file
            out.write(json.dumps(message.model_dump(mode="json"), ensure_ascii=False) + "\n")
            out.flush()
            return
        if isinstance(message, StreamEventMessage):
            self._stream_event(message)
        elif isinstance(message, SystemMessage):
            self._system(message)
        elif isinstance(message, AssistantMessage):
            self._assistant(message)
        elif isinstance(message, UserMessage):
            self._tool_results(message)
        elif isinstance(message, ResultMessage):
            self._result(message)
        elif isinstance(message, TeamMessageEvent):
            body = f": {_one_line(message.body, 80)}" if message.body else ""
            self.note(
                f"✉ {message.event} {message.from_mailbox} → {message.to_mailbox}{body}", "cyan"
            )
        elif isinstance(message, TeamAgentEvent):
            self.note(f"⚙ {message.mailbox} {message.event} {message.work_item_id}", "cyan")
        elif isinstance(message, AgentMessageEvent) and isinstance(
            message.message, AssistantMessage
        ):
            said = message.message.message.text
            if said:
                self.note(f"  {message.team}::{message.member}: {_one_line(said, 100)}")

    def note(self, text: str, style: str = "dim") -> None:
        """A line between messages (ends a streamed line first)."""
        self._end_line()
        self.console.print(Text(text, style=style))

    # -- message kinds

    def _system(self, message: SystemMessage) -> None:
        if message.subtype == "compaction":
            self.note(f"⋯ compacted {message.compacted_messages or 0} messages")
            return
        parts = [message.agent or "agent", message.model or "?"]
        if message.tools:
            parts.append("tools " + ", ".join(message.tools))
        if workflow_id := message.workflow_id or self.workflow_id:
            parts.append(f"workflow {workflow_id}")
        if message.run_id:
            parts.append(f"run {message.run_id}")
        self.note("● " + " · ".join(parts))

    def _stream_event(self, message: StreamEventMessage) -> None:
        key = (message.turn, message.attempt)
        if message.turn <= self._closed_turn or key < (self._turn, self._attempt):
            return  # a late event of a turn already shown, or of a superseded attempt
        if key != (self._turn, self._attempt):
            if message.attempt > 1:
                self.note(f"↻ retrying model request (attempt {message.attempt})")
            self._turn, self._attempt, self._streamed = message.turn, message.attempt, ""
        event = message.event
        delta = event.get("delta") or {}
        if event.get("type") == "content_block_delta" and delta.get("type") == "text_delta":
            chunk = str(delta.get("text", ""))
            if chunk:
                self.console.out(chunk, end="", highlight=False)
                self.console.file.flush()
                self._streamed += chunk
                self._open_line = not chunk.endswith("\n")

    def _assistant(self, message: AssistantMessage) -> None:
        text = message.message.text
        streamed = self._streamed if message.turn == self._turn else ""
        if streamed and text.startswith(streamed):
            rest = text[len(streamed) :]
        else:
            self._end_line()
            rest = text
        if rest:
            self.console.out(rest, end="", highlight=False)
            self._open_line = not rest.endswith("\n")
        self._end_line()
        self._closed_turn, self._streamed = message.turn, ""
        for use in message.message.tool_uses:
            args = json.dumps(use.input, ensure_ascii=False, separators=(",", ":"))
            self.console.print(Text.assemble(("→ ", "cyan"), (use.name, "bold cyan"), " ", args))

    def _tool_results(self, message: UserMessage) -> None:
        self._end_line()
        for block in message.message.blocks:
            if isinstance(block, ToolResultBlock):
                content = _one_line(_result_text(block), TOOL_RESULT_CHARS)
                style = "red" if block.is_error else "green"
                self.console.print(Text.assemble(("← ", style), (content, style)))

    def _result(self, message: ResultMessage) -> None:
        self._end_line()
        if message.is_error:
            icon, style = "✗", "bold red"
        elif message.subtype == "success":
            icon, style = "✓", "bold green"
        else:
            icon, style = "■", "bold yellow"
        usage = message.usage
        parts = [
            f"{message.num_turns} turn{'s' if message.num_turns != 1 else ''}",
            f"{usage.input_tokens} in / {usage.output_tokens} out tokens",
            f"stop {message.stop_reason or '-'}",
        ]
        if workflow_id := message.workflow_id or self.workflow_id:
            parts.append(f"workflow {workflow_id}")
        if message.run_id:
            parts.append(f"run {message.run_id}")
        if message.is_error and message.result:
            self.console.print(Text(message.result, style="red"))
        self.console.print(
            Text.assemble((f"{icon} {message.subtype}", style), (" · " + " · ".join(parts), "dim"))
        )

    def _end_line(self) -> None:
        if self._open_line:
            self.console.out("")
            self._open_line = False


def _result_text(block: ToolResultBlock) -> str:
    if isinstance(block.content, str):
        return block.content
    texts = [str(b.get("text", "")) for b in block.content if b.get("type") == "text"]
    return "\n".join(texts) if texts else json.dumps(block.content, ensure_ascii=False)


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# ---------------------------------------------------------------------------- plumbing


def _fail(message: str) -> None:
    stderr.print(Text("error: " + " ".join(message.split()), style="red"))


def _describe_error(err: BaseException) -> str:
    if unreachable(err):
        return f"the Temporal server at {_server_address()} is unreachable: {err}"
    if isinstance(err, RPCError):
        if err.status == RPCStatusCode.NOT_FOUND:
            return f"not found: {err.message}"
        return f"Temporal {err.status.name}: {err.message}"
    if isinstance(err, LatticeError):
        return str(err)
    text = f"{type(err).__name__}: {err}"
    if err.__cause__ is not None:
        text += f" ({type(err.__cause__).__name__}: {err.__cause__})"
    return text


def _server_address() -> str:
    """The server a command connects to: ``TEMPORAL_ADDRESS``, else the embedded one."""
    recorded = DevServer.recorded(lattice_home())
    return os.environ.get("TEMPORAL_ADDRESS") or (recorded.address if recorded else "?")


# Exit codes: a query's error result and other failures, usage errors (typer's own and an
# APP, AGENT or TEAM that cannot be loaded), a server that cannot be reached or was lost.
EXIT_FAILED, EXIT_USAGE, EXIT_NO_SERVER = 1, 2, 3


@contextlib.contextmanager
def _errors_as_exit(code: int = EXIT_USAGE) -> Iterator[None]:
    """Map errors to one red line on stderr and exit ``code`` (EXIT_NO_SERVER for a server
    that cannot be reached), Ctrl-C to exit code 130."""
    try:
        yield
    except typer.Exit:
        raise
    except (KeyboardInterrupt, asyncio.CancelledError):
        raise typer.Exit(130) from None
    except Exception as err:
        if os.environ.get("LATTICE_DEBUG"):
            raise
        _fail(_describe_error(err))
        lost = isinstance(err, ServerUnreachableError) or unreachable(err)
        raise typer.Exit(EXIT_NO_SERVER if lost else code) from None


def _execute(main: Callable[[], Coroutine[Any, Any, int]]) -> None:
    """Run a command's coroutine with ``asyncio.run``; its return value is the exit code.
    Its errors are failures of the command, not usage errors."""
    with _errors_as_exit(EXIT_FAILED):
        _configure_logging()
        code = asyncio.run(main())
    raise typer.Exit(code)


class _OneLineFormatter(logging.Formatter):
    """Log records as one line: an activity failing on every retry must not print a
    traceback each time (``LATTICE_DEBUG=1`` shows them)."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"{record.levelname.lower()} {record.name}: {record.getMessage()}"
        error = record.exc_info[1] if record.exc_info else None
        return f"{text}: {type(error).__name__}: {error}" if error is not None else text


def _configure_logging() -> None:
    """Temporal's logs (its core's included, which by default go to stdout) go to stderr, one
    line each, so stdout carries only what the command prints (``--json`` stays pure)."""
    logger = logging.getLogger("temporalio")
    if any(getattr(h, "lattice_cli", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    debug = bool(os.environ.get("LATTICE_DEBUG"))
    handler.setFormatter(
        logging.Formatter("%(levelname)s %(name)s: %(message)s") if debug else _OneLineFormatter()
    )
    handler.lattice_cli = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.propagate = False


@contextlib.contextmanager
def _on_signals(handler: Callable[[int], None], *signals: int) -> Iterator[None]:
    """Call ``handler(signum)`` on the running loop for ``signals`` (where supported)."""
    loop = asyncio.get_running_loop()
    installed = []
    for signum in signals:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, handler, signum)
            installed.append(signum)
    try:
        yield
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


def _target(client: Client) -> str:
    return f"{client.service_client.config.target_host} (namespace {client.namespace})"


async def _serve_agents(
    client: Client,
    agents: dict[str, Agent],
    shutdown_s: float,
    tool_threads: int = DEFAULT_TOOL_THREADS,
    watch: ServerWatch | None = None,
) -> int:
    """Run one worker per task queue for ``agents`` until SIGINT/SIGTERM, then shut down;
    or until ``watch`` has seen the server unreachable for its reconnect limit (exit 3)."""
    workers = create_workers(
        client,
        agents.values(),
        tool_threads=tool_threads,
        graceful_shutdown_timeout=timedelta(seconds=shutdown_s),
    )
    stdout.print(
        f"serving {len(agents)} agent{'s' if len(agents) != 1 else ''} on {_target(client)}"
    )
    for attr, agent in agents.items():
        tools = ", ".join(t.name for t in agent.tools) or "no tools"
        stdout.print(
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

    with _on_signals(on_signal, signal.SIGINT, signal.SIGTERM):
        tasks = [asyncio.create_task(w.run()) for w in workers]
        waiter = asyncio.create_task(stop.wait())
        # Temporal retries the polls of a server that went away forever: give up on the limit
        lost = asyncio.create_task((watch.lost if watch else asyncio.Event()).wait())
        # runs of these agents whose inline process died are served here too
        adopter = asyncio.create_task(
            adopt_orphans(client, agents.values(), lambda said: stderr.print(Text(said, "yellow")))
        )
        stdout.print("ready · Ctrl-C to stop", style="green")
        await asyncio.wait([*tasks, waiter, lost], return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            stderr.print(Text("shutting down workers…", style="dim"))
        adopter.cancel()
        with contextlib.suppress(BaseException):
            await adopter
        pending = [w.shutdown() for w, t in zip(workers, tasks, strict=True) if not t.done()]
        await asyncio.gather(*pending, return_exceptions=True)
        waiter.cancel()
        lost.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    if watch is not None and watch.lost.is_set():
        raise watch.error()
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise result
    stderr.print(Text("workers stopped", style="dim"))
    return 0


# ---------------------------------------------------------------------------- commands


@app.command()
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
    with _errors_as_exit():
        agents = app_agents(load_app(app_ref)) if app_ref else None
    _execute(lambda: _dev(agents, port, ui, ui_port, shutdown_timeout))


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
        stderr.print(Text(f"--port ignored: the running server listens on {server.port}", "dim"))
    if os.environ.get("TEMPORAL_ADDRESS") and agents:
        stderr.print(Text("TEMPORAL_ADDRESS is ignored by `lattice dev`", style="yellow"))
    if agents is None:
        return 0
    runtime = await Runtime.connect(server.address, inline_workers=False, quiet=True)
    runtime.watch.home = home  # the server is ours: started again if it dies
    try:
        return await _serve_agents(runtime.client, agents, shutdown_s, watch=runtime.watch)
    finally:
        await runtime.close()


def _print_server(server: DevServer, state: str) -> None:
    stdout.print(Text(f"Temporal dev server {state} (pid {server.pid})", style="bold"))
    stdout.print(Text.assemble(("  gRPC  ", "dim"), server.address))
    stdout.print(Text.assemble(("  UI    ", "dim"), server.ui_url if server.ui_port else "off"))
    stdout.print(Text.assemble(("  data  ", "dim"), server.home))


@app.command()
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
) -> None:
    """Run workers for the agents of APP (one per task queue) until SIGINT/SIGTERM.

    APP lists its agents in a module attribute `agents`, or defines them at module level.
    Queries started with `lattice run` or `agent.query()` from anywhere run here.
    """
    with _errors_as_exit():
        agents = app_agents(load_app(app_ref))
    _execute(lambda: _worker(agents, shutdown_timeout, tool_threads))


async def _worker(agents: dict[str, Agent], shutdown_s: float, tool_threads: int) -> int:
    runtime = await Runtime.connect(inline_workers=False)
    try:
        return await _serve_agents(
            runtime.client, agents, shutdown_s, tool_threads, watch=runtime.watch
        )
    finally:
        await runtime.close()


@app.command()
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
) -> None:
    """Run one query and watch it: streamed text, tool calls, tool results, the result.

    Exit code 0 on success, 1 when the result is an error, 3 when the Temporal server
    cannot be reached or was lost (retried for LATTICE_RECONNECT_S, 600 s by default),
    130 after Ctrl-C (which interrupts the query; a second Ctrl-C leaves without waiting).
    """
    if prompt == "-":
        prompt = sys.stdin.read()
    with _errors_as_exit():
        agent = resolve_agent(target)
    _execute(lambda: _run(agent, prompt, json_lines=json_lines, stream=not no_stream, serve=serve))


async def _run(
    agent: Agent | Team, prompt: str, *, json_lines: bool, stream: bool, serve: bool | None
) -> int:
    runtime = await Runtime.connect(inline_workers=False)
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
            stderr.print(
                Text(f"no worker polls {queue}; serving {agent.name} in this process", "dim")
            )
    runtime.inline_workers = serve
    messages = agent.query(prompt, runtime=runtime, stream=stream)
    renderer = Renderer(stdout, json_lines=json_lines)
    main_task = asyncio.current_task()
    interrupted: list[int] = []

    def on_signal(signum: int) -> None:
        if interrupted and main_task is not None:
            main_task.cancel()  # second Ctrl-C: leave now (the run is interrupted on exit)
            return
        interrupted.append(signum)
        stderr.print(Text("interrupting… (Ctrl-C again to leave now)", style="yellow"))
        agent.interrupt()

    hint = None if serve else asyncio.create_task(_worker_hint(queue))
    result: ResultMessage | None = None
    with _on_signals(on_signal, signal.SIGINT, signal.SIGTERM):
        try:
            async for message in messages:
                if hint is not None:
                    hint.cancel()
                    hint = None
                if json_lines and isinstance(message, SystemMessage) and message.subtype == "init":
                    where = f"workflow {message.workflow_id} · run {message.run_id}"
                    stderr.print(Text(where, style="dim"))
                renderer.show(message)
                if isinstance(message, ResultMessage):
                    result = message
        finally:
            if hint is not None:
                hint.cancel()
            await _aclose(messages)
    if interrupted:
        return 128 + interrupted[0]
    if result is None:  # never silent: say why there is no result
        _fail(f"the messages of {agent.name}'s run ended without its result")
    return EXIT_FAILED if result is None or result.is_error else 0


async def _worker_hint(task_queue: str) -> None:
    await asyncio.sleep(WORKER_HINT_AFTER_S)
    stderr.print(
        Text(
            f"still waiting: is a worker running for task queue {task_queue}? "
            "(start one with `lattice worker APP`)",
            style="yellow",
        )
    )


async def _aclose(messages: AsyncIterator[Any]) -> None:
    close = getattr(messages, "aclose", None)
    if close is not None:
        await close()


@app.command()
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
) -> None:
    """Interrupt a running query: it ends with the result subtype `interrupted`.

    Exit code 1 when no worker serves the run (nothing would happen until it is adopted)
    and --force was not given, or when there is no such run.
    """
    _execute(lambda: _interrupt(workflow_id, force))


async def _interrupt(workflow_id: str, force: bool) -> int:
    runtime = await Runtime.connect(inline_workers=False)
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
            _fail(
                f"{orphan_hint(state)}. No interrupt was sent: nothing happens to it until it "
                "is adopted."
            )
            return 1
        else:
            stderr.print(Text(f"no worker serves {workflow_id}: ending it from here…", "dim"))
            result = await runtime.end_orphan(workflow_id)
            if result is None:
                _fail(f"{workflow_id} did not end within 60 s: terminated (its turns are lost)")
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
    _fail(f"no run with id {workflow_id!r} (see `lattice runs`)")
    return None


@app.command()
def attach(
    workflow_id: Annotated[str, typer.Argument(help="The workflow id of the run.")],
    json_lines: Annotated[
        bool, typer.Option("--json", help="One JSON object per message on stdout, nothing else.")
    ] = False,
) -> None:
    """Print the messages of a run from its start, following it until its result."""
    _execute(lambda: _attach(workflow_id, json_lines))


async def _attach(workflow_id: str, json_lines: bool) -> int:
    runtime = await Runtime.connect(inline_workers=False)
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
        renderer = Renderer(stdout, workflow_id=workflow_id, json_lines=json_lines)
        result: ResultMessage | None = None
        # A run in progress is followed live; a closed one is rebuilt from its history.
        async for message in runtime.durable_messages(workflow_id):
            renderer.show(message)
            if isinstance(message, ResultMessage):
                result = message
        return 1 if result is None or result.is_error else 0
    finally:
        await runtime.close()


team_app = typer.Typer(
    help="A team's mailbox: send a message, drain routed work, show status and inboxes.",
    no_args_is_help=True,
)
app.add_typer(team_app, name="team")

TeamTarget = Annotated[str, typer.Argument(help="APP:TEAM, e.g. myapp.teams:engineering")]


def _resolve_team(target: str) -> Any:
    from .._team import Team

    module, sep, name = target.rpartition(":")
    if not sep or not module or not name:
        raise LatticeError(f"expected APP:TEAM, got {target!r}")
    team = getattr(load_app(module), name, None)
    if not isinstance(team, Team):
        raise LatticeError(f"{target!r} is not a team (create_team(...)) in that app")
    return team


@team_app.command("send")
def team_send(
    target: TeamTarget,
    to: Annotated[str, typer.Argument(help="A member name (or mailbox id).")],
    body: Annotated[str, typer.Argument(help="The message.")],
    sender: Annotated[str, typer.Option("--from", help="Sender mailbox or member.")] = "user",
    subject: Annotated[str | None, typer.Option(help="A subject line.")] = None,
) -> None:
    """Put a message in a member's mailbox."""
    with _errors_as_exit():
        team = _resolve_team(target)

    async def main() -> int:
        sent = await team.send(to, body, from_=sender, subject=subject)
        stdout.print(f"sent {sent.id} to {sent.to_mailbox}")
        return 0

    _execute(main)


@team_app.command("drain")
def team_drain(
    target: TeamTarget,
    max_rounds: Annotated[int, typer.Option(help="Rounds over the members.")] = 5,
    max_messages: Annotated[int, typer.Option(help="Messages to process at most.")] = 20,
) -> None:
    """Let each member work on the pending messages of its own mailbox (never re-routes)."""
    with _errors_as_exit():
        team = _resolve_team(target)

    async def main() -> int:
        result = await team.drain(max_rounds=max_rounds, max_messages=max_messages)
        failed = {m.id for m in result.failed}
        for m in result.processed:
            state = "failed" if m.id in failed else "handled"
            stdout.print(f"{state} {m.id} in {m.to_mailbox}: {_one_line(m.body, 80)}")
        stdout.print(f"{len(result.processed)} message(s) in {result.rounds} round(s)")
        return 1 if failed else 0

    _execute(main)


@team_app.command("status")
def team_status(target: TeamTarget) -> None:
    """Message counts per mailbox and status."""
    with _errors_as_exit():
        team = _resolve_team(target)

    async def main() -> int:
        table = Table(box=box.SIMPLE)
        for column in ("mailbox", "pending", "processing", "done", "failed", "cancelled"):
            table.add_column(column)
        for name in ["lead", *(m.name for m in team.members)]:
            messages = await team.mailbox.inbox(team.mailbox_id(name))
            counts = [
                sum(m.status == s for m in messages)
                for s in ("pending", "processing", "done", "failed", "cancelled")
            ]
            table.add_row(team.mailbox_id(name), *map(str, counts))
        stdout.print(table)
        return 0

    _execute(main)


@team_app.command("inbox")
def team_inbox(
    target: TeamTarget,
    member: Annotated[str, typer.Argument(help="A member name, or lead.")],
    status: Annotated[str | None, typer.Option(help="Only messages in this status.")] = None,
) -> None:
    """The messages of one member's mailbox."""
    with _errors_as_exit():
        team = _resolve_team(target)

    async def main() -> int:
        for m in await team.mailbox.inbox(team.mailbox_id(member), status=status):
            stdout.print(
                f"{m.id} {m.status:<10} {m.kind:<8} from {m.from_mailbox}: {_one_line(m.body, 80)}"
            )
        return 0

    _execute(main)


@app.command()
def runs(
    limit: Annotated[int, typer.Option(help="How many runs to list, newest first.")] = 20,
) -> None:
    """List recent agent runs (AgentWorkflow executions)."""
    _execute(lambda: _runs(limit))


_STATUS_STYLE = {
    WorkflowExecutionStatus.RUNNING: "yellow",
    WorkflowExecutionStatus.COMPLETED: "green",
    WorkflowExecutionStatus.CONTINUED_AS_NEW: "cyan",
}


async def _runs(limit: int) -> int:
    runtime = await Runtime.connect(inline_workers=False)
    try:
        executions = await runtime.list_runs(limit)
        summaries = await asyncio.gather(
            *(_summary(runtime.client, e.id, e.run_id) for e in executions)
        )
        # a running run that no worker serves (its process died) says so
        running = {e.task_queue for e in executions if e.status == WorkflowExecutionStatus.RUNNING}
        served = {q: await has_live_worker(runtime.client, q) for q in running}
    finally:
        await runtime.close()
    if not executions:
        stdout.print("no agent runs yet")
        return 0
    table = Table(
        title=f"agent runs on {_target(runtime.client)}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("workflow id", no_wrap=True, min_width=max(len(e.id) for e in executions))
    table.add_column("status", no_wrap=True, min_width=9)
    table.add_column("started", no_wrap=True, min_width=14)
    table.add_column("took", justify="right", no_wrap=True, min_width=6)
    table.add_column("summary", overflow="fold", ratio=1, min_width=12)
    for execution, summary in zip(executions, summaries, strict=True):
        status = execution.status.name if execution.status else "?"
        if served.get(execution.task_queue) is False and status == "RUNNING":
            # a shared queue's run waits for `lattice worker` (restarting, say): not orphaned
            status = "ORPHANED" if owner_of(execution.task_queue) else "NO WORKER"
        end = execution.close_time or datetime.now(UTC)
        table.add_row(
            execution.id,
            Text(status.lower(), style=_STATUS_STYLE.get(execution.status, "red")),
            execution.start_time.astimezone().strftime("%m-%d %H:%M:%S"),
            _duration(end - execution.start_time),
            summary or "",
        )
    # Never crop: a narrow terminal wraps the lines, a pipe gets them whole (grep-able).
    measured = Measurement.get(stdout, stdout.options.update_width(10_000), table)
    width = max(stdout.width, measured.minimum if stdout.is_terminal else measured.maximum)
    Console(width=width, emoji=False, highlight=False).print(table)
    return 0


async def _summary(client: Client, workflow_id: str, run_id: str) -> str | None:
    try:
        description = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
        return await description.static_summary()
    except RPCError:
        return None


def _duration(delta: timedelta) -> str:
    seconds = max(delta.total_seconds(), 0.0)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


@server_app.command("status")
def server_status() -> None:
    """Report the embedded server under LATTICE_HOME (exit code 1 when it is not running)."""
    server = DevServer.running(lattice_home())
    if server is None:
        stdout.print(f"no embedded Temporal server is running (home {lattice_home()})")
        raise typer.Exit(1)
    _print_server(server, "running")


@server_app.command("stop")
def server_stop() -> None:
    """Stop the embedded server under LATTICE_HOME (its data stays)."""
    server = DevServer.running(lattice_home())
    if server is None:
        stdout.print(f"no embedded Temporal server is running (home {lattice_home()})")
        return
    server.stop()
    stdout.print(f"stopped the embedded Temporal server (pid {server.pid}, {server.address})")


def main(argv: Iterable[str] | None = None) -> None:
    """Entry point of the ``lattice`` script."""
    app(args=list(argv) if argv is not None else None, prog_name="lattice")


if __name__ == "__main__":
    main()
