"""Seeds, "Agent Specs (Templates) And Sessions" and "AgentLike Composition".

``define_agent`` returns a template; each ``spawn()`` is an independent session with its own
history. Any ``AgentLike`` (something with query / prompt / interrupt) can be driven the same way.
"""

from __future__ import annotations

import asyncio

from _demo import model_options

from agent_lattice import AgentLike, define_agent
from agent_lattice.testing import RecordedRequest, Reply, text


def fake(request: RecordedRequest) -> Reply:
    earlier = len([m for m in request.messages if m["role"] == "user"]) - 1
    return text(f"Reviewed: {request.last_user_text!r} (I remember {earlier} earlier task(s)).")


reviewer_spec = define_agent(
    name="reviewer",
    system_prompt="You are a senior code reviewer.",
    **model_options("agent_specs", fake),
)


async def ask(agent: AgentLike, task: str) -> str:
    result = await agent.prompt(task)
    return result.result or ""


async def main() -> None:
    session = reviewer_spec.spawn()
    print(await ask(session, "Review patch 1"))
    print(await ask(session, "Review patch 2"))  # same session: remembers patch 1
    print(await ask(reviewer_spec.spawn(), "Review patch 3"))  # fresh session: remembers nothing


if __name__ == "__main__":
    asyncio.run(main())
