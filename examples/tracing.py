"""Seeds, "JSONL Context Tracing": observe a run without changing the agent loop."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from _demo import model_options

from agent_lattice import create_agent, create_jsonl_context_tracer
from agent_lattice.testing import text

path = Path(tempfile.mkdtemp()) / ".agent-runs" / "session.jsonl"
tracer = create_jsonl_context_tracer(path=path)
agent = create_agent(tracer=tracer, **model_options("tracing", lambda request: text("Hello, Ada.")))


async def main() -> None:
    try:
        await agent.prompt("Remember that my name is Ada.")
    finally:
        await tracer.close()
    for line in path.read_text().splitlines():
        event = json.loads(line)
        print(event["seq"], event["type"])


if __name__ == "__main__":
    asyncio.run(main())
