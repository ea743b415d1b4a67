"""Finding runs: ``lattice runs`` (filters on the Lattice search attributes, outcomes, cost,
``--json``) and ``lattice setup`` (registers those attributes on a server).

``lattice runs`` is a group that runs its callback when no command follows, so every
``lattice runs [options]`` lists runs as it did before it had commands; ``lattice runs
export`` (``_histories``) registers itself on :data:`runs_app`."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, get_args

import typer
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowFailureError,
)
from temporalio.service import RPCError, RPCStatusCode

from .. import _settings
from .._errors import ConfigurationError
from .._messages import ResultSubtype
from ..client._closed import output_of_close
from ..client._connection import TemporalConnection
from ..client._runtime import Runtime
from ..client._server import DevServer
from ..client._visibility import register_attributes
from ..worker._encryption import UnknownEncryptionKeyError
from ..worker._pollers import owner_of
from ..worker._pollers import queue_served as has_live_worker
from ..workflows._types import AgentRunOutput
from ..workflows._visibility import (
    AGENT,
    COST_USD,
    INPUT_TOKENS,
    MODEL,
    OUTCOME,
    OUTPUT_TOKENS,
    PROMPT_MEMO,
    SEARCH_ATTRIBUTES,
    SESSION,
    compact_tokens,
)
from ._connect import connection_options
from ._plumbing import (
    EXIT_FAILED,
    EXIT_USAGE,
    HELP_OPTIONS,
    Group,
    client_target,
    execute,
    fail,
    stderr,
    stdout,
)

__all__ = ["connect_running", "runs", "runs_app", "setup"]


runs_app = typer.Typer(
    cls=Group,
    invoke_without_command=True,
    no_args_is_help=False,
    subcommand_metavar="[COMMAND [ARGS]...]",
    context_settings=HELP_OPTIONS,
)


@connection_options
def runs(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(help="How many runs to list, newest first.")] = 20,
    agent: Annotated[str | None, typer.Option(help="Only this agent's runs.")] = None,
    session: Annotated[str | None, typer.Option(help="Only this session's runs.")] = None,
    outcome: Annotated[
        ResultSubtype | None,
        typer.Option(
            metavar="OUTCOME",
            help=f"Only runs that ended so: {', '.join(get_args(ResultSubtype))}.",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(help="Only runs started in the last 30m, 2h, 7d… or since an ISO date."),
    ] = None,
    query: Annotated[
        str | None,
        typer.Option(
            help="A Temporal visibility query they must match too, e.g. 'LatticeCostUsd > 0.5'."
        ),
    ] = None,
    json_lines: Annotated[
        bool, typer.Option("--json", help="One JSON object per run on stdout, nothing else.")
    ] = False,
    *,
    connection: TemporalConnection,
) -> None:
    """List recent agent runs (AgentWorkflow executions) with their outcome, tokens and cost;
    `lattice runs export` saves their histories for `lattice replay`.

    Connects to the configured server (--address, TEMPORAL_ADDRESS, a profile) or to the
    embedded server if it is running; it never starts one (with none running it says so: there are no runs to list).
    """
    if ctx.invoked_subcommand is not None:
        return  # `lattice runs export ...`: the command does the work
    try:
        where = _filters(agent, session, outcome, since, query)
    except ValueError as err:
        fail(str(err))
        raise typer.Exit(EXIT_USAGE) from None
    execute(lambda: _runs(connection, limit, where, json_lines))


runs_app.callback()(runs)


@connection_options
def setup(*, connection: TemporalConnection) -> None:
    """Register the Lattice search attributes (LatticeAgent, LatticeOutcome, LatticeCostUsd,
    …) on the server (the configured one, or the embedded one, which has them already), so
    runs can be found by agent, session, model, outcome, tokens and cost. Idempotent."""
    execute(lambda: _setup(connection))


async def _setup(connection: TemporalConnection) -> int:
    runtime = await Runtime.connect(connection=connection, inline_workers=False)
    try:
        added = await register_attributes(runtime.client)
    except RPCError as err:
        fail(
            f"could not register the search attributes on {client_target(runtime.client)}: "
            f"{err.message} (an attribute of the same name with another type cannot be "
            "changed; the types wanted: "
            + ", ".join(f"{n} {t}" for n, t in SEARCH_ATTRIBUTES.items())
            + ")"
        )
        return EXIT_FAILED
    finally:
        await runtime.close()
    where = client_target(runtime.client)
    if not added:
        stdout.print(f"the Lattice search attributes are registered on {where} already")
    for name in added:
        stdout.print(f"registered {name} ({SEARCH_ATTRIBUTES[name]}) on {where}")
    return 0


_SINCE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def _filters(
    agent: str | None,
    session: str | None,
    outcome: str | None,
    since: str | None,
    query: str | None,
) -> str | None:
    """The options as one visibility query (None: no filter)."""
    parts: list[str] = []
    for key, value in ((AGENT, agent), (SESSION, session), (OUTCOME, outcome)):
        if value is not None:
            if '"' in value or "\\" in value:
                raise ValueError(f"--{key.name[7:].lower()} cannot contain quotes: {value!r}")
            parts.append(f'{key.name} = "{value}"')
    if since is not None:
        parts.append(f'StartTime > "{_since(since).isoformat().replace("+00:00", "Z")}"')
    if query:
        parts.append(f"({query})")
    return " AND ".join(parts) or None


def _since(value: str) -> datetime:
    match = _SINCE.match(value.strip())
    if match:
        amount, unit = float(match[1]), _UNITS[match[2]]
        return datetime.now(UTC) - timedelta(**{unit: amount})
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"--since takes a duration (30m, 2h, 7d) or an ISO date (2025-06-01); got {value!r}"
        ) from None
    return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)


async def connect_running(connection: TemporalConnection) -> Runtime | None:
    """The configured server, or the embedded one if it runs; None when neither."""
    if connection.address is None:
        server = DevServer.running(_settings.lattice_home())
        if server is None:
            return None
        connection = connection.embedded(server.address)
    return await Runtime.connect(connection=connection, inline_workers=False)


async def _runs(
    connection: TemporalConnection, limit: int, where: str | None, json_lines: bool
) -> int:
    runtime = await connect_running(connection)
    if runtime is None:
        stderr.print(
            Text(
                "no Temporal server is running: none is configured (--address, "
                "TEMPORAL_ADDRESS, a profile) and the embedded "
                f"server under {_settings.lattice_home()} is not started (`lattice dev` or any "
                "query starts it), so there are no runs to list",
                "yellow",
            )
        )
        return 0
    try:
        try:
            executions = await runtime.list_runs(limit, where)
        except RPCError as err:
            if err.status == RPCStatusCode.INVALID_ARGUMENT and "Lattice" in (where or ""):
                raise ConfigurationError(
                    f"{err.message}: the server may lack the Lattice search attributes; "
                    "`lattice setup` registers them"
                ) from None
            raise
        rows = await asyncio.gather(*(_row(runtime.client, e) for e in executions))
        # a running run that no worker serves (its process died) says so
        running = {e.task_queue for e in executions if e.status == WorkflowExecutionStatus.RUNNING}
        served = {q: await has_live_worker(runtime.client, q) for q in running}
    finally:
        await runtime.close()
    for execution, row in zip(executions, rows, strict=True):
        if served.get(execution.task_queue) is False and row["status"] == "running":
            # a shared queue's run waits for `lattice worker` (restarting, say): not orphaned
            row["status"] = "orphaned" if owner_of(execution.task_queue) else "no worker"
    if json_lines:
        for row in rows:
            stdout.print(json.dumps(row, ensure_ascii=False), soft_wrap=True, markup=False)
        return 0
    if not rows:
        stdout.print("no agent runs match" if where else "no agent runs yet")
        return 0
    _print_table(rows, f"agent runs on {client_target(runtime.client)}")
    return 0


async def _row(client: Client, execution: WorkflowExecution) -> dict[str, Any]:
    """One run as ``lattice runs`` shows it: from its search attributes, memo and summary;
    a run without the attributes (a server without them, an older run) from its result."""
    attributes = execution.typed_search_attributes
    status = execution.status.name.lower() if execution.status else "?"
    row: dict[str, Any] = {
        "workflow_id": execution.id,
        "run_id": execution.run_id,
        "status": status,
        "outcome": attributes.get(OUTCOME),
        "agent": attributes.get(AGENT),
        "session": attributes.get(SESSION),
        "model": attributes.get(MODEL),
        "input_tokens": attributes.get(INPUT_TOKENS),
        "output_tokens": attributes.get(OUTPUT_TOKENS),
        "cost_usd": attributes.get(COST_USD),
        "started": execution.start_time.isoformat(),
        "closed": execution.close_time.isoformat() if execution.close_time else None,
        "prompt": None,
        "summary": None,
    }
    handle = client.get_workflow_handle(
        execution.id, run_id=execution.run_id, result_type=AgentRunOutput
    )
    try:
        row["prompt"] = (await execution.memo()).get(PROMPT_MEMO)
        row["summary"] = await (await handle.describe()).static_summary()
        if row["outcome"] is None and status in _ENDED:
            try:
                output = await handle.result(follow_runs=False)
            except WorkflowFailureError as err:  # Failed with an error result, or Canceled
                output = await output_of_close(client, execution.id, err, execution.run_id)
            if output is None:
                return row
            result = output.result
            usage = result.usage
            row["outcome"], row["cost_usd"] = result.subtype, result.total_cost_usd
            row["input_tokens"] = usage.total_input_tokens
            row["output_tokens"] = usage.output_tokens
    except UnknownEncryptionKeyError as err:  # the run is listed; its text needs that key
        row["prompt"] = f"(encrypted with key {err.key_id!r}, not given)"
    except (RPCError, ValueError, TypeError):
        pass  # shown without what could not be read
    return row


# a run's status says its outcome: an error result fails the workflow, a cancel request
# interrupts it (see workflows/_outcomes); a run that ended so has its output
_ENDED = ("completed", "failed", "canceled")
_STATUS_STYLE = {
    "running": "yellow",
    "completed": "green",
    "continued_as_new": "cyan",
    "canceled": "yellow",
}


def _print_table(rows: list[dict[str, Any]], title: str) -> None:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column(
        "workflow id", no_wrap=True, min_width=max(len(r["workflow_id"]) for r in rows)
    )
    table.add_column("status", no_wrap=True, min_width=9)
    table.add_column("outcome", no_wrap=True, min_width=7)
    table.add_column("started", no_wrap=True, min_width=14)
    table.add_column("took", justify="right", no_wrap=True, min_width=6)
    table.add_column("tokens", justify="right", no_wrap=True)
    table.add_column("cost", justify="right", no_wrap=True)
    table.add_column("summary", overflow="fold", ratio=1, min_width=12)
    for row in rows:
        started = datetime.fromisoformat(row["started"])
        end = datetime.fromisoformat(row["closed"]) if row["closed"] else datetime.now(UTC)
        outcome = row["outcome"] or ""
        tokens = (row["input_tokens"] or 0) + (row["output_tokens"] or 0)
        table.add_row(
            row["workflow_id"],
            Text(row["status"], style=_STATUS_STYLE.get(row["status"], "red")),
            Text(outcome, style="red" if outcome.startswith("error") else ""),
            started.astimezone().strftime("%m-%d %H:%M:%S"),
            _duration(end - started),
            compact_tokens(tokens).removesuffix(" tokens")
            if row["input_tokens"] is not None
            else "",
            f"${row['cost_usd']:.4f}" if row["cost_usd"] is not None else "",
            " · ".join(x for x in (row["summary"], row["prompt"]) if x),
        )
    # Never crop: a narrow terminal wraps the lines, a pipe gets them whole (grep-able).
    measured = Measurement.get(stdout, stdout.options.update_width(10_000), table)
    width = max(stdout.width, measured.minimum if stdout.is_terminal else measured.maximum)
    Console(width=width, emoji=False, highlight=False).print(table)


def _duration(delta: timedelta) -> str:
    seconds = max(delta.total_seconds(), 0.0)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
