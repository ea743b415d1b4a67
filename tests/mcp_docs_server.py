"""A small real MCP server for the tests: stdio by default, Streamable HTTP with ``--http PORT``.

With ``--http`` every request must carry ``X-Workspace: demo`` and ``Authorization: Bearer
test-token`` (what the client's headers and auth provider add), or it gets 401.
"""

from __future__ import annotations

import asyncio
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

DOCS = {
    "installation": "Run pip install agent-lattice, then lattice dev.",
    "deploy": "Run lattice worker app:agents next to a Temporal cluster.",
}

server = MCPServer("docs")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def search(query: str) -> str:
    """Search the docs; returns matching sections."""
    hits = [f"{k}: {v}" for k, v in DOCS.items() if query.lower() in f"{k} {v}".lower()]
    return "\n".join(hits) or "no match"


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the given reason."""
    raise ToolError(reason)


@server.tool()
async def slow(seconds: float) -> str:
    """Sleeps, then answers."""
    await asyncio.sleep(seconds)
    return "done"


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        import uvicorn
        from starlette.middleware.base import BaseHTTPMiddleware
        from starlette.responses import PlainTextResponse

        app = server.streamable_http_app()

        async def require_headers(request, call_next):
            if (
                request.headers.get("x-workspace") != "demo"
                or request.headers.get("authorization") != "Bearer test-token"
            ):
                return PlainTextResponse("unauthorized", status_code=401)
            return await call_next(request)

        app.add_middleware(BaseHTTPMiddleware, dispatch=require_headers)
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    else:
        server.run()


if __name__ == "__main__":
    main()
