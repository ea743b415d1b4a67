"""Seeds, "Automatic Context Compaction": past the token threshold, the older part of the
conversation is replaced by a model-written summary, and the run goes on from it."""

from __future__ import annotations

import asyncio

from _demo import model_options
from pydantic import BaseModel

from agent_lattice import (
    DEFAULT_COMPACTION_PROMPT,
    SystemMessage,
    ToolResult,
    create_agent,
    tool,
)
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use


class Path_(BaseModel):
    path: str


def read_file(input: Path_) -> ToolResult:
    return ToolResult(content=f"# {input.path}\n" + "def handler(): ...\n" * 200)


def fake(request: RecordedRequest) -> Reply:
    if DEFAULT_COMPACTION_PROMPT in (request.last_user_text or ""):
        return text("The user asked to refactor module.py; it was read (one handler).")
    if not request.tool_results:  # pretend the conversation is already huge
        return tool_use("read_file", {"path": "module.py"}, usage={"input_tokens": 160_000})
    return text("Refactored: the handler now lives in handlers.py.")


async def main() -> None:
    agent = create_agent(
        tools=[tool("read_file", "Read a file", Path_, read_file)],
        auto_compact={"threshold_tokens": 150_000, "keep_recent_messages": 2},
        **model_options("auto_compact", fake),
    )
    async for message in agent.query("Refactor this module."):
        if isinstance(message, SystemMessage) and message.subtype == "compaction":
            print(f"compacted {message.compacted_messages} messages", message.usage)
        if message.type == "result":
            print(message.result)
    history = await agent.get_history()
    print(f"history now starts with the summary: {'module.py' in history[0].blocks[0].text}")


if __name__ == "__main__":
    asyncio.run(main())
