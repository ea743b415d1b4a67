"""Seeds, "Strict Option Validation And Tool Metadata".

An unknown option fails at assembly with ``OptionError``. ``metadata`` on a tool is for the
host: it stays on the ``ToolDefinition`` and is never sent to the model.
"""

from __future__ import annotations

import asyncio
import json

from _demo import model_options
from pydantic import BaseModel

from agent_lattice import OptionError, ToolResult, create_agent, tool
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use

sent: list[RecordedRequest] = []  # what the scripted fake received (empty with a real model)


class Search(BaseModel):
    query: str


def search_documents(input: Search) -> ToolResult:
    return ToolResult(content=f"2 documents match {input.query!r}")


def fake(request: RecordedRequest) -> Reply:
    sent.append(request)
    if request.tool_results:
        return text(f"Search says: {request.tool_results[0]['content']}.")
    return tool_use("search", {"query": "contract"})


search = tool(
    "search",
    "Search documents",
    Search,
    search_documents,
    metadata={"contract_version": 3},
)


async def main() -> None:
    try:
        create_agent(model="claude-sonnet-4-5", bogus_option=1)
    except OptionError as err:
        print(f"OptionError: {err}")

    print("search.metadata:", search.metadata)
    agent = create_agent(**model_options("strict_options", fake), tools=[search])
    result = await agent.prompt("Find the contract.")
    print(result.result)
    if sent:
        sent_tool = sent[0].tools[0]
        print("the tool as sent to the model has keys:", sorted(sent_tool))
        print(
            "contract_version anywhere in the request:",
            "contract_version" in json.dumps(sent[0].body),
        )


if __name__ == "__main__":
    asyncio.run(main())
