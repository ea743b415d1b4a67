"""Seeds, "Structured Output Via submit_output": a typed result through the injected tool.

The fake model first submits a payload that does not match the schema, gets the validation
error back as an error tool result, and then submits a valid one.
"""

from __future__ import annotations

import asyncio

from _demo import model_options
from pydantic import BaseModel

from agent_lattice import SUBMIT_OUTPUT_TOOL_NAME, create_agent
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use


class Review(BaseModel):
    approved: bool
    issues: list[str]


def fake(request: RecordedRequest) -> Reply:
    if not request.tool_results:  # first try: wrong types, a field missing
        return tool_use(SUBMIT_OUTPUT_TOOL_NAME, {"approved": "looks fine to me"})
    if request.tool_results[0].get("is_error"):
        return tool_use(
            SUBMIT_OUTPUT_TOOL_NAME,
            {"approved": False, "issues": ["missing null check in parse()", "no tests"]},
        )
    return text("(called again after a valid submission)")


reviewer = create_agent(
    **model_options("structured_output", fake),
    system_prompt="Review the change and submit your verdict.",
    output_schema=Review,
)


async def main() -> None:
    print("tools the model sees:", [t.name for t in reviewer.tools])
    async for message in reviewer.query("Review the patch in this workspace."):
        if message.type == "assistant":
            for use in message.message.tool_uses:
                print(f"model calls {use.name}({use.input})")
        elif message.type == "user":
            for block in message.message.blocks:
                if getattr(block, "is_error", False):
                    print(f"  rejected: {block.content}")
        elif message.type == "result":
            print(f"subtype: {message.subtype}")
            print(f"structured_result: {message.structured_result}")
            print("as a Review:", Review.model_validate(message.structured_result))


if __name__ == "__main__":
    asyncio.run(main())
