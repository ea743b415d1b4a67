"""Seeds, "LangSmith Context Tracing": one root chain run per query, turns and tools beneath.

With LANGSMITH_API_KEY set the runs go to LangSmith (LANGSMITH_ENDPOINT, LANGSMITH_PROJECT,
LANGSMITH_WORKSPACE_ID as usual); without it a local stand-in records them and the example
prints the tree it received.
"""

from __future__ import annotations

import asyncio
import os
import sys

from _demo import model_options
from langsmith import Client
from pydantic import BaseModel

from agent_lattice import (
    create_agent,
    create_composite_context_tracer,
    create_jsonl_context_tracer,
    create_langsmith_context_tracer,
    tool,
)
from agent_lattice.testing import FakeTracingServer, RecordedRequest, Reply, text, tool_use


class Query(BaseModel):
    query: str


def fake(request: RecordedRequest) -> Reply:
    if not request.tool_results:
        return tool_use("lookup", {"query": "tracing"})
    return text("Traced.")


async def main() -> None:
    ingest = None
    if os.environ.get("LANGSMITH_API_KEY"):
        langsmith = create_langsmith_context_tracer(
            project_name=os.environ.get("LANGSMITH_PROJECT"),
            workspace_id=os.environ.get("LANGSMITH_WORKSPACE_ID"),
            tags=["local-debug"],
        )
    else:
        ingest = FakeTracingServer().start()
        print(
            "langsmith_tracing: LANGSMITH_API_KEY is not set, so a local stand-in records the runs.",
            file=sys.stderr,
        )
        client = Client(api_url=ingest.url, api_key="demo", auto_batch_tracing=False)
        langsmith = create_langsmith_context_tracer(client=client, tags=["local-debug"])
    tracer = create_composite_context_tracer(
        [create_jsonl_context_tracer(path=".agent-runs/session.jsonl"), langsmith]
    )
    lookup = tool("lookup", "Look something up", Query, lambda q: f"notes on {q.query}")
    agent = create_agent(
        name="traced", tools=[lookup], tracer=tracer, **model_options("langsmith_tracing", fake)
    )
    try:
        await agent.prompt("Trace this run.", stream=False)
    finally:
        await tracer.close()
    if ingest is not None:
        runs = sorted(ingest.runs().values(), key=lambda r: r["dotted_order"])
        for run in runs:
            depth = run["dotted_order"].count(".")
            print(f"{'  ' * depth}{run['run_type']} {run['name']}")
        ingest.stop()


if __name__ == "__main__":
    asyncio.run(main())
