"""Seeds, "Team Mailbox Collaboration" and "Nested teams": a company team whose CEO hands
engineering work to a nested engineering team (head -> backend, frontend). Every level is its
own TeamWorkflow; every agent query a child workflow beneath it. The company's stream carries
the nested team's events and its members' own messages too."""

from __future__ import annotations

import asyncio

from _demo import model_options

from agent_lattice import (
    AgentMessageEvent,
    TeamAgentEvent,
    TeamMessageEvent,
    create_agent,
    create_team,
    team_member,
)
from agent_lattice.testing import RecordedRequest, Reply, message, text, tool_use_block


def fake(request: RecordedRequest) -> Reply:
    system = request.system or ""
    first = len(request.messages) == 1
    if "CEO agent" in system:
        if first:
            return message(
                [
                    tool_use_block(
                        "engineering", {"mode": "handoff", "task": "Ship a notebook app."}
                    )
                ],
                stop_reason="tool_use",
            )
        return text("CEO: engineering shipped the notebook app (API and UI).")
    if "engineering head" in system:
        if first:
            return message(
                [
                    tool_use_block("backend", {"mode": "handoff", "task": "Build the notes API."}),
                    tool_use_block("frontend", {"mode": "handoff", "task": "Build the notes UI."}),
                ],
                stop_reason="tool_use",
            )
        return text("Engineering: API and UI are done.")
    if "backend executor" in system:
        return text("Notes API ready: GET/POST /notes.")
    return text("Notes UI ready: list and editor views.")


async def main() -> None:
    options = model_options("team", fake)

    def agent(name: str, *lines: str):
        return create_agent(name=name, system_prompt="\n".join(lines), workspace=False, **options)

    engineering = create_team(
        name="engineering",
        lead=agent(
            "head",
            "You are the engineering head agent.",
            "Break engineering goals into backend and frontend work and report outcomes upstream.",
        ),
        members=[
            team_member(
                name="backend",
                role="executor",
                agent=agent("backend", "You are the backend executor agent."),
            ),
            team_member(
                name="frontend",
                role="executor",
                agent=agent("frontend", "You are the frontend executor agent."),
            ),
        ],
        runner={"max_concurrent_work_items": 2},
    )
    company = create_team(
        name="company",
        lead=agent("ceo", "You are the CEO agent.", "Decide which department owns the work."),
        members=[
            team_member(
                name="engineering", role="head", focus="Own engineering delivery", agent=engineering
            )
        ],
    )
    async for event in company.query("Build a notebook app."):
        if isinstance(event, TeamMessageEvent):
            print(f"team_message {event.event}: {event.from_mailbox} -> {event.to_mailbox}")
        elif isinstance(event, TeamAgentEvent):
            print(f"team_agent {event.member} {event.event}")
        elif isinstance(event, AgentMessageEvent) and event.message.type == "result":
            print(f"agent_message {event.team}::{event.member} result: {event.message.result}")
        elif event.type == "result":
            print(event.result)
            print("agents:", ", ".join(sorted(event.usage_by_agent)))


if __name__ == "__main__":
    asyncio.run(main())
