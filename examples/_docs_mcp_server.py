"""The stdio MCP server the MCP example connects to: one read-only docs search tool."""

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

DOCS = {
    "installation": "pip install agent-lattice, then run lattice dev.",
    "workers": "lattice worker app:agents serves an app's agents.",
}

server = MCPServer("docs")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def search(query: str) -> str:
    """Search the documentation and return the matching sections."""
    words = query.lower().split()
    hits = [f"{k}: {v}" for k, v in DOCS.items() if any(w in f"{k} {v}" for w in words)]
    return "\n".join(hits) or "no match"


if __name__ == "__main__":
    server.run()
