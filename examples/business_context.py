"""Seeds, "Business Context For Tools": host data reaches tool handlers as ``ctx.context``.

The model sees the context only when a tool returns it; it is never put in the transcript.
"""

from __future__ import annotations

import asyncio
import json

from _demo import model_options
from pydantic import BaseModel

from agent_lattice import ToolContext, ToolResult, create_bare_agent, tool
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use

sent: list[RecordedRequest] = []  # what the scripted fake received (empty with a real model)


class NoInput(BaseModel):
    pass


def read_patient_record(_input: NoInput, ctx: ToolContext) -> ToolResult:
    context = ctx.context or {}
    return ToolResult(
        content=json.dumps(
            {
                "patient_record_id": context.get("patient_record_id"),
                "scoring_standard_id": context.get("scoring_standard_id"),
            }
        )
    )


def fake(request: RecordedRequest) -> Reply:
    sent.append(request)
    if request.tool_results:
        return text(f"Reviewed the record the tool returned: {request.tool_results[0]['content']}")
    return tool_use("read_patient_record", {})


agent = create_bare_agent(
    **model_options("business_context", fake),
    tools=[
        tool("read_patient_record", "Read the current patient record", NoInput, read_patient_record)
    ],
)


async def main() -> None:
    result = await agent.prompt(
        "Review the current patient record.",
        context={
            "patient_record_id": "ocr_123",
            "scoring_standard_id": "tumor-treatment-process-v1",
        },
    )
    print(result.result)
    if sent:
        print("ocr_123 in the first model request:", "ocr_123" in json.dumps(sent[0].body))
        print("ocr_123 in the second (after the tool):", "ocr_123" in json.dumps(sent[1].body))


if __name__ == "__main__":
    asyncio.run(main())
