"""The app the tracing and metrics tests serve from `lattice worker` processes.

A team ``crew``: its lead ``lead`` has a calculator, a delegate ``explore`` (the agent
``explorer``, a child workflow) and a member ``writer`` it hands work off to. Every model is
the fake server at ``ANTHROPIC_BASE_URL``; each agent's system prompt says "You are <name>."
(``by_agent`` in conftest).
"""

from __future__ import annotations

import os

from agent_lattice import (
    agent_tool,
    create_bare_agent,
    create_team,
    define_agent,
    team_member,
    tool,
)

from cli_app import Expr, calculate


def _options(name: str) -> dict:
    return {
        "name": name,
        "model": "claude-test",
        "api_key": os.environ.get("ANTHROPIC_API_KEY", "test"),
        "base_url": os.environ.get("ANTHROPIC_BASE_URL"),
        "system_prompt": f"You are {name}.",
    }


explorer = define_agent(**_options("explorer"), tools=[])

crew = create_team(
    name="crew",
    lead=create_bare_agent(
        **_options("lead"),
        # USD per million tokens: the metrics test checks each reply's cost
        pricing={"input": 1.0, "output": 2.0, "cache_write": 3.0, "cache_read": 4.0},
        tools=[
            tool("calculator", "Add integers, e.g. 2+2", Expr, calculate),
            agent_tool("explore", explorer, description="Ask the explorer."),
        ],
    ),
    members=[team_member(name="writer", agent=create_bare_agent(**_options("writer")))],
)
