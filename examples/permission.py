"""Seeds, "Permission Callback": decide per tool call; a denial goes back to the model as an
error tool result, and the model explains or picks another path."""

from __future__ import annotations

import asyncio

from _demo import model_options
from pydantic import BaseModel

from agent_lattice import PermissionRequest, ToolResult, create_agent, tool
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use

ran: list[str] = []


class Target(BaseModel):
    target: str


def danger(input: Target) -> ToolResult:
    ran.append(input.target)
    return ToolResult(content=f"dropped {input.target}")


async def permission(request: PermissionRequest) -> dict:
    if request.tool_name == "danger":
        return {"behavior": "deny", "message": "Blocked by policy"}
    return {"behavior": "allow"}


def fake(request: RecordedRequest) -> Reply:
    if not request.tool_results:
        return tool_use("danger", {"target": "staging-db"})
    result = request.tool_results[0]
    if result.get("is_error"):
        return text(
            f"I could not drop staging-db ({result['content']}). "
            "Ask an administrator to do it, or I can archive it instead."
        )
    return text(f"Done: {result['content']}.")


agent = create_agent(
    **model_options("permission", fake),
    tools=[tool("danger", "Drop a database", Target, danger)],
    permission=permission,
)


async def main() -> None:
    async for message in agent.query("Drop the staging database."):
        if message.type == "user":
            for block in message.message.blocks:
                print(f"tool result (is_error={block.is_error}): {block.content}")
        elif message.type == "result":
            print(f"model: {message.result}")
    print(f"the danger handler ran {len(ran)} time(s)")


if __name__ == "__main__":
    asyncio.run(main())
