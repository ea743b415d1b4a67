"""Seeds, "Concurrent Tool Calls": calls whose tool is concurrency-safe run together.

The fake model asks for three searches in one response; each takes 0.3 s, and the batch
takes about 0.3 s, not 0.9 s. Results go back in the order of the calls.
"""

from __future__ import annotations

import asyncio
import time

from _demo import model_options
from pydantic import BaseModel

from agent_lattice import Agent, ToolResult, create_agent, tool
from agent_lattice.testing import RecordedRequest, Reply, message, text, tool_use_block

QUERIES = ["durable workflows", "tool concurrency", "batch policy"]
spans: list[tuple[float, float]] = []


class Search(BaseModel):
    query: str


async def search(input: Search) -> ToolResult:
    started = time.monotonic()
    await asyncio.sleep(0.3)  # app code: replace with your database or search client
    spans.append((started, time.monotonic()))
    return ToolResult(content=f"3 documents about {input.query}")


def fake(request: RecordedRequest) -> Reply:
    if request.tool_results:
        found = "; ".join(str(r["content"]) for r in request.tool_results)
        return text(f"Found: {found}.")
    return message(
        [tool_use_block("search", {"query": q}) for q in QUERIES], stop_reason="tool_use"
    )


options = model_options("concurrent_tools", fake)
search_tool = tool("search", "Search documents", Search, search, is_concurrency_safe=lambda _: True)
agent = create_agent(
    **options,
    tools=[search_tool],
    tool_concurrency={"mode": "safe", "max_concurrency": 8},
)
# For contrast: the same tool with concurrency turned off.
sequential = create_agent(**options, tools=[search_tool], tool_concurrency={"mode": "sequential"})


async def batch_seconds(agent: Agent) -> tuple[str, float, bool]:
    """Run one query; return its answer, how long its tool batch took, and whether the calls
    overlapped."""
    spans.clear()
    result = await agent.prompt("Search for three topics at once.")
    batch = max(end for _, end in spans) - min(start for start, _ in spans)
    overlapped = max(start for start, _ in spans) < min(end for _, end in spans)
    return result.result or "", batch, overlapped


async def main() -> None:
    answer, batch, overlapped = await batch_seconds(agent)
    print(answer)
    print(f'mode "safe": 3 searches of 0.3 s each took {batch:.1f} s together')
    print(f"the three searches overlapped: {overlapped}")
    _, batch, overlapped = await batch_seconds(sequential)
    print(f'mode "sequential": the same batch took {batch:.1f} s (overlapped: {overlapped})')


if __name__ == "__main__":
    asyncio.run(main())
