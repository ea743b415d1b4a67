"""Seeds, "Langfuse Context Tracing": one trace per query; the run is a chain observation,
model turns are generations and tool calls are tools.

With LANGFUSE_PUBLIC_KEY/LANGFUSE_SECRET_KEY set the spans go to LANGFUSE_BASE_URL; without
them a local stand-in receives the OTLP export and the example prints what arrived.
"""

from __future__ import annotations

import asyncio
import os
import sys

from _demo import model_options
from langfuse import Langfuse
from pydantic import BaseModel

from agent_lattice import create_agent, create_langfuse_context_tracer, tool
from agent_lattice.testing import FakeTracingServer, RecordedRequest, Reply, text, tool_use


class Query(BaseModel):
    query: str


def fake(request: RecordedRequest) -> Reply:
    if not request.tool_results:
        return tool_use("lookup", {"query": "tracing"})
    return text("Traced.")


async def main() -> None:
    ingest = None
    if os.environ.get("LANGFUSE_PUBLIC_KEY"):
        langfuse = Langfuse()
    else:
        ingest = FakeTracingServer().start()
        print(
            "langfuse_tracing: LANGFUSE_PUBLIC_KEY is not set, so a local stand-in receives the spans.",
            file=sys.stderr,
        )
        langfuse = Langfuse(public_key="pk-demo", secret_key="sk-demo", base_url=ingest.url)
    tracer = create_langfuse_context_tracer(client=langfuse, tags=["local-debug"])
    lookup = tool("lookup", "Look something up", Query, lambda q: f"notes on {q.query}")
    agent = create_agent(
        name="traced", tools=[lookup], tracer=tracer, **model_options("langfuse_tracing", fake)
    )
    try:
        await agent.prompt("Trace this run.", stream=False)
    finally:
        await tracer.close()  # drains the exporter before the process exits
    if ingest is not None:
        ours = [
            s for s in ingest.spans if FakeTracingServer.attribute(s, "langfuse.observation.type")
        ]
        for span in sorted(ours, key=lambda s: s.start_time_unix_nano):
            kind = FakeTracingServer.attribute(span, "langfuse.observation.type")
            print(f"{kind} {span.name}")
        ingest.stop()


if __name__ == "__main__":
    asyncio.run(main())
