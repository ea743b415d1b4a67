"""Seeds, "Tool Batch Policy": reject a batch of tool calls that must not run together.

Adapted from the seeds' incrementRevision + handoff rule: ``publish`` depends on the revision
that ``increment_revision`` creates, so the two may not share one model response. The
policy sees the whole batch before anything runs; a rejected batch runs nothing.
"""

from __future__ import annotations

import asyncio
import json

from _demo import model_options
from pydantic import BaseModel

from agent_lattice import BatchPolicyRequest, ToolResult, create_agent, tool
from agent_lattice.testing import RecordedRequest, Reply, message, text, tool_use, tool_use_block

revision = 1
ran: list[str] = []


class NoInput(BaseModel):
    pass


class Publish(BaseModel):
    revision: int


def increment_revision(input: NoInput) -> ToolResult:
    global revision
    revision += 1
    ran.append("increment_revision")
    return ToolResult(content=f"revision is now {revision}")


def publish(input: Publish) -> ToolResult:
    ran.append(f"publish({input.revision})")
    return ToolResult(content=f"published revision {input.revision}")


class RevisionBeforePublish:
    def validate(self, request: BatchPolicyRequest) -> dict:
        increments = next((c for c in request.tool_calls if c.name == "increment_revision"), None)
        publishes = next((c for c in request.tool_calls if c.name == "publish"), None)
        if increments and publishes:
            return {
                "allowed": False,
                "code": "invalid_tool_batch",
                "message": "Update the revision before publishing dependent work.",
                "conflicting_tool_call_ids": [increments.id, publishes.id],
                "suggested_next_step": "Run increment_revision first, then publish the new revision.",
            }
        return {"allowed": True}


def fake(request: RecordedRequest) -> Reply:
    results = request.tool_results
    if not results:  # first try: both at once
        return message(
            [
                tool_use_block("increment_revision", {}),
                tool_use_block("publish", {"revision": 2}),
            ],
            stop_reason="tool_use",
        )
    if results[0].get("is_error"):  # follow the policy's suggestion
        return tool_use("increment_revision", {})
    if "revision is now" in str(results[0]["content"]):
        new = int(str(results[0]["content"]).rsplit(" ", 1)[1])
        return tool_use("publish", {"revision": new})
    return text(f"Done: {results[0]['content']}.")


lead = create_agent(
    **model_options("batch_policy", fake),
    tools=[
        tool("increment_revision", "Create a new revision", NoInput, increment_revision),
        tool("publish", "Publish a revision", Publish, publish),
    ],
    tool_batch_policy=RevisionBeforePublish(),
)


async def main() -> None:
    async for msg in lead.query("Bump the revision and publish it."):
        if msg.type == "assistant" and msg.message.tool_uses:
            print("model calls:", ", ".join(u.name for u in msg.message.tool_uses))
        elif msg.type == "user":
            rejection = None
            for block in msg.message.blocks:
                if getattr(block, "is_error", False):
                    rejection = json.loads(str(block.content))
                    print(
                        f"  {block.tool_use_id}: {rejection['error']}, executed: {rejection['executed']}"
                    )
                else:
                    print(f"  -> {block.content}")
            if rejection:
                print(f"  rejected batch: {rejection['message']}")
                print(f"  suggested: {rejection['suggested_next_step']}")
        elif msg.type == "result":
            print(f"{msg.subtype}: {msg.result}")
    print("tools that actually ran, in order:", ran)


if __name__ == "__main__":
    asyncio.run(main())
