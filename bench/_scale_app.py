"""The app ``bench/scale_out.py`` serves on its ``lattice worker`` processes: one agent whose
model is the fake server at ``ANTHROPIC_BASE_URL`` and whose tool ``step`` answers at once
(a regular activity: each tool turn is two activity round trips)."""

from __future__ import annotations

import os

from pydantic import BaseModel

from agent_lattice import ToolResult, create_bare_agent, tool


class Step(BaseModel):
    n: int


def step(input: Step) -> ToolResult:
    return ToolResult(content=f"step {input.n} taken")


agent = create_bare_agent(
    name="scaler",
    api_key="bench",
    base_url=os.environ.get("ANTHROPIC_BASE_URL"),
    model="claude-test",
    tools=[tool("step", "Take a step", Step, step)],
)
