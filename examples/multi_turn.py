"""Seeds, "Multi-turn Session": one Agent is one conversation; history is kept between queries."""

from __future__ import annotations

import asyncio

from _demo import model_options

from agent_lattice import create_agent
from agent_lattice.testing import RecordedRequest, Reply, text


def fake(request: RecordedRequest) -> Reply:
    said = " ".join(
        m["content"]
        for m in request.messages
        if m["role"] == "user" and isinstance(m["content"], str)
    )
    if "What is my name" in (request.last_user_text or ""):
        return text("Your name is Ada." if "Ada" in said else "You have not told me.")
    return text("Nice to meet you, Ada.")


agent = create_agent(**model_options("multi_turn", fake))


async def main() -> None:
    await agent.prompt("My name is Ada.")
    result = await agent.prompt("What is my name?")
    print(result.result)
    print(f"history: {[m.role for m in await agent.get_history()]}")


if __name__ == "__main__":
    asyncio.run(main())
