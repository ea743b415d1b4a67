"""Approvals: ``lattice approvals``, ``approve`` and ``deny``."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from .._approvals import check_decision
from .._errors import OptionError
from ..client._approvals import decide, list_pending_approvals
from ..client._connection import TemporalConnection
from ..client._runtime import Runtime
from ._connect import connection_options
from ._plumbing import errors_as_exit, execute, stdout


@connection_options
def approvals(
    workflow_id: Annotated[
        str | None,
        typer.Argument(help="Only this run's requests (default: every running query's)."),
    ] = None,
    json_lines: Annotated[
        bool, typer.Option("--json", help="One JSON object per request on stdout.")
    ] = False,
    *,
    connection: TemporalConnection,
) -> None:
    """List the tool calls waiting for a person's approval, oldest first."""
    execute(lambda: _approvals(connection, workflow_id, json_lines))


async def _approvals(
    connection: TemporalConnection, workflow_id: str | None, json_lines: bool
) -> int:
    runtime = await Runtime.connect(connection=connection, inline_workers=False)
    try:
        pending = await list_pending_approvals(workflow_id, runtime=runtime)
    finally:
        await runtime.close()
    if json_lines:
        for p in pending:
            stdout.print(p.model_dump_json(), soft_wrap=True, markup=False)
        return 0
    if not pending:
        stdout.print("no tool calls are waiting for approval")
        return 0
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("workflow id", "approval id", "agent", "tool", "input", "waiting since"):
        table.add_column(column, overflow="fold")
    for p in pending:
        table.add_row(
            p.workflow_id,
            p.approval_id,
            p.agent,
            p.tool_name,
            json.dumps(p.tool_input, ensure_ascii=False),
            p.requested_at.astimezone().strftime("%m-%d %H:%M:%S"),
        )
    stdout.print(table)
    return 0


@connection_options
def approve(
    workflow_id: Annotated[str, typer.Argument(help="The run that waits.")],
    approval_id: Annotated[str, typer.Argument(help="Its approval id (see `lattice approvals`).")],
    updated_input: Annotated[
        str | None,
        typer.Option(
            "--input", help="The tool's input to run with instead of the model's (a JSON object)."
        ),
    ] = None,
    *,
    connection: TemporalConnection,
) -> None:
    """Allow a waiting tool call: it runs, and the query continues.

    Exit code 1 when the decision cannot be applied (no such waiting request, already
    decided, an input the tool's schema refuses): then nothing changed.
    """
    with errors_as_exit():
        given = _json_object(updated_input) if updated_input is not None else None
        decision = check_decision(approval_id, "allow", None, given)
    execute(lambda: _decide(connection, workflow_id, decision, "allowed"))


@connection_options
def deny(
    workflow_id: Annotated[str, typer.Argument(help="The run that waits.")],
    approval_id: Annotated[str, typer.Argument(help="Its approval id (see `lattice approvals`).")],
    message: Annotated[
        str, typer.Option("--message", "-m", help="Why: the model gets it as the tool's result.")
    ],
    *,
    connection: TemporalConnection,
) -> None:
    """Deny a waiting tool call: the model gets an error tool_result with the message.

    Exit code 1 when the decision cannot be applied (see `lattice approve`).
    """
    with errors_as_exit():
        decision = check_decision(approval_id, "deny", message, None)
    execute(lambda: _decide(connection, workflow_id, decision, "denied"))


async def _decide(
    connection: TemporalConnection, workflow_id: str, decision: Any, done: str
) -> int:
    runtime = await Runtime.connect(connection=connection, inline_workers=False)
    try:
        await decide(runtime.client, workflow_id, decision)
    finally:
        await runtime.close()
    stdout.print(f"{decision.approval_id} of {workflow_id}: {done}")
    return 0


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as err:
        raise OptionError(f"--input must be a JSON object: {err}") from None
    if not isinstance(value, dict):
        raise OptionError(f"--input must be a JSON object; got {type(value).__name__}")
    return value
