"""Seeds, "Minimal Usage": one agent, one query, every message printed; then live text only."""

from __future__ import annotations

import asyncio

from _demo import model_options

from agent_lattice import create_agent
from agent_lattice.testing import slow, text

agent = create_agent(
    **model_options("minimal", lambda request: slow(text("Hello! How can I help?"), delay=0.03))
)


async def main() -> None:
    async for message in agent.query("Say hello"):
        print(
            message.type,
            message.model_dump(exclude_none=True)
            if message.type != "stream_event"
            else message.event["type"],
        )

    # Render incrementally: print text deltas as they stream.
    async for message in agent.query("Say hello again"):
        if message.type == "stream_event":
            event = message.event
            if event["type"] == "content_block_delta" and event["delta"].get("text"):
                print(event["delta"]["text"], end="", flush=True)
    print()


if __name__ == "__main__":
    asyncio.run(main())
