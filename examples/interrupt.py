"""Seeds, "Interrupting A Query": end the in-flight request, keep the conversation, go on."""

from __future__ import annotations

import asyncio

from _demo import model_options

from agent_lattice import create_agent
from agent_lattice.testing import RecordedRequest, Reply, slow, text


def fake(request: RecordedRequest) -> Reply:
    if "Actually" in (request.last_user_text or ""):
        return text("Release notes for 0.16.0: interrupts keep the conversation.")
    return slow(text(" ".join(["Release notes, long draft..."] * 100)), delay=0.05)


agent = create_agent(**model_options("interrupt", fake))


async def main() -> None:
    streamed = 0
    async for message in agent.query("Draft the release notes."):
        if message.type == "stream_event" and message.event["type"] == "content_block_delta":
            streamed += 1
            if streamed == 5:
                print("interrupting:", agent.interrupt())  # e.g. the user typed a correction
        if message.type == "result":
            print("first query:", message.subtype)

    result = await agent.prompt("Actually, skip 0.15.x and cover 0.16.0 only.")
    print("second query:", result.subtype, "-", result.result)


if __name__ == "__main__":
    asyncio.run(main())
