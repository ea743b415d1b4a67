"""The app the CLI tests run (`lattice run tests/cli_app.py:agent ...`).

One agent with a calculator tool; its model is the fake server at ``ANTHROPIC_BASE_URL``.
"""

from __future__ import annotations

import os
import time

from pydantic import BaseModel

from agent_lattice import ToolResult, create_agent, tool


class Expr(BaseModel):
    expr: str


def calculate(input: Expr) -> ToolResult:
    """Sums ``a+b+...`` (enough for the tests); ``sleep N`` takes N seconds (a tool that does
    not heed cancellation: an interrupt waits for it)."""
    if input.expr.startswith("sleep "):
        seconds = float(input.expr.split()[1])
        time.sleep(seconds)
        return ToolResult(content=f"slept {seconds:g} s")
    try:
        return ToolResult(content=str(sum(int(part) for part in input.expr.split("+"))))
    except ValueError:
        return ToolResult(content=f"cannot evaluate {input.expr!r}", is_error=True)


agent = create_agent(
    name="clitest",
    model="claude-test",
    api_key=os.environ.get("ANTHROPIC_API_KEY", "test"),
    base_url=os.environ.get("ANTHROPIC_BASE_URL"),
    tools=[tool("calculator", "Add integers, e.g. 2+2", Expr, calculate)],
)


def _team():
    """A team over a SQLite mailbox at ``LATTICE_TEST_TEAM_DB`` (the CLI's team commands), or
    over the default mailbox (a Temporal workflow) when it is ``workflow``."""
    from agent_lattice import create_bare_agent, create_sqlite_mailbox, create_team, team_member

    def member(name: str):
        return create_bare_agent(
            name=name,
            model="claude-test",
            api_key=os.environ.get("ANTHROPIC_API_KEY", "test"),
            base_url=os.environ.get("ANTHROPIC_BASE_URL"),
            system_prompt=f"You are {name}.",
        )

    path = os.environ.get("LATTICE_TEST_TEAM_DB")
    if not path:
        return None
    return create_team(
        name="crew",
        lead=member("boss"),
        members=[team_member(name="helper", agent=member("helper"))],
        mailbox=None if path == "workflow" else create_sqlite_mailbox(path=path),
    )


crew = _team()
