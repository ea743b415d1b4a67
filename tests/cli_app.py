"""The app the CLI tests run (`lattice run tests/cli_app.py:agent ...`).

One agent with a calculator tool; its model is the fake server at ``ANTHROPIC_BASE_URL``.
"""

from __future__ import annotations

import os

from pydantic import BaseModel

from agent_lattice import ToolResult, create_agent, tool


class Expr(BaseModel):
    expr: str


def calculate(input: Expr) -> ToolResult:
    """Sums ``a+b+...`` (enough for the tests)."""
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
