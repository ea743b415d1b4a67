"""MCP tools served by workers: an app module declares its MCP server at import, no await.

``mcp_stdio_server(...)`` lists the server's tools now (the agent's definition needs their
names and schemas) and starts the server for calls on the loop that runs them: this script's,
or the worker's. The same module works as a script, under ``lattice run`` and under
``lattice worker``/``lattice dev`` (needs ``pip install mcp-server-time``)::

    python examples/mcp_worker.py "What time is it in Paris?"
    lattice run examples/mcp_worker.py:clock "What time is it in Paris?"
    lattice worker examples/mcp_worker.py       # serve it from a separate process

If the server dies, the call that meets the dead connection is an error result saying so and
the next call starts the server again; the worker stops the server when it shuts down.
Without ``ANTHROPIC_API_KEY`` a scripted fake model asks the server for the time and answers
with what the server said.
"""

from __future__ import annotations

import asyncio
import sys

from _demo import model_options

from agent_lattice import create_agent, mcp_stdio_server
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use

time_server = mcp_stdio_server({"command": sys.executable, "args": ["-m", "mcp_server_time"]})

CITIES = {
    "paris": "Europe/Paris",
    "london": "Europe/London",
    "tokyo": "Asia/Tokyo",
    "new york": "America/New_York",
}


def fake(request: RecordedRequest) -> Reply:
    """Asks the time server for the prompt's city, then answers with what it said."""
    if not request.tool_results:
        prompt = (request.last_user_text or "").lower()
        zone = next((z for city, z in CITIES.items() if city in prompt), "Europe/Paris")
        return tool_use("get_current_time", {"timezone": zone})
    result = request.tool_results[0]
    said = " ".join(str(result["content"]).split())  # the server's JSON, on one line
    if result.get("is_error"):
        return text(f"The time server failed: {said}")
    return text(f"The time server says: {said}")


clock = create_agent(
    name="clock",
    system_prompt="Answer questions about the time with the time server's tools, in one line.",
    tools=time_server.tools,
    **model_options("mcp_worker", fake),
)


async def main(prompt: str) -> None:
    result = await clock.prompt(prompt)
    print(result.result)


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "What time is it in Paris?"))
