"""``lattice team``: a team's mailbox from the shell."""

from __future__ import annotations

from typing import Annotated, Any, get_args

import typer
from rich import box
from rich.table import Table

from .._errors import LatticeError
from ..client._connection import TemporalConnection
from ..client._runtime import Runtime
from ..teams._mailbox import MessageStatus
from ..worker._worker import load_app
from ._connect import connection_options, default_connection
from ._plumbing import (
    HELP_OPTIONS,
    Command,
    Group,
    errors_as_exit,
    execute,
    print_json,
    stdout,
    waiting,
)
from ._render import one_line

team_app = typer.Typer(
    cls=Group,
    help="A team's mailbox: send a message, drain routed work, show status and inboxes.",
    no_args_is_help=True,
    context_settings=HELP_OPTIONS,
)

TeamTarget = Annotated[str, typer.Argument(help="APP:TEAM, e.g. examples/app.py:team")]
Json = Annotated[bool, typer.Option("--json", help="JSON on stdout, nothing else.")]
STATUSES: tuple[MessageStatus, ...] = get_args(MessageStatus)


def _resolve_team(target: str) -> Any:
    from ..teams._team import Team

    module, sep, name = target.rpartition(":")
    if not sep or not module or not name:
        raise LatticeError(f"expected APP:TEAM, got {target!r}")
    team = getattr(load_app(module), name, None)
    if not isinstance(team, Team):
        raise LatticeError(f"{target!r} is not a team (create_team(...)) in that app")
    return team


def _member_mailbox(team: Any, member: str) -> str:
    """The mailbox of ``member`` (a member name, ``lead``, or a mailbox id of the team); a
    name the team does not have is a usage error, said before anything is read or sent."""
    names = ["lead", *(m.name for m in team.members)]
    boxes = {team.mailbox_id(name): name for name in names}
    if member in names:
        return team.mailbox_id(member)
    if member in boxes:
        return member
    raise LatticeError(
        f"team {team.name!r} has no member {member!r}; its mailboxes: {', '.join(names)}"
    )


@team_app.command("send", cls=Command)
@connection_options
def team_send(
    target: TeamTarget,
    to: Annotated[str, typer.Argument(help="A member name (or mailbox id).")],
    body: Annotated[str, typer.Argument(help="The message.")],
    sender: Annotated[str, typer.Option("--from", help="Sender mailbox or member.")] = "user",
    subject: Annotated[str | None, typer.Option(help="A subject line.")] = None,
    *,
    connection: TemporalConnection,
) -> None:
    """Put a message in a member's mailbox (exit code 2 for a member the team lacks)."""
    with errors_as_exit():
        team = _resolve_team(target)
        _member_mailbox(team, to)

    async def main() -> int:
        # connected, so that a query of the team running elsewhere is told of the mail
        runtime = await Runtime.connect(connection=connection, inline_workers=False)
        team.lead.bind_runtime(runtime)
        try:
            sent = await team.send(to, body, from_=sender, subject=subject)
        finally:
            await runtime.close()
        stdout.print(f"sent {sent.id} to {sent.to_mailbox}")
        return 0

    execute(main)


@team_app.command("drain", cls=Command)
@connection_options
def team_drain(
    target: TeamTarget,
    max_rounds: Annotated[int, typer.Option(help="Rounds over the members.")] = 5,
    max_messages: Annotated[int, typer.Option(help="Messages to process at most.")] = 20,
    json_out: Json = False,
    *,
    connection: TemporalConnection,
) -> None:
    """Let each member work on the pending messages of its own mailbox (never re-routes).

    Exit code 1 when a message failed. --json: one object, the rounds and the messages
    processed (each with its status), the ids of those that failed.
    """
    with errors_as_exit():
        team = _resolve_team(target)

    async def main() -> int:
        waiting.show(f"draining {team.name}'s mailboxes…")
        async with default_connection(connection):
            result = await team.drain(max_rounds=max_rounds, max_messages=max_messages)
        waiting.hide()
        failed = {m.id for m in result.failed}
        if json_out:
            print_json(
                {
                    "rounds": result.rounds,
                    "processed": [m.model_dump(mode="json") for m in result.processed],
                    "failed": sorted(failed),
                }
            )
            return 1 if failed else 0
        for m in result.processed:
            state = "failed" if m.id in failed else "handled"
            stdout.print(f"{state} {m.id} in {m.to_mailbox}: {one_line(m.body, 80)}")
        stdout.print(f"{len(result.processed)} message(s) in {result.rounds} round(s)")
        return 1 if failed else 0

    execute(main, spinner=not json_out)


@team_app.command("status", cls=Command)
@connection_options
def team_status(
    target: TeamTarget, json_out: Json = False, *, connection: TemporalConnection
) -> None:
    """Message counts per mailbox and status (--json: one object per mailbox and line)."""
    with errors_as_exit():
        team = _resolve_team(target)

    async def main() -> int:
        rows: list[dict[str, Any]] = []
        async with default_connection(connection):
            for name in ["lead", *(m.name for m in team.members)]:
                messages = await team.mailbox.inbox(team.mailbox_id(name))
                counts = {s: sum(m.status == s for m in messages) for s in STATUSES}
                rows.append({"mailbox": team.mailbox_id(name), **counts})
        if json_out:
            for row in rows:
                print_json(row)
            return 0
        table = Table(box=box.SIMPLE)
        for column in ("mailbox", *STATUSES):
            table.add_column(column)
        for row in rows:
            table.add_row(*(str(row[c]) for c in ("mailbox", *STATUSES)))
        stdout.print(table)
        return 0

    execute(main, spinner=not json_out)


@team_app.command("inbox", cls=Command)
@connection_options
def team_inbox(
    target: TeamTarget,
    member: Annotated[str, typer.Argument(help="A member name, or lead.")],
    status: Annotated[
        MessageStatus | None,
        typer.Option(
            metavar="STATUS", help=f"Only messages in this status: {', '.join(STATUSES)}."
        ),
    ] = None,
    json_out: Json = False,
    *,
    connection: TemporalConnection,
) -> None:
    """The messages of one member's mailbox (--json: one message object per line; exit code
    2 for a member the team lacks)."""
    with errors_as_exit():
        team = _resolve_team(target)
        mailbox = _member_mailbox(team, member)

    async def main() -> int:
        async with default_connection(connection):
            messages = await team.mailbox.inbox(mailbox, status=status)
        for m in messages:
            if json_out:
                print_json(m.model_dump(mode="json"))
                continue
            stdout.print(
                f"{m.id} {m.status:<10} {m.kind:<8} from {m.from_mailbox}: {one_line(m.body, 80)}"
            )
        return 0

    execute(main, spinner=not json_out)
