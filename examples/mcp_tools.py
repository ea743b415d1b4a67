"""Seeds, "MCP Tools": an MCP server's tools as agent tools (needs agent-lattice[mcp])."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from _demo import model_options

from agent_lattice import connect_mcp_stdio_server, create_agent
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use


def fake(request: RecordedRequest) -> Reply:
    if not request.tool_results:
        return tool_use("docs_search", {"query": "installation"})
    return text(f"From the docs: {request.tool_results[0]['content']}")


async def main() -> None:
    mcp = await connect_mcp_stdio_server(
        {"command": sys.executable, "args": [str(Path(__file__).with_name("_docs_mcp_server.py"))]},
        name_prefix="docs",
    )
    try:
        agent = create_agent(tools=mcp.tools, **model_options("mcp_tools", fake))
        result = await agent.prompt("Search the docs for installation steps.")
        print(result.result)
    finally:
        await mcp.close()


if __name__ == "__main__":
    asyncio.run(main())
