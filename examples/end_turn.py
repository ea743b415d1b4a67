"""Seeds, "End The Run From A Tool": a tool returning ``end_turn=True`` finishes the run."""

from __future__ import annotations

import asyncio

from _demo import model_options
from pydantic import BaseModel

from agent_lattice import ToolResult, create_agent, tool
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use


class Answer(BaseModel):
    answer: str


def finish(input: Answer) -> ToolResult:
    return ToolResult(
        content=input.answer,
        end_turn=True,
        structured_result={"answer": input.answer, "confidence": "high"},
    )


def fake(request: RecordedRequest) -> Reply:
    if request.tool_results:
        return text("(the model was called again after finish: end_turn did not end the run)")
    return tool_use("finish", {"answer": "2 + 2 = 4"})


agent = create_agent(
    **model_options("end_turn", fake),
    system_prompt="When you know the answer, call finish with it.",
    tools=[tool("finish", "Submit the final answer and end the run", Answer, finish)],
)


async def main() -> None:
    result = await agent.prompt("What is 2+2?")
    print(f"subtype: {result.subtype}, model requests: {result.num_turns}")
    print(f"result: {result.result}")
    print(f"structured_result: {result.structured_result}")


if __name__ == "__main__":
    asyncio.run(main())
