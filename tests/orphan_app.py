"""The orphan tests' script and app.

As a script (``python tests/orphan_app.py ADDRESS BASE_URL SESSION PROMPT``) it runs one
query of the agent inline, as a user's script does; the test kills it with SIGKILL mid-query,
which leaves the run orphaned on the script's private task queue. As an app
(``lattice worker tests/orphan_app.py``) it defines the same agent, so a worker adopts the
run. Tools write their side effects to ``LATTICE_TEST_EFFECTS`` (see crash_app).
"""

from __future__ import annotations

import asyncio
import os
import sys

from agent_lattice import agent_tool, create_agent, define_agent, tool

from crash_app import API_KEY, Note, block, record


def build_agent(base_url: str, session_id: str | None = None):
    return create_agent(
        name="orphan",
        session_id=session_id,
        api_key=API_KEY,
        base_url=base_url,
        model="claude-test",
        tools=[
            tool("record", "Record a note", Note, record),
            tool("block", "Record a note slowly", Note, block),
        ],
    )


def build_boss(base_url: str, session_id: str | None = None):
    """An agent that delegates to ``orphansub`` (a child run on its own private queue)."""
    sub = define_agent(
        name="orphansub",
        api_key=API_KEY,
        base_url=base_url,
        model="claude-test",
        system_prompt="You are orphansub.",
        tools=[
            tool("record", "Record a note", Note, record),
            tool("block", "Record a note slowly", Note, block),
        ],
    )
    return create_agent(
        name="orphanboss",
        session_id=session_id,
        api_key=API_KEY,
        base_url=base_url,
        model="claude-test",
        system_prompt="You are orphanboss.",
        tools=[agent_tool("delegate", sub)],
    )


# what `lattice worker tests/orphan_app.py` serves
_URL = os.environ.get("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
agents = [build_agent(_URL), build_boss(_URL)]


async def _script(address: str, base_url: str, session_id: str, prompt: str, kind: str) -> None:
    from agent_lattice.client import Runtime
    from agent_lattice.testing import FAST_SETTINGS

    runtime = await Runtime.connect(address, settings=FAST_SETTINGS, inline_workers=True)
    agent = (build_boss if kind == "boss" else build_agent)(base_url, session_id)
    await agent.prompt(prompt, runtime=runtime)


if __name__ == "__main__":
    asyncio.run(_script(*sys.argv[1:6]))
