"""Steer a running query: tell the agent something while it works, without stopping it.

The agent builds a project; while the build (a slow tool) runs, a person adds "also run the
tests". ``await agent.steer(text)`` hands the running query that message: the run holds it
(durably: a worker that dies now loses nothing), and the model reads it at its next request,
after the build's result, in the same user turn. ``interrupt()`` would have thrown the turn
away; a steer keeps it.

From another process or machine the same is ``await steer(workflow_id, text)`` or
``lattice steer WORKFLOW_ID "Also run the tests."``; ``lattice attach WORKFLOW_ID`` shows it.

Run it: ``python examples/steer.py``.
"""

from __future__ import annotations

import asyncio

from _demo import model_options
from pydantic import BaseModel

from agent_lattice import create_agent, tool
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use


class Nothing(BaseModel):
    pass


async def build(_: Nothing) -> str:
    await asyncio.sleep(2)  # a build takes a while: long enough for a person to say more
    return "build ok: 12 modules"


def run_tests(_: Nothing) -> str:
    return "tests ok: 48 passed"


def fake(request: RecordedRequest) -> Reply:
    """The scripted model: build; run the tests once asked to; then report."""
    blocks = [b for m in request.messages if isinstance(m["content"], list) for b in m["content"]]
    said = [b["content"] for b in blocks if b["type"] == "tool_result"]
    asked = any("tests" in b["text"] for b in blocks if b["type"] == "text")
    if not said:
        return tool_use("build", {})
    if asked and not any("tests ok" in s for s in said):
        return tool_use("run_tests", {})
    return text(f"Built and tested: {'; '.join(said)}.")


agent = create_agent(
    name="builder",
    system_prompt="You build the project with your tools and report what they said.",
    tools=[
        tool("build", "Build the project", Nothing, build),
        tool("run_tests", "Run the test suite", Nothing, run_tests),
    ],
    workspace=False,
    **model_options("steer.py", fake),
)


async def main() -> None:
    async for message in agent.query("Build the project."):
        if message.type == "assistant" and message.turn == 1 and message.message.tool_uses:
            # the build runs now; a person watching adds something
            accepted = await agent.steer("Also run the tests, and say how many passed.")
            print("steer accepted:", accepted)
        elif message.type == "system" and message.subtype == "steered":
            print("the run holds it:", message.message)
        elif message.type == "user":
            blocks = message.message.blocks
            print("to the model:", " + ".join(b.type for b in blocks))
            for block in blocks:
                if block.type == "text":
                    print("  with the steer:", block.text)
        elif message.type == "result":
            print("result:", message.result)
    print("steer after the query ended:", await agent.steer("Too late."))


if __name__ == "__main__":
    asyncio.run(main())
