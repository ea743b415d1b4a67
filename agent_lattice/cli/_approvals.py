"""Approvals: ``lattice approvals``, ``approve`` and ``deny``.

A decision names its approver (``--as NAME``); without one it is this command's Temporal
client identity, ``lattice-cli:USER@HOST`` (as the ``temporal`` CLI names itself
``temporal-cli:USER@HOST``), which Temporal records with the update too.
"""

from __future__ import annotations

import getpass
import json
import socket
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, TypeVar

import typer
from rich import box
from rich.table import Table

from .._approvals import ApprovalDecision, PendingApproval, ResolvedApproval, check_decision
from .._errors import OptionError
from ..client._approvals import decide, list_pending_approvals, list_resolved_approvals
from ..client._connection import TemporalConnection
from ..client._runtime import Runtime
from ._connect import connection_options
from ._plumbing import errors_as_exit, execute, stdout

AS = typer.Option(
    "--as",
    metavar="NAME",
    help="Who decides, recorded with the decision and checked against the tool's or agent's "
    "approvers (default: this command's identity, lattice-cli:USER@HOST).",
)


@connection_options
def approvals(
    workflow_id: Annotated[
        str | None,
        typer.Argument(help="Only this run's requests (default: every running query's)."),
    ] = None,
    json_lines: Annotated[
        bool, typer.Option("--json", help="One JSON object per request on stdout.")
    ] = False,
    history: Annotated[
        bool,
        typer.Option(
            "--history",
            help="How requests ended instead: decision, approver, when (a closed run's too "
            "when WORKFLOW_ID names it).",
        ),
    ] = False,
    *,
    connection: TemporalConnection,
) -> None:
    """List the tool calls waiting for a person's approval, oldest first; with --history,
    how they ended and who decided, oldest decision first."""
    execute(lambda: _approvals(connection, workflow_id, json_lines, history))


async def _approvals(
    connection: TemporalConnection, workflow_id: str | None, json_lines: bool, history: bool
) -> int:
    runtime = await Runtime.connect(connection=connection, inline_workers=False)
    try:
        if history:
            ended = await list_resolved_approvals(workflow_id, runtime=runtime)
            _listing(ended, json_lines, "no approval requests have ended", ENDED, _ended_row)
        else:
            pending = await list_pending_approvals(workflow_id, runtime=runtime)
            empty = "no tool calls are waiting for approval"
            _listing(pending, json_lines, empty, PENDING, _pending_row)
    finally:
        await runtime.close()
    return 0


PENDING = ("workflow id", "approval id", "agent", "tool", "input", "waiting since", "approvers")
ENDED = ("workflow id", "approval id", "agent", "tool", "decision", "by", "at")
R = TypeVar("R", PendingApproval, ResolvedApproval)


def _listing(
    items: list[R],
    json_lines: bool,
    empty: str,
    columns: tuple[str, ...],
    row: Callable[[R], list[str]],
) -> None:
    """One JSON object a line, or a table (``empty`` when there is nothing)."""
    if json_lines:
        for item in items:
            stdout.print(item.model_dump_json(), soft_wrap=True, markup=False)
        return
    if not items:
        stdout.print(empty)
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for item in items:
        table.add_row(*row(item))
    stdout.print(table, markup=False)


def _pending_row(p: PendingApproval) -> list[str]:
    approvers = ", ".join(p.approvers) if p.approvers else "anyone"
    tool_input = json.dumps(p.tool_input, ensure_ascii=False)
    head = [p.workflow_id, p.approval_id, p.agent, p.tool_name]
    return [*head, tool_input, _when(p.requested_at), approvers]


def _ended_row(r: ResolvedApproval) -> list[str]:
    decision = f"{r.behavior} (edited input)" if r.edited else r.behavior
    head = [r.workflow_id, r.approval_id, r.agent, r.tool_name]
    return [*head, decision, r.approver or "-", _when(r.decided_at)]


def _when(at: datetime) -> str:
    return at.astimezone().strftime("%m-%d %H:%M:%S")


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
    approver: Annotated[str | None, AS] = None,
    *,
    connection: TemporalConnection,
) -> None:
    """Allow a waiting tool call: it runs, and the query continues.

    Exit code 1 when the decision cannot be applied (no such waiting request, already
    decided, an approver the request's approvers do not list, an input the tool's schema
    refuses): then nothing changed.
    """
    with errors_as_exit():
        given = _json_object(updated_input) if updated_input is not None else None
        decision = check_decision(approval_id, "allow", None, given, approver)
    execute(lambda: _decide(connection, workflow_id, decision, "allowed"))


@connection_options
def deny(
    workflow_id: Annotated[str, typer.Argument(help="The run that waits.")],
    approval_id: Annotated[str, typer.Argument(help="Its approval id (see `lattice approvals`).")],
    message: Annotated[
        str, typer.Option("--message", "-m", help="Why: the model gets it as the tool's result.")
    ],
    approver: Annotated[str | None, AS] = None,
    *,
    connection: TemporalConnection,
) -> None:
    """Deny a waiting tool call: the model gets an error tool_result with the message.

    Exit code 1 when the decision cannot be applied (see `lattice approve`).
    """
    with errors_as_exit():
        decision = check_decision(approval_id, "deny", message, None, approver)
    execute(lambda: _decide(connection, workflow_id, decision, "denied"))


async def _decide(
    connection: TemporalConnection, workflow_id: str, decision: ApprovalDecision, done: str
) -> int:
    runtime = await Runtime.connect(
        connection=connection, inline_workers=False, identity=cli_identity()
    )
    try:
        await decide(runtime.client, workflow_id, decision)
    finally:
        await runtime.close()
    by = decision.approver or runtime.client.identity
    stdout.print(f"{decision.approval_id} of {workflow_id}: {done} by {by}", markup=False)
    return 0


def cli_identity() -> str | None:
    """``lattice-cli:USER@HOST``, this command's Temporal identity (None: no user name to
    be found, the SDK's default then)."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name, no passwd entry (a bare container)
        return None
    return f"lattice-cli:{user}@{socket.gethostname()}"


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as err:
        raise OptionError(f"--input must be a JSON object: {err}") from None
    if not isinstance(value, dict):
        raise OptionError(f"--input must be a JSON object; got {type(value).__name__}")
    return value
