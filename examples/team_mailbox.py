"""Seeds, "Team Mailbox Collaboration" and "Team runtime drain": a team over a SQLite mailbox;
work is routed to a member's mailbox with send(), and drain() lets members answer it through
their mailbox tools."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from _demo import model_options

from agent_lattice import (
    create_agent,
    create_sqlite_mailbox,
    create_team,
    team_member,
)
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use


def fake(request: RecordedRequest) -> Reply:
    prompt = request.messages[-1]["content"]
    if "research agent SDK architecture" in (request.system or "") and isinstance(prompt, str):
        message_id = prompt.split("message_id: ")[1].split("\n")[0]
        return tool_use(
            "team_reply",
            {"message_id": message_id, "body": "The SDK runs each query as a Temporal workflow."},
        )
    return text("Done.")


async def main() -> None:
    options = model_options("team_mailbox", fake)
    mailbox = create_sqlite_mailbox(path=Path(tempfile.mkdtemp()) / "team-mailbox.db")
    researcher = create_agent(
        name="researcher",
        system_prompt="You research agent SDK architecture and report concise findings.",
        workspace=False,
        **options,
    )
    team = create_team(
        name="engineering",
        lead=create_agent(
            name="lead",
            system_prompt="You lead engineering work. Delegate research tasks to researcher.",
            workspace=False,
            **options,
        ),
        members=[
            team_member(
                name="researcher",
                role="executor",
                focus="Research agent architecture",
                agent=researcher,
            )
        ],
        mailbox=mailbox,
    )
    sent = await team.send("researcher", "Inspect the SDK design.", from_="lead")
    print(f"sent {sent.id} to {sent.to_mailbox}")
    result = await team.drain(max_rounds=5, max_messages=20)
    print(f"drained {len(result.processed)} message(s), {len(result.failed)} failed")
    (reply,) = await mailbox.inbox("engineering::lead")
    print(f"{reply.kind} from {reply.from_mailbox}: {reply.body}")
    print(
        "claim_next on an empty mailbox:", await team.mailbox.claim_next("engineering::researcher")
    )


if __name__ == "__main__":
    asyncio.run(main())
