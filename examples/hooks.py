"""Seeds, "Hooks": redact tool output and trim the context of each request, composed.

``on_tool_result`` rewrites what ``query_database`` returns before the model sees it;
``on_model_request`` sends only the recent messages, while the stored history keeps all.
"""

from __future__ import annotations

import asyncio
import re

from _demo import model_options
from pydantic import BaseModel

from agent_lattice import (
    ModelMessage,
    ModelRequestContext,
    ToolResult,
    ToolResultContext,
    create_agent,
    create_composite_agent_hooks,
    tool,
)
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use

KEEP_MESSAGES = 4
EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")


class Sql(BaseModel):
    sql: str


def query_database(input: Sql) -> ToolResult:
    return ToolResult(content="id=7 name=Ada Lovelace email=ada@example.com plan=pro")


def redact(ctx: ToolResultContext):
    if ctx.tool_name != "query_database" or not isinstance(ctx.result.content, str):
        return None  # None: leave unchanged
    return ctx.result.model_copy(update={"content": EMAIL.sub("[redacted]", ctx.result.content)})


def compact(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The last messages from a prompt on (never cutting a tool_use from its tool_result)."""
    for start in range(max(0, len(messages) - KEEP_MESSAGES), len(messages)):
        if messages[start].role == "user" and isinstance(messages[start].content, str):
            return messages[start:]
    return messages


def trim(ctx: ModelRequestContext):
    if len(ctx.messages) <= KEEP_MESSAGES:
        return None
    return {"messages": compact(ctx.messages)}


redaction_hooks = {"on_tool_result": redact}
truncation_hooks = {"on_model_request": trim}


def fake(request: RecordedRequest) -> Reply:
    if request.tool_results:
        return text(f"The database says: {request.tool_results[0]['content']}")
    if "customer" in (request.last_user_text or ""):
        return tool_use("query_database", {"sql": "SELECT * FROM customers WHERE id = 7"})
    return text(f"The model received {len(request.messages)} message(s).")


agent = create_agent(
    **model_options("hooks", fake),
    tools=[tool("query_database", "Run a read-only SQL query", Sql, query_database)],
    hooks=create_composite_agent_hooks([redaction_hooks, None, truncation_hooks]),
)


async def main() -> None:
    result = await agent.prompt("Look up customer 7.")
    print(result.result)
    for question in ("What plan are they on?", "Anything else?"):
        would_send = len(await agent.get_history()) + 1  # the history plus this prompt
        result = await agent.prompt(question)
        print(f"{question!r} ({would_send} messages before trimming): {result.result}")
    print(f"stored history: {len(await agent.get_history())} messages (untouched by the hook)")


if __name__ == "__main__":
    asyncio.run(main())
