"""The app of the history-store crash tests.

``lattice worker tests/history_app.py`` serves its agent (the provider's URL from
``LATTICE_TEST_BASE_URL``); ``python tests/history_app.py ADDRESS SESSION PATH [inline]`` is
a client that queries it with a JSONL history store at PATH, printing each message's type
(the test kills it mid-query); ``inline``: the client serves its query itself, as a script
does when no worker runs.
"""

from __future__ import annotations

import asyncio
import os
import sys

from pydantic import BaseModel

from agent_lattice import ToolResult, create_bare_agent, create_jsonl_history_store, tool

API_KEY = "sk-ant-test-SECRET-4f2b9c"
PROMPT = "Record A, then answer."


class Note(BaseModel):
    text: str


def record(input: Note) -> ToolResult:
    return ToolResult(content=f"recorded {input.text}")


def build(**options: object):
    """``options``: what does not change the definition a worker serves (session_id,
    history_store, base_url)."""
    options.setdefault("base_url", os.environ.get("LATTICE_TEST_BASE_URL", "http://127.0.0.1:9"))
    return create_bare_agent(
        name="keeper",
        api_key=API_KEY,
        model="claude-test",
        tools=[tool("record", "Record a note", Note, record)],
        **options,
    )


agents = [build()]


async def _client(address: str, session: str, path: str, mode: str = "") -> None:
    from agent_lattice.client import Runtime
    from agent_lattice.testing import FAST_SETTINGS

    inline = mode == "inline"
    runtime = await Runtime.connect(address, settings=FAST_SETTINGS, inline_workers=inline)
    agent = build(session_id=session, history_store=create_jsonl_history_store(path=path))
    async for message in agent.query(PROMPT, runtime=runtime):
        print(message.type, flush=True)


if __name__ == "__main__":
    asyncio.run(_client(*sys.argv[1:5]))
