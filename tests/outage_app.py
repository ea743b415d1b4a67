"""The app of the server-outage tests (`lattice worker` / `lattice run tests/outage_app.py:agent`).

Its tool takes ``LATTICE_TEST_TOOL_S`` seconds and writes a line to the file named by
``LATTICE_TEST_EFFECTS`` when it starts and when it ends, so a test can kill the Temporal
server while it runs and count how often it really ran.
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
    _record(f"start:{input.text}")
    await asyncio.sleep(float(os.environ.get("LATTICE_TEST_TOOL_S", "3")))
    _record(f"done:{input.text}")
    return ToolResult(content=f"noted {input.text}")


agent = create_agent(
    name="outage",
    model="claude-test",
    api_key=os.environ.get("ANTHROPIC_API_KEY", "test"),
    base_url=os.environ.get("ANTHROPIC_BASE_URL"),
    tools=[tool("slow_note", "Write a note, slowly", Note, slow_note)],
)
