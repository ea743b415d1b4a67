"""``lattice team``: a team's mailbox from the shell."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from .._errors import LatticeError
from ..client._runtime import Runtime
from ..worker._worker import load_app
from ._plumbing import errors_as_exit, execute, stdout
from ._render import one_line

team_app = typer.Typer(
    help="A team's mailbox: send a message, drain routed work, show status and inboxes.",
    no_args_is_help=True,
)

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
    with errors_as_exit():
        team = _resolve_team(target)

    async def main() -> int:
        # connected, so that a query of the team running elsewhere is told of the mail
        runtime = await Runtime.connect(inline_workers=False)
        team.lead.bind_runtime(runtime)
        try:
            sent = await team.send(to, body, from_=sender, subject=subject)
        finally:
            await runtime.close()
        stdout.print(f"sent {sent.id} to {sent.to_mailbox}")
        return 0

    execute(main)


@team_app.command("drain")
def team_drain(
    target: TeamTarget,
    max_rounds: Annotated[int, typer.Option(help="Rounds over the members.")] = 5,
    max_messages: Annotated[int, typer.Option(help="Messages to process at most.")] = 20,
) -> None:
    """Let each member work on the pending messages of its own mailbox (never re-routes)."""
    with errors_as_exit():
        team = _resolve_team(target)

    async def main() -> int:
        result = await team.drain(max_rounds=max_rounds, max_messages=max_messages)
        failed = {m.id for m in result.failed}
        for m in result.processed:
            state = "failed" if m.id in failed else "handled"
            stdout.print(f"{state} {m.id} in {m.to_mailbox}: {one_line(m.body, 80)}")
        stdout.print(f"{len(result.processed)} message(s) in {result.rounds} round(s)")
        return 1 if failed else 0

    execute(main)


@team_app.command("status")
def team_status(target: TeamTarget) -> None:
    """Message counts per mailbox and status."""
    with errors_as_exit():
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

    execute(main)


@team_app.command("inbox")
def team_inbox(
    target: TeamTarget,
    member: Annotated[str, typer.Argument(help="A member name, or lead.")],
    status: Annotated[str | None, typer.Option(help="Only messages in this status.")] = None,
) -> None:
    """The messages of one member's mailbox."""
    with errors_as_exit():
        team = _resolve_team(target)

    async def main() -> int:
        for m in await team.mailbox.inbox(team.mailbox_id(member), status=status):
            stdout.print(
                f"{m.id} {m.status:<10} {m.kind:<8} from {m.from_mailbox}: {one_line(m.body, 80)}"
            )
        return 0

    execute(main)
