"""Seeds, "Deadlines": ``request_timeout_ms`` bounds each model request (``error_timeout``);
``timeout=`` bounds the whole query (``error_abort``)."""

from __future__ import annotations

import asyncio
import time

from _demo import model_options
from pydantic import BaseModel

from agent_lattice import ToolResult, create_agent, tool
from agent_lattice.testing import RecordedRequest, Reply, hang, text, tool_use


class NoInput(BaseModel):
    pass


async def scan_repository(_input: NoInput) -> ToolResult:
    await asyncio.sleep(5)  # longer than the query may take
    return ToolResult(content="no findings")


def fake(request: RecordedRequest) -> Reply:
    # the interrupted audit's prompt and the next one reach the model as one user message
    if (request.last_user_text or "").endswith("Audit this repository."):
        return hang(5)  # accept the request and never answer within the deadline
    if request.tool_results:
        return text(f"Scan finished: {request.tool_results[0]['content']}.")
    return tool_use("scan_repository", {})


agent = create_agent(
    **model_options("deadlines", fake),
    tools=[tool("scan_repository", "Scan the whole repository", NoInput, scan_repository)],
    request_timeout_ms=120_000,
)


async def main() -> None:
    # The agent allows 120 s per model request; this query allows 500 ms.
    result = await agent.prompt("Audit this repository.", request_timeout_ms=500)
    print(f"request_timeout_ms=500 -> {result.subtype}")
    print(f"  {result.error.type if result.error else None}: {result.result}")

    started = time.monotonic()
    result = await agent.prompt("Scan the repository for secrets.", timeout=1.0)
    print(f"timeout=1.0 -> {result.subtype} after {time.monotonic() - started:.1f} s")
    print(f"  {result.error.type if result.error else None}: {result.result}")
    answer = (await agent.get_history())[-1].blocks[0]
    print(f"  the aborted scan still got its result in history: {answer.content!r}")


if __name__ == "__main__":
    asyncio.run(main())
