"""Seeds, "JSONL Context Tracing" for teams: pass the tracer per query, and it follows the
query into the agents it delegates to. Each delegated run's run_start names its parent run."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from _demo import model_options

from agent_lattice import create_agent, create_jsonl_context_tracer, create_team, team_member
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use


def fake(request: RecordedRequest) -> Reply:
    if "You lead engineering" in (request.system or ""):
        if len(request.messages) == 1:
            return tool_use("researcher", {"mode": "handoff", "task": "Inspect the SDK design."})
        return text("Engineering: the design is sound.")
    return text("The SDK runs each query as a Temporal workflow.")


async def main() -> None:
    options = model_options("team_tracing", fake)
    team = create_team(
        name="engineering",
        lead=create_agent(
            name="lead", system_prompt="You lead engineering work.", workspace=False, **options
        ),
        members=[
            team_member(
                name="researcher",
                agent=create_agent(
                    name="researcher",
                    system_prompt="You research agent SDK architecture.",
                    workspace=False,
                    **options,
                ),
            )
        ],
    )
    path = Path(tempfile.mkdtemp()) / "team.jsonl"
    tracer = create_jsonl_context_tracer(path=path)
    try:
        result = await team.prompt("Ask engineering to investigate.", tracer=tracer)
    finally:
        await tracer.close()
    print(result.result)
    for line in path.read_text().splitlines():
        event = json.loads(line)
        if event["type"] == "run_start":
            parent = event["data"].get("parent")
            below = f" (delegated by run {parent['run_id'][:8]}…)" if parent else ""
            print(f"run_start {event['source']}{below}")


if __name__ == "__main__":
    asyncio.run(main())
