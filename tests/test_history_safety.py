"""Determinism (replay of recorded histories) and secrets (never in history)."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from agent_lattice import (
    LatticePlugin,
    ResultMessage,
    StreamEventMessage,
    create_team,
    team_member,
)
from agent_lattice.testing import Script, error, message, slow, text, tool_use, tool_use_block

from conftest import (
    API_KEY,
    HISTORIES,
    HostMember,
    by_agent,
    keep_history,
    make_calculator,
    named_agent,
    waiting_tool,
)


def replayer() -> Replayer:
    return Replayer(workflows=[], plugins=[LatticePlugin(agents=[])])


async def run_scenarios(make_agent, fake_anthropic, runtime) -> dict[str, WorkflowHistory]:
    histories = {}
    fake_anthropic.set_handler(
        Script(tool_use("calculator", {"expr": "2+2"}), text("4"), text("Still 4."))
    )
    agent = make_agent(name="replayed", tools=[make_calculator()])
    first = await agent.prompt("What is 2+2?")
    second = await agent.prompt("And again?", stream=False)
    histories["tool_loop"] = await keep_history(runtime, first.workflow_id, "tool_loop")
    histories["second_turn"] = await keep_history(runtime, second.workflow_id, "second_turn")

    fake_anthropic.set_handler(Script(slow(text("x " * 300), delay=0.05)))
    interrupted = None
    async for m in agent.query("Talk a lot"):
        if isinstance(m, StreamEventMessage) and m.event["type"] == "content_block_delta":
            agent.interrupt()
        if isinstance(m, ResultMessage):
            interrupted = m
    assert interrupted is not None and interrupted.subtype == "interrupted"
    histories["interrupt"] = await keep_history(runtime, interrupted.workflow_id, "interrupt")

    fake_anthropic.set_handler(Script(error(400, "bad request body")))
    failed = await agent.prompt("fail")
    assert failed.subtype == "error_during_execution"
    histories["api_error"] = await keep_history(runtime, failed.workflow_id, "api_error")
    return histories


async def test_fresh_histories_replay_and_hold_no_secret(
    make_agent, fake_anthropic, lattice_runtime
):
    histories = await run_scenarios(make_agent, fake_anthropic, lattice_runtime)
    for name, history in histories.items():
        await replayer().replay_workflow(history)
        raw = history.to_json()
        assert API_KEY not in raw, f"the API key leaked into the {name} history"
        assert "x-api-key" not in raw.lower()
    # the key did reach the provider: it lives in the worker, not in the workflow
    assert all(r.api_key == API_KEY for r in fake_anthropic.requests)


@pytest.mark.parametrize(
    "path",
    sorted(HISTORIES.rglob("*.json")),
    ids=lambda p: str(p.relative_to(HISTORIES).with_suffix("")),
)
async def test_committed_histories_replay(path):
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    await replayer().replay_workflow(history)
    assert API_KEY not in path.read_text()


async def test_team_histories_replay(fake_anthropic, lattice_runtime):
    """A team run (handoffs to an agent and to a host AgentLike, reports, an ask) and its
    mailbox workflow (signals, updates) replay deterministically."""

    def handle(request):
        if "You are lead." not in (request.system or ""):
            prompt = request.messages[-1]["content"]
            if isinstance(prompt, str) and "message_id: " in prompt:  # a drained message
                message_id = prompt.split("message_id: ")[1].split("\n")[0]
                return tool_use("team_reply", {"message_id": message_id, "body": "replied"})
            return text("member done")
        if len(request.messages) == 1:
            return message(
                [
                    tool_use_block("member", {"mode": "handoff", "task": "a"}),
                    tool_use_block("host", {"mode": "handoff", "task": "b"}),
                ],
                stop_reason="tool_use",
            )
        if len(request.messages) == 3:
            return tool_use("member", {"mode": "ask", "task": "c"})
        return text("lead done")

    fake_anthropic.set_handler(handle)

    def bare(name):
        return named_agent(fake_anthropic, name)

    team = create_team(
        name="replayed",
        lead=bare("lead"),
        members=[
            team_member(name="member", agent=bare("member")),
            team_member(name="host", agent=HostMember(delay=0)),
        ],
        runner={"max_concurrent_work_items": 2},
    )
    result = await team.prompt("go")
    assert result.result == "lead done"
    await team.send("member", "please reply", from_="lead")
    assert not (await team.drain()).failed
    lead_run = result.workflow_id
    histories = {
        "team_run": await keep_history(
            lattice_runtime, f"team-replayed-{lead_run.removeprefix('lead-')}", "team_run"
        ),
        "team_lead": await keep_history(lattice_runtime, lead_run, "team_lead"),
        "team_mailbox": await keep_history(
            lattice_runtime, team.mailbox.workflow_id, "team_mailbox"
        ),
    }
    for name, history in histories.items():
        await replayer().replay_workflow(history)
        assert API_KEY not in history.to_json(), name


async def test_team_mail_histories_replay(fake_anthropic, lattice_runtime):
    """A team run whose runtime claims mail as it arrives (a member's team_send to a peer, the
    peer's reply, a message to the lead delivered with its tool results) replays."""

    def lead(request):
        if len(request.messages) == 1:
            return tool_use("researcher", {"mode": "handoff", "task": "research"})
        if "Team mail in your mailbox" in (request.last_user_text or ""):
            return text("lead done")
        return tool_use("wait_for_mail", {})

    def researcher(request):
        prompt = request.messages[-1]["content"]
        if prompt == "research" or (isinstance(prompt, str) and prompt.startswith("research\n")):
            return tool_use("team_send", {"to": "writer", "body": "draft it"})
        return text("ok")

    def writer(request):
        prompt = request.messages[-1]["content"]
        if not isinstance(prompt, str):
            return text("replied")
        message_id = prompt.split("message_id: ")[1].split("\n")[0]
        return message(
            [
                tool_use_block("team_reply", {"message_id": message_id, "body": "drafted"}),
                tool_use_block("team_send", {"to": "lead", "body": "FYI: drafted"}),
            ],
            stop_reason="tool_use",
        )

    fake_anthropic.set_handler(by_agent(lead=lead, researcher=researcher, writer=writer))

    async def settled():
        boxes = [await team.mailbox.inbox(f"mailed::{n}") for n in ("writer", "researcher")]
        return [m.status for box in boxes for m in box] == ["done"] * 3

    team = create_team(
        name="mailed",
        lead=named_agent(fake_anthropic, "lead", tools=[waiting_tool(settled)], max_turns=40),
        members=[
            team_member(name="researcher", agent=named_agent(fake_anthropic, "researcher")),
            team_member(name="writer", agent=named_agent(fake_anthropic, "writer")),
        ],
    )
    result = await team.prompt("go")
    assert result.result == "lead done"
    lead_run = result.workflow_id
    histories = {
        "team_mail_run": await keep_history(
            lattice_runtime, f"team-mailed-{lead_run.removeprefix('lead-')}", "team_mail_run"
        ),
        "team_mail_lead": await keep_history(lattice_runtime, lead_run, "team_mail_lead"),
    }
    for name, history in histories.items():
        await replayer().replay_workflow(history)
        assert API_KEY not in history.to_json(), name


def test_histories_are_committed():
    names = {p.stem for p in HISTORIES.glob("*.json")}
    assert {"tool_loop", "interrupt", "api_error", "crash_mid_tool", "crash_mid_stream"} <= names
    assert {"team_run", "team_lead", "team_mailbox", "team_mail_run", "team_mail_lead"} <= names
    assert "approval" in names
    assert {"approvers", "approvers_continued"} <= names  # approvers checked, carried on
    assert {"steered", "steered_final_answer"} <= names  # steers: a batch's, a final answer's
    assert {"team_run", "team_lead", "team_mailbox"} <= names
    assert {"child_landing", "child_store_failed"} <= names
    assert "indexed_run" in names  # search attributes upserted, a budget spent
    assert "indexed_every" in names  # tokens upserted at a turn index_every_s after the last
    # an error result ends the run Failed; a cancel request interrupts a run, its delegate,
    # a team (tests/test_outcomes.py)
    assert {"failed_run", "canceled_run", "canceled_parent", "canceled_child"} <= names
    assert {"canceled_team", "canceled_team_lead"} <= names
