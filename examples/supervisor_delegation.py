"""Seeds, "Supervisor delegation": the supervisor asks a specialist once, through a tool; the
specialist runs as a child workflow of the supervisor's query."""

from __future__ import annotations

import asyncio

from _demo import model_options

from agent_lattice import agent_tool, create_agent, define_agent
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use


def fake(request: RecordedRequest) -> Reply:
    if "explore subagent" in (request.system or ""):
        return text(
            "Delegation lives in _delegation.py; child workflows start in workflows/_agent.py."
        )
    if not request.tool_results:
        return tool_use(
            "explore",
            {
                "mode": "ask",
                "task": "Inspect the SDK and find the modules involved in delegation.",
                "expected_output": "A concise file map",
                "acceptance_criteria": ["Mention where child workflows start"],
            },
        )
    return text(f"The explorer reports: {request.tool_results[0]['content']}")


async def main() -> None:
    options = model_options("supervisor_delegation", fake)
    # A spec: every call spawns a fresh explorer session (tasks must be self-contained).
    explorer = define_agent(
        name="explorer",
        system_prompt="\n".join(
            [
                "You are an explore subagent.",
                "Inspect the repository, identify relevant files, and report concise findings.",
                "Do not make code changes.",
            ]
        ),
        **options,
    )
    supervisor = create_agent(
        name="supervisor",
        system_prompt="You supervise the task and call specialist subagents when useful.",
        tools=[
            agent_tool(
                "explore",
                explorer,
                description="Ask a temporary explore subagent to inspect the codebase and report findings.",
            )
        ],
        **options,
    )
    result = await supervisor.prompt("Find the modules involved in SDK delegation.")
    print(result.result)
    print("usage by agent:", {name: u.output_tokens for name, u in result.usage_by_agent.items()})


if __name__ == "__main__":
    asyncio.run(main())
