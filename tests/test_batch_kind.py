"""A tool batch policy sees each call's kind: "agent_tool" for calls that delegate (agent_tool,
delegate_tool, a team's member tools), "tool" for the rest; the seeds' example policy (no
revision update and handoff in one batch) fires."""

from __future__ import annotations

import json

from pydantic import BaseModel

from agent_lattice import (
    ResultMessage,
    ToolResult,
    agent_tool,
    create_team,
    define_agent,
    delegate_tool,
    team_member,
    tool,
)
from agent_lattice.testing import RecordedRequest, Reply, collect, message, text, tool_use_block

from conftest import API_KEY, by_agent
from conftest import named_agent as agent


class Revision(BaseModel):
    note: str


class SeenKinds:
    """The seeds' policy: a revision update and a handoff may not share a batch."""

    def __init__(self) -> None:
        self.seen: list[list[tuple[str, str]]] = []

    def validate(self, request):
        self.seen.append([(c.name, c.kind) for c in request.tool_calls])
        bump = next((c for c in request.tool_calls if c.name == "increment_revision"), None)
        handoff = next(
            (
                c
                for c in request.tool_calls
                if c.kind == "agent_tool" and (c.input or {}).get("mode") == "handoff"
            ),
            None,
        )
        if bump and handoff:
            return {
                "allowed": False,
                "code": "invalid_tool_batch",
                "message": "Update the revision before delegating dependent work.",
                "conflictingToolCallIds": [bump.id, handoff.id],
            }
        return {"allowed": True}


def _bump(calls: list[str]):
    def run(input: Revision) -> ToolResult:
        calls.append(input.note)
        return ToolResult(content="revision 2")

    return tool("increment_revision", "Bump the revision.", Revision, run)


async def test_calls_that_delegate_are_agent_tools_direct_and_delegated(
    fake_anthropic, lattice_runtime
):
    def lead(request: RecordedRequest) -> Reply:
        if len(request.messages) == 1:
            return message(
                [
                    tool_use_block("increment_revision", {"note": "x"}),
                    tool_use_block("helper", {"mode": "ask", "task": "check"}),
                    tool_use_block("fresh", {"mode": "ask", "task": "check"}),
                ],
                stop_reason="tool_use",
            )
        return text("done")

    fake_anthropic.set_handler(
        by_agent(lead=lead, helper=lambda r: text("ok"), fresh=lambda r: text("ok"))
    )
    policy, bumps = SeenKinds(), []
    spec = define_agent(
        api_key=API_KEY,
        base_url=fake_anthropic.base_url,
        model="claude-test",
        name="fresh",
        system_prompt="You are fresh.",
    )
    lead_agent = agent(
        fake_anthropic,
        "lead",
        tools=[
            _bump(bumps),
            agent_tool("helper", agent(fake_anthropic, "helper")),
            delegate_tool("fresh", spec),
        ],
        tool_batch_policy=policy,
    )
    result = await lead_agent.prompt("go")
    assert result.result == "done" and bumps == ["x"]  # asks are allowed beside the update
    assert policy.seen == [
        [("increment_revision", "tool"), ("helper", "agent_tool"), ("fresh", "agent_tool")]
    ]


async def test_the_seeds_policy_rejects_a_revision_update_and_a_handoff_in_one_batch(
    fake_anthropic, lattice_runtime
):
    seen_by_lead: list[list[dict]] = []

    def lead(request: RecordedRequest) -> Reply:
        seen_by_lead.append(request.messages)
        if len(request.messages) == 1:
            return message(
                [
                    tool_use_block("increment_revision", {"note": "x"}),
                    tool_use_block("writer", {"mode": "handoff", "task": "draft"}),
                ],
                stop_reason="tool_use",
            )
        return text("will retry in order")

    fake_anthropic.set_handler(by_agent(lead=lead, writer=lambda r: text("draft done")))
    policy, bumps = SeenKinds(), []
    team = create_team(
        name="revisions",
        lead=agent(fake_anthropic, "lead", tools=[_bump(bumps)], tool_batch_policy=policy),
        members=[team_member(name="writer", agent=agent(fake_anthropic, "writer"))],
    )
    messages = await collect(team.query("go"))
    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.result == "will retry in order"
    assert policy.seen == [[("increment_revision", "tool"), ("writer", "agent_tool")]]
    assert bumps == []  # the batch was rejected: no tool ran
    answered = [b for b in seen_by_lead[1][-1]["content"] if b["type"] == "tool_result"]
    assert len(answered) == 2 and all(b["is_error"] for b in answered)
    body = json.loads(answered[0]["content"])
    assert body["error"] == "invalid_tool_batch"
