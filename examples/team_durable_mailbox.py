"""Seeds, "Team runtime drain", on the default mailbox: without a ``mailbox=`` option a team's
mailbox is a Temporal workflow (``team-mailbox-<team>``). Sends arrive there as signals,
claims and status changes as updates, reads as queries, so the messages outlive this process:
another process (or ``lattice team inbox APP:TEAM lead``) reads the same mailbox."""

from __future__ import annotations

import asyncio

from _demo import model_options

from agent_lattice import create_agent, create_team, create_workflow_mailbox, team_member
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use


def fake(request: RecordedRequest) -> Reply:
    prompt = request.messages[-1]["content"]
    if "You review designs" in (request.system or "") and isinstance(prompt, str):
        message_id = prompt.split("message_id: ")[1].split("\n")[0]
        return tool_use(
            "team_reply", {"message_id": message_id, "body": "Approved: the API is consistent."}
        )
    return text("Done.")


async def main() -> None:
    options = model_options("team_durable_mailbox", fake)
    team = create_team(
        name="design-review",
        lead=create_agent(
            name="lead", system_prompt="You run design reviews.", workspace=False, **options
        ),
        members=[
            team_member(
                name="reviewer",
                agent=create_agent(
                    name="reviewer",
                    system_prompt="You review designs and answer through team_reply.",
                    workspace=False,
                    **options,
                ),
            )
        ],
    )
    sent = await team.send("reviewer", "Review the notes API design.", from_="lead")
    print(f"sent {sent.id} to {sent.to_mailbox}")
    result = await team.drain()
    print(f"drained {len(result.processed)} message(s), {len(result.failed)} failed")
    # a new client object over the same workflow: the state is in Temporal, not in `team`
    same_mailbox = create_workflow_mailbox("design-review")
    for m in await same_mailbox.thread(sent.thread_id):
        print(f"{m.kind} {m.from_mailbox} -> {m.to_mailbox} [{m.status}]: {m.body}")


if __name__ == "__main__":
    asyncio.run(main())
