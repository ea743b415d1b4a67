"""Seeds, "Structured child output" and "Typed delegation": the child submits typed data
through submit_output (the agent tool inherits its schema), and a typed input schema with
map_input replaces the default task shape."""

from __future__ import annotations

import asyncio
import json

from _demo import model_options
from pydantic import BaseModel

from agent_lattice import agent_tool, create_agent, define_agent
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use


class Findings(BaseModel):
    files: list[str]
    notes: str


class Verdict(BaseModel):
    guilty: bool
    reason: str


class Document(BaseModel):
    title: str
    content: str


class Case(BaseModel):
    case_summary: str
    documents: list[Document]


def render_judge_task(case: Case) -> str:
    docs = "\n".join(f"## {d.title}\n{d.content}" for d in case.documents)
    return f"Judge this case.\n\nSummary: {case.case_summary}\n\n{docs}"


def fake(request: RecordedRequest) -> Reply:
    system = request.system or ""
    if "explore subagent" in system:
        return tool_use(
            "submit_output",
            {"files": ["runner.py", "mailbox.py"], "notes": "runner drives mailboxes"},
        )
    if "judge" in system:
        return tool_use("submit_output", {"guilty": False, "reason": "the documents agree"})
    results = [r["content"] for r in request.tool_results]
    if not request.tool_results and len(request.messages) == 1:
        return tool_use("explore", {"task": "Map the team runtime."})
    if len(request.messages) == 3:
        return tool_use(
            "judge",
            {
                "case_summary": "Two reports disagree on the release date.",
                "documents": [
                    {"title": "report A", "content": "Release on May 1."},
                    {"title": "report B", "content": "Release on May 1, confirmed."},
                ],
            },
        )
    return text(f"judge said: {results[0]}")


async def main() -> None:
    options = model_options("structured_delegation", fake)
    explorer = define_agent(
        name="explorer",
        system_prompt="You are an explore subagent. Inspect and report; do not make code changes.",
        output_schema=Findings,
        **options,
    )
    judge = define_agent(
        name="judge",
        system_prompt="You judge a case and submit a structured verdict.",
        output_schema=Verdict,
        **options,
    )
    supervisor = create_agent(
        name="supervisor",
        tools=[
            agent_tool("explore", explorer, description="Ask an explore subagent for a file map."),
            agent_tool(
                "judge",
                judge,
                description="Judge a case from its summary and documents.",
                input_schema=Case,
                map_input=render_judge_task,
            ),
        ],
        **options,
    )
    messages = [m async for m in supervisor.query("Map the runtime, then judge the case.")]
    for m in messages:
        if m.type == "user":
            for block in m.message.content:
                print(f"tool result: {json.loads(block.content)}")
    print(messages[-1].result)


if __name__ == "__main__":
    asyncio.run(main())
