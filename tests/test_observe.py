"""mode "observe": unsupported unless the host runtime provides observation support
(``observer=`` on agent_tool()/delegate_tool() or create_team()), which then answers it."""

from __future__ import annotations

import json

import pytest

from agent_lattice import (
    ObserveRequest,
    OptionError,
    ToolResult,
    agent_tool,
    create_team,
    team_member,
)
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use

from conftest import HostMember, by_agent
from conftest import named_agent as agent


class Watcher:
    def __init__(self, answer: object = "helper is drafting section 2") -> None:
        self.requests: list[ObserveRequest] = []
        self.answer = answer

    async def observe(self, request: ObserveRequest) -> object:
        self.requests.append(request)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _lead_observing(target: str):
    def lead(request: RecordedRequest) -> Reply:
        if len(request.messages) == 1:
            return tool_use(target, {"mode": "observe", "task": "how far along?"})
        return text("noted")

    return lead


def _answer_to_lead(fake) -> dict:
    to_lead = [r for r in fake.requests if "You are lead." in (r.system or "")]
    (result,) = to_lead[1].tool_results
    return result


async def test_without_observation_support_observe_stays_unsupported(
    fake_anthropic, lattice_runtime
):
    fake_anthropic.set_handler(by_agent(lead=_lead_observing("helper")))
    lead = agent(
        fake_anthropic, "lead", tools=[agent_tool("helper", agent(fake_anthropic, "helper"))]
    )
    assert (await lead.prompt("go")).result == "noted"
    answer = _answer_to_lead(fake_anthropic)
    assert answer["is_error"] and answer["content"].startswith("observe_unsupported")


async def test_the_host_observer_answers_observe_and_the_target_never_runs(
    fake_anthropic, lattice_runtime
):
    fake_anthropic.set_handler(by_agent(lead=_lead_observing("helper")))
    watcher = Watcher()
    helper = agent(fake_anthropic, "helper")
    lead = agent(fake_anthropic, "lead", tools=[agent_tool("helper", helper, observer=watcher)])
    assert (await lead.prompt("go")).result == "noted"
    answer = _answer_to_lead(fake_anthropic)
    assert not answer.get("is_error") and answer["content"] == "helper is drafting section 2"
    (request,) = watcher.requests
    assert (request.target, request.task, request.team) == ("helper", "how far along?", None)
    assert request.input["mode"] == "observe"
    assert not any("You are helper." in (r.system or "") for r in fake_anthropic.requests)
    assert await helper.get_history() == []


async def test_a_team_s_observer_sees_member_observes_host_members_too(
    fake_anthropic, lattice_runtime
):
    def lead(request: RecordedRequest) -> Reply:
        if len(request.messages) == 1:
            return tool_use("host", {"mode": "observe", "task": "status?"})
        if len(request.messages) == 3:
            return tool_use("writer", {"mode": "observe", "task": "status?"})
        return text("noted")

    fake_anthropic.set_handler(by_agent(lead=lead))
    watcher = Watcher(ToolResult(content=json.dumps({"progress": 0.5})))
    host = HostMember()
    team = create_team(
        name="observed",
        lead=agent(fake_anthropic, "lead"),
        members=[
            team_member(name="host", agent=host),
            team_member(name="writer", agent=agent(fake_anthropic, "writer")),
        ],
        observer=watcher,
    )
    assert (await team.prompt("go")).result == "noted"
    assert [(r.team, r.member) for r in watcher.requests] == [
        ("observed", "host"),
        ("observed", "writer"),
    ]
    assert host.prompts == []  # observed, not asked
    to_lead = [r for r in fake_anthropic.requests if "You are lead." in (r.system or "")]
    assert json.loads(to_lead[2].tool_results[0]["content"]) == {"progress": 0.5}


async def test_a_failing_observer_is_an_error_result_and_a_bad_one_is_refused(
    fake_anthropic, lattice_runtime
):
    fake_anthropic.set_handler(by_agent(lead=_lead_observing("helper")))
    watcher = Watcher(RuntimeError("dashboard down"))
    lead = agent(
        fake_anthropic,
        "lead",
        tools=[agent_tool("helper", agent(fake_anthropic, "helper"), observer=watcher)],
    )
    assert (await lead.prompt("go")).result == "noted"
    answer = _answer_to_lead(fake_anthropic)
    assert answer["is_error"] and "dashboard down" in answer["content"]
    with pytest.raises(OptionError, match="observer must provide observe"):
        agent_tool("x", agent(fake_anthropic, "x"), observer=object())
    with pytest.raises(OptionError, match="observer must provide observe"):
        create_team(name="t", lead=agent(fake_anthropic, "l"), members=[], observer=42)
