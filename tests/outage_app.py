"""The app of the server-outage tests (`lattice worker` / `lattice run tests/outage_app.py:agent`).

Its tool writes a line to the file named by ``LATTICE_TEST_EFFECTS`` when it starts and when
it ends, so a test can kill the Temporal server while it runs, let it end while the server is
away, and count how often it really ran.
"""

from __future__ import annotations

import asyncio
import os

from pydantic import BaseModel

from agent_lattice import ToolResult, create_agent, tool


class Note(BaseModel):
    text: str


def _record(line: str) -> None:
    with open(os.environ["LATTICE_TEST_EFFECTS"], "a") as f:
        f.write(line + "\n")


async def slow_note(input: Note) -> ToolResult:
    """Takes ``LATTICE_TEST_TOOL_S`` seconds, or less once the file ``LATTICE_TEST_RELEASE``
    names exists (so a test decides when it ends)."""
    _record(f"start:{input.text}")
    release = os.environ.get("LATTICE_TEST_RELEASE")
    for _ in range(int(float(os.environ.get("LATTICE_TEST_TOOL_S", "3")) / 0.05)):
        if release and await asyncio.to_thread(os.path.exists, release):
            break
        await asyncio.sleep(0.05)
    _record(f"done:{input.text}")
    return ToolResult(content=f"noted {input.text}")


agent = create_agent(
    name="outage",
    model="claude-test",
    api_key=os.environ.get("ANTHROPIC_API_KEY", "test"),
    base_url=os.environ.get("ANTHROPIC_BASE_URL"),
    tools=[tool("slow_note", "Write a note, slowly", Note, slow_note)],
)
