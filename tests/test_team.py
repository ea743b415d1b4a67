"""Mailbox teams on a TeamWorkflow: ask, handoff receipts and ordered reports, failure
isolation, bounded concurrency, events."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from temporalio.worker import Replayer

from agent_lattice import (
    AgentMessageEvent,
    LatticePlugin,
    OptionError,
    ResultMessage,
    TeamAgentEvent,
    TeamMessageEvent,
    create_team,
    define_agent,
    team_member,
)
from agent_lattice.testing import (
    RecordedRequest,
    Reply,
    Script,
    collect,
    error,
    message,
    slow,
    text,
    tool_use,
    tool_use_block,
)

from conftest import API_KEY, HostMember, by_agent, child_ids
from conftest import named_agent as agent


async def test_handoffs_answer_with_receipts_then_reports_in_handoff_order(
    fake_anthropic, lattice_runtime
):
    seen_by_lead: list[list[dict]] = []

    def lead(request: RecordedRequest) -> Reply:
        seen_by_lead.append(request.messages)
        if len(request.messages) == 1:
            return message(
                [
                    tool_use_block("researcher", {"mode": "handoff", "task": "slow research"}),
                    tool_use_block("writer", {"mode": "handoff", "task": "quick draft"}),
                ],
                stop_reason="tool_use",
            )
        return text("Both reported.")

    fake_anthropic.set_handler(
        by_agent(
            lead=lead,
            # the writer finishes first: by seconds, so a loaded machine keeps the order
            researcher=lambda r: slow(text("research done"), delay=3.0),
            writer=lambda r: text("draft done"),
        )
    )
    team = create_team(
        name="engineering",
        lead=agent(fake_anthropic, "lead"),
        members=[
            team_member(
                name="researcher",
                role="executor",
                focus="Research",
                agent=agent(fake_anthropic, "researcher"),
            ),
            team_member(name="writer", role="executor", agent=agent(fake_anthropic, "writer")),
        ],
        runner={"max_concurrent_work_items": 2},
    )

    messages = await collect(team.query("Plan the release."))

    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.result == "Both reported."
    # the lead was asked exactly twice: after the batch it waited for both reports
    assert len(seen_by_lead) == 2
    last_user = seen_by_lead[1][-1]["content"]
    receipts = [json.loads(b["content"]) for b in last_user if b["type"] == "tool_result"]
    assert [r["status"] for r in receipts] == ["accepted", "accepted"]
    assert all(r["phase"] == "queued" and r["completion_pending"] for r in receipts)
    assert {"message_id", "work_item_id", "thread_id"} <= set(receipts[0])
    reports = last_user[-1]["text"]
    # in handoff order, though the writer finished first
    assert reports.index("report from researcher") < reports.index("report from writer")
    assert "research done" in reports and "draft done" in reports
    events = [m for m in messages if isinstance(m, TeamMessageEvent | TeamAgentEvent)]
    finished = [e.member for e in events if isinstance(e, TeamAgentEvent) and e.event == "finished"]
    assert finished == ["writer", "researcher"]  # real progress order
    sent = [e for e in events if isinstance(e, TeamMessageEvent) and e.event == "sent"]
    assert {e.to_mailbox for e in sent} == {"engineering::researcher", "engineering::writer"}
    assert set(result.usage_by_agent) == {"lead", "researcher", "writer"}
    nested = [m for m in messages if isinstance(m, AgentMessageEvent)]
    by_member = {
        (e.member, e.message.type) for e in nested
    }  # each member's own messages, nested in the team's stream
    assert {("researcher", "result"), ("writer", "result"), ("writer", "assistant")} <= by_member
    writer_result = next(
        e.message for e in nested if e.member == "writer" and e.message.type == "result"
    )
    assert writer_result.result == "draft done"
    assert messages.index(nested[-1]) < len(messages) - 1  # all before the team's result


async def test_failure_isolation_and_serial_by_default(fake_anthropic, lattice_runtime):
    def lead(request: RecordedRequest) -> Reply:
        if len(request.messages) == 1:
            return message(
                [
                    tool_use_block("flaky", {"mode": "handoff", "task": "a"}),
                    tool_use_block("steady", {"mode": "handoff", "task": "b"}),
                ],
                stop_reason="tool_use",
            )
        return text("partial result accepted")

    fake_anthropic.set_handler(
        by_agent(
            lead=lead,
            flaky=lambda r: error(400, "bad request from flaky"),
            steady=lambda r: slow(text("steady ok"), delay=0.3),
        )
    )
    team = create_team(
        name="ops",
        lead=agent(fake_anthropic, "lead"),
        members=[
            team_member(name="flaky", agent=agent(fake_anthropic, "flaky")),
            team_member(name="steady", agent=agent(fake_anthropic, "steady")),
        ],
    )
    messages = await collect(team.query("Do both."))
    assert messages[-1].result == "partial result accepted"
    failed = [e for e in messages if isinstance(e, TeamMessageEvent) and e.event == "failed"]
    completed = [e for e in messages if isinstance(e, TeamMessageEvent) and e.event == "completed"]
    assert [e.to_mailbox for e in failed] == ["ops::flaky"]
    assert [e.to_mailbox for e in completed] == ["ops::steady"]
    assert "bad request from flaky" in failed[0].body
    progress = [(e.event, e.member) for e in messages if isinstance(e, TeamAgentEvent)]
    assert progress == [  # one work item at a time by default
        ("started", "flaky"),
        ("finished", "flaky"),
        ("started", "steady"),
        ("finished", "steady"),
    ]


def test_team_options_are_checked(fake_anthropic):
    lead = agent(fake_anthropic, "lead")
    with pytest.raises(OptionError, match='TeamOptions: unknown option "maxConcurrentWorkItems"'):
        create_team(name="t", lead=lead, members=[], maxConcurrentWorkItems=2)
    with pytest.raises(OptionError, match="max_concurrent_work_items must be a positive integer"):
        create_team(name="t", lead=lead, members=[], runner={"max_concurrent_work_items": 0})
    with pytest.raises(OptionError, match='TeamMemberOptions: unknown option "agentLike"'):
        team_member(name="x", agentLike=lead)
    member = team_member(name="x", agent=define_agent(model="m", name="x"))
    with pytest.raises(OptionError, match="duplicate member names"):
        create_team(name="t", lead=lead, members=[member, member])


async def test_nested_team_each_level_its_own_workflow(fake_anthropic, lattice_runtime):
    def manager(member_tasks: dict[str, str], final: str):
        def handle(request: RecordedRequest) -> Reply:
            if len(request.messages) == 1:
                return message(
                    [
                        tool_use_block(name, {"mode": "handoff", "task": task})
                        for name, task in member_tasks.items()
                    ],
                    stop_reason="tool_use",
                )
            return text(final + " | " + request.messages[-1]["content"][-1]["text"][:200])

        return handle

    fake_anthropic.set_handler(
        by_agent(
            ceo=manager({"engineering": "Ship the notebook app."}, "CEO summary"),
            head=manager({"backend": "Build the API.", "frontend": "Build the UI."}, "eng done"),
            backend=lambda r: text("API ready"),
            frontend=lambda r: text("UI ready"),
        )
    )
    engineering = create_team(
        name="engineering",
        lead=agent(fake_anthropic, "head"),
        members=[
            team_member(name="backend", role="executor", agent=agent(fake_anthropic, "backend")),
            team_member(name="frontend", role="executor", agent=agent(fake_anthropic, "frontend")),
        ],
    )
    company = create_team(
        name="company",
        lead=agent(fake_anthropic, "ceo"),
        members=[team_member(name="engineering", role="head", agent=engineering)],
    )

    stream = await collect(company.query("Build a notebook app."))
    result = stream[-1]

    assert isinstance(result, ResultMessage)
    assert result.result.startswith("CEO summary")
    # the engineering team's inside reaches the company's stream: its lead's messages (as the
    # "engineering" member), its own team events, and its members' messages
    nested = [m for m in stream if isinstance(m, AgentMessageEvent)]
    assert {(e.team, e.member) for e in nested} == {
        ("company", "engineering"),
        ("engineering", "backend"),
        ("engineering", "frontend"),
    }
    backend_result = next(
        e.message for e in nested if e.member == "backend" and e.message.type == "result"
    )
    assert backend_result.result == "API ready"
    inner = [m for m in stream if isinstance(m, TeamAgentEvent) and m.team == "engineering"]
    assert {(e.member, e.event) for e in inner} == {
        (member, event) for member in ("backend", "frontend") for event in ("started", "finished")
    }
    assert any(
        isinstance(m, TeamMessageEvent) and m.team == "engineering" and m.event == "completed"
        for m in stream
    )
    assert "eng done" in result.result  # the engineering team's answer reached the CEO
    assert set(result.usage_by_agent) == {"ceo", "head", "backend", "frontend"}
    client = lattice_runtime.client
    ceo = company.lead
    company_run = f"team-company-{ceo.session_id}-1"
    top = await child_ids(client, company_run)
    assert top[0] == f"ceo-{ceo.session_id}-1"  # the lead's query
    (eng_run,) = [w for w in top if w.startswith("team-engineering-")]
    eng_children = await child_ids(client, eng_run)
    assert eng_children[0].startswith("head-")
    assert {w.split("-")[0] for w in eng_children[1:]} == {"backend", "frontend"}


async def test_ask_runs_the_member_now_and_interrupt_reaches_handoffs(
    fake_anthropic, lattice_runtime
):
    def lead(request: RecordedRequest) -> Reply:
        if len(request.messages) == 1:
            return tool_use("researcher", {"mode": "ask", "task": "quick check"})
        if len(request.messages) == 3:
            return tool_use("researcher", {"mode": "handoff", "task": "long job"})
        return text("stopped")

    calls: list[str] = []

    def researcher(request: RecordedRequest) -> Reply:
        calls.append(request.messages[-1]["content"])  # a live session: history grows
        if "long job" in request.messages[-1]["content"]:
            return slow(text("never"), delay=30)
        return text("checked")

    fake_anthropic.set_handler(by_agent(lead=lead, researcher=researcher))
    team = create_team(
        name="lab",
        lead=agent(fake_anthropic, "lead"),
        members=[team_member(name="researcher", agent=agent(fake_anthropic, "researcher"))],
    )
    task = asyncio.ensure_future(collect(team.query("go")))
    for _ in range(200):
        if len(calls) == 2:
            break
        await asyncio.sleep(0.05)
    assert calls[0] == "quick check"  # ask ran the member before the lead went on
    assert team.interrupt() is True
    messages = await asyncio.wait_for(task, 40)
    assert messages[-1].subtype == "interrupted"
    ended = [e.event for e in messages if isinstance(e, TeamMessageEvent) and e.event != "sent"]
    assert ended == ["cancelled"]  # the handed-off work was interrupted, not waited out
    # both calls are messages of the member's mailbox: the ask answered, the handoff stopped
    asked, handed = await team.mailbox.inbox("lab::researcher")
    assert (asked.metadata["mode"], asked.status, asked.result) == ("ask", "done", "checked")
    assert asked.from_mailbox == "lab::lead" and asked.body.startswith("quick check")
    assert handed.body.startswith("long job") and handed.status == "cancelled"


async def test_a_member_s_team_reply_is_its_report(fake_anthropic, lattice_runtime):
    def lead(request: RecordedRequest) -> Reply:
        if len(request.messages) == 1:
            return tool_use("analyst", {"mode": "handoff", "task": "size the market"})
        return text("lead read: " + request.messages[-1]["content"][-1]["text"])

    def analyst(request: RecordedRequest) -> Reply:
        prompt = request.messages[-1]["content"]
        if isinstance(prompt, str):  # the task names its message, so the member can reply
            message_id = prompt.split("message_id ")[1].split(" ")[0]
            return tool_use("team_reply", {"message_id": message_id, "body": "about 4 billion"})
        return text("ok")  # its final text, after replying

    fake_anthropic.set_handler(by_agent(lead=lead, analyst=analyst))
    team = create_team(
        name="biz",
        lead=agent(fake_anthropic, "lead"),
        members=[team_member(name="analyst", agent=agent(fake_anthropic, "analyst"))],
    )

    result = await team.prompt("How big is the market?")

    assert "about 4 billion" in result.result and "\nok" not in result.result
    (reply,) = await team.mailbox.inbox("biz::lead")
    assert reply.kind == "reply" and reply.status == "done"  # delivered: nothing left pending
    (task,) = await team.mailbox.inbox("biz::analyst")
    assert task.status == "done" and task.result == "about 4 billion"


async def test_routing_loops_are_allowed_and_max_turns_bounds_them(fake_anthropic, lattice_runtime):
    """Seeds, "Routing loops": manager -> member -> manager -> the same member is normal flow;
    max_turns is the control."""
    asks: list[str] = []

    def lead(request: RecordedRequest) -> Reply:
        turn = (len(request.messages) + 1) // 2
        return tool_use("member", {"mode": "handoff", "task": f"round {turn}"})

    def member(request: RecordedRequest) -> Reply:
        asks.append(request.messages[-1]["content"])
        return text("need more context from the manager")

    fake_anthropic.set_handler(by_agent(lead=lead, member=member))
    team = create_team(
        name="loop",
        lead=agent(fake_anthropic, "lead", max_turns=3),
        members=[team_member(name="member", agent=agent(fake_anthropic, "member"))],
    )

    result = await team.prompt("go")

    assert result.subtype == "error_max_turns"
    assert [a.split("\n")[0] for a in asks] == ["round 1", "round 2", "round 3"]
    assert [m.status for m in await team.mailbox.inbox("loop::member")] == ["done"] * 3


async def test_handoff_grants_are_checked_recorded_and_enforced(
    fake_anthropic, lattice_runtime, tmp_path
):
    from agent_lattice import create_agent

    shared, foreign = tmp_path / "shared", tmp_path / "foreign"
    shared.mkdir()
    foreign.mkdir()

    def lead(request: RecordedRequest) -> Reply:
        if len(request.messages) == 1:
            return tool_use(
                "backend",
                {
                    "mode": "handoff",
                    "task": "write the API notes",
                    "workspace_grants": [
                        {"root": str(shared / "backend"), "access": ["write"], "reason": "repo"},
                        {"root": str(foreign), "access": ["write"]},
                    ],
                },
            )
        return text("noted")

    def backend(request: RecordedRequest) -> Reply:
        if not request.tool_results:
            return message(
                [
                    tool_use_block(
                        "Write", {"file_path": str(shared / "backend" / "api.md"), "content": "ok"}
                    ),
                    tool_use_block("Write", {"file_path": str(foreign / "x.md"), "content": "no"}),
                ],
                stop_reason="tool_use",
            )
        return text("wrote what I could")

    fake_anthropic.set_handler(by_agent(lead=lead, backend=backend))
    member = create_agent(
        api_key=API_KEY,
        base_url=fake_anthropic.base_url,
        model="claude-test",
        name="backend",
        system_prompt="You are backend.",
        workspace=str(tmp_path / "backend-ws"),
    )
    team = create_team(
        name="eng",
        lead=agent(fake_anthropic, "lead"),
        members=[team_member(name="backend", agent=member)],
    )
    result = await team.prompt(
        "Write docs.",
        permissions={"workspace_grants": [{"root": str(shared), "access": ["write"]}]},
    )
    assert result.result == "noted"
    assert (shared / "backend" / "api.md").read_text() == "ok"
    assert list(foreign.iterdir()) == []
    backend_calls = [r for r in fake_anthropic.requests if "You are backend." in (r.system or "")]
    denied = json.loads(backend_calls[1].tool_results[1]["content"])
    assert denied["error"] == "permission_denied"
    handle = lattice_runtime.client.get_workflow_handle(f"team-eng-{team.lead.session_id}-1")
    (task,) = await handle.query("mailbox")
    assert task["metadata"]["workspace_grants"] == [str((shared / "backend").resolve())]
    assert task["status"] == "done" and task["to_mailbox"] == "eng::backend"


def mailbox_of(backend: str, tmp_path):
    """None: the team's default (a TeamMailboxWorkflow); else a SQLite file."""
    from agent_lattice import create_sqlite_mailbox

    return None if backend == "workflow" else create_sqlite_mailbox(path=tmp_path / "team.db")


@pytest.mark.parametrize("backend", ["workflow", "sqlite"])
async def test_send_and_drain_with_member_mailbox_tools(
    fake_anthropic, lattice_runtime, tmp_path, backend
):
    def researcher(request: RecordedRequest) -> Reply:
        prompt = request.messages[-1]["content"]  # a live session: earlier drains stay in history
        if isinstance(prompt, str):
            message_id = prompt.split("message_id: ")[1].split("\n")[0]
            if "progress only" in prompt:
                return tool_use("team_followup", {"message_id": message_id, "body": "halfway"})
            if "ignore" in prompt:
                return text("I will not answer through the mailbox.")
            return message(
                [
                    tool_use_block("team_inbox", {"status": "processing"}),
                    tool_use_block(
                        "team_reply", {"message_id": message_id, "body": "findings: ok"}
                    ),
                ],
                stop_reason="tool_use",
            )
        return text("done")

    fake_anthropic.set_handler(by_agent(lead=lambda r: text("unused"), researcher=researcher))
    team = create_team(
        name="engineering",
        lead=agent(fake_anthropic, "lead"),
        members=[team_member(name="researcher", agent=agent(fake_anthropic, "researcher"))],
        mailbox=mailbox_of(backend, tmp_path),
        expose_lead_mailbox_tools=True,
    )
    mailbox = team.mailbox
    assert {"team_send", "team_reply", "team_status"} <= {t.name for t in team.lead.tools}
    assert "team_reply" in {t.name for t in team.members[0].agent.tools}

    answered = await team.send("researcher", "inspect the SDK design", from_="lead")
    progressed = await team.send("researcher", "progress only please", from_="lead")
    ignored = await team.send("researcher", "ignore the mailbox", from_="lead")
    with pytest.raises(OptionError, match="no member mailbox"):
        await team.send("nobody", "x")

    drained = await team.drain(max_rounds=5, max_messages=2)
    assert [m.id for m in drained.processed] == [answered.id, progressed.id]  # max_messages
    assert (await mailbox.get(answered.id)).status == "done"
    assert (await mailbox.get(progressed.id)).status == "processing"  # a followup keeps it open
    lead_box = await mailbox.inbox("engineering::lead")
    assert [(m.kind, m.body) for m in lead_box] == [
        ("reply", "findings: ok"),
        ("followup", "halfway"),
    ]
    # the member's team_inbox call listed what it was working on
    listed = json.loads(fake_anthropic.requests[1].messages[-1]["content"][0]["content"])
    assert [m["message_id"] for m in listed] == [answered.id]

    rest = await team.drain()
    assert [m.id for m in rest.processed] == [ignored.id] and rest.failed
    failed = await mailbox.get(ignored.id)
    assert failed.status == "failed" and "without team_reply or team_followup" in failed.result
    diagnostic = (await mailbox.inbox("engineering::lead"))[-1]
    assert diagnostic.kind == "followup" and diagnostic.reply_to == ignored.id
    assert (await team.drain()).processed == []  # nothing pending: nothing re-routed
    assert await mailbox.claim_next("engineering::researcher") is None


async def test_a_host_agentlike_member_takes_handoffs(fake_anthropic, lattice_runtime):
    def lead(request: RecordedRequest) -> Reply:
        if len(request.messages) == 1:
            return message(
                [
                    tool_use_block("host", {"mode": "handoff", "task": "index the repo"}),
                    tool_use_block("writer", {"mode": "handoff", "task": "draft notes"}),
                ],
                stop_reason="tool_use",
            )
        if len(request.messages) == 3:
            return tool_use("host", {"mode": "ask", "task": "one more"})
        return text("all reported")

    fake_anthropic.set_handler(by_agent(lead=lead, writer=lambda r: text("notes drafted")))
    host = HostMember()
    team = create_team(
        name="mixed",
        lead=agent(fake_anthropic, "lead"),
        members=[
            team_member(name="host", agent=host),
            team_member(name="writer", agent=agent(fake_anthropic, "writer")),
        ],
        runner={"max_concurrent_work_items": 2},
    )

    stream = await collect(team.query("go"))

    assert stream[-1].result == "all reported"
    to_lead = [r for r in fake_anthropic.requests if "You are lead." in (r.system or "")]
    receipts = [json.loads(r["content"]) for r in to_lead[1].tool_results]
    assert [r["phase"] for r in receipts] == ["queued", "queued"]
    reports = to_lead[1].messages[-1]["content"][-1]["text"]
    assert reports.index("host did: index the repo") < reports.index("notes drafted")
    assert host.prompts == ["index the repo", "one more"]  # the handoff, then an ask
    agents = [(e.member, e.event) for e in stream if isinstance(e, TeamAgentEvent)]
    assert ("host", "started") in agents and ("host", "finished") in agents
    # the handoff and the ask are both messages of the host member's mailbox
    task, asked = await team.mailbox.inbox("mixed::host")
    assert task.status == "done" and task.result == "host did: index the repo"
    assert (asked.metadata["mode"], asked.status, asked.body) == ("ask", "done", "one more")
    assert asked.result == "host did: one more" and asked.from_mailbox == "mixed::lead"


async def test_a_stop_cancels_a_host_member_s_work(fake_anthropic, lattice_runtime):
    fake_anthropic.set_handler(
        by_agent(lead=lambda r: tool_use("host", {"mode": "handoff", "task": "long job"}))
    )
    host = HostMember(delay=60)
    team = create_team(
        name="stopped",
        lead=agent(fake_anthropic, "lead"),
        members=[team_member(name="host", agent=host)],
    )

    run = asyncio.ensure_future(team.prompt("go"))
    for _ in range(400):  # until the host is working on the handoff
        if host.prompts:
            break
        await asyncio.sleep(0.05)
    assert host.prompts == ["long job"]
    assert team.interrupt() is True
    result = await asyncio.wait_for(run, 40)

    assert result.subtype == "interrupted"
    assert host.cancelled.is_set()  # the host's prompt() was cancelled before the team ended
    (task,) = await team.mailbox.inbox("stopped::host")
    assert task.status == "cancelled"


async def test_drain_takes_the_answer_of_members_without_tools(fake_anthropic, lattice_runtime):
    """A nested team or a host AgentLike cannot call team_reply: its final result is its reply."""
    fake_anthropic.set_handler(
        by_agent(inner_lead=lambda r: text("inner team says hi"), lead=lambda r: text("unused"))
    )
    inner = create_team(name="inner", lead=agent(fake_anthropic, "inner_lead"), members=[])
    host = HostMember(delay=0)
    team = create_team(
        name="outer",
        lead=agent(fake_anthropic, "lead"),
        members=[team_member(name="host", agent=host), team_member(name="sub", agent=inner)],
    )
    to_host = await team.send("host", "ping", from_="lead")
    to_sub = await team.send("sub", "hello", from_="lead")

    drained = await team.drain()

    assert [m.id for m in drained.processed] == [to_host.id, to_sub.id] and not drained.failed
    assert "team_reply" not in host.prompts[0]  # not asked to use a tool it does not have
    replies = {m.reply_to: m for m in await team.mailbox.inbox("outer::lead")}
    assert replies[to_host.id].kind == "reply" and replies[to_host.id].body.startswith("host did:")
    assert replies[to_sub.id].body == "inner team says hi"
    assert (await team.mailbox.get(to_sub.id)).status == "done"


async def test_a_spec_member_gets_mailbox_tools_in_every_session(fake_anthropic, lattice_runtime):
    sessions: list[list[str]] = []

    def reviewer(request: RecordedRequest) -> Reply:
        prompt = request.messages[-1]["content"]
        if not isinstance(prompt, str):
            return text("replied")
        sessions.append([t["name"] for t in request.body.get("tools", [])])
        assert len(request.messages) == 1  # a fresh session: no earlier drain in its history
        message_id = prompt.split("message_id: ")[1].split("\n")[0]
        return tool_use("team_reply", {"message_id": message_id, "body": "ok: " + message_id})

    fake_anthropic.set_handler(by_agent(lead=lambda r: text("unused"), reviewer=reviewer))
    spec = define_agent(
        api_key=API_KEY,
        base_url=fake_anthropic.base_url,
        model="claude-test",
        name="reviewer",
        system_prompt="You are reviewer.",
        workspace=False,
    )
    team = create_team(
        name="review",
        lead=agent(fake_anthropic, "lead"),
        members=[team_member(name="reviewer", agent=spec)],
    )
    first = await team.send("reviewer", "review A", from_="lead")
    second = await team.send("reviewer", "review B", from_="lead")

    drained = await team.drain()

    assert [m.id for m in drained.processed] == [first.id, second.id] and not drained.failed
    assert len(sessions) == 2 and all({"team_reply", "team_inbox"} <= set(s) for s in sessions)
    replies = await team.mailbox.inbox("review::lead")
    assert [(m.kind, m.body) for m in replies] == [
        ("reply", f"ok: {first.id}"),
        ("reply", f"ok: {second.id}"),
    ]
    assert "tools" not in spec.options  # the caller's spec is left as it was


@pytest.mark.parametrize("backend", ["workflow", "sqlite"])
async def test_handoff_work_shows_in_the_mailbox_backend_and_abort_stops_the_team(
    fake_anthropic, lattice_runtime, tmp_path, backend
):
    def lead(request: RecordedRequest) -> Reply:
        if len(request.messages) == 1:
            return message(
                [
                    tool_use_block("a", {"mode": "handoff", "task": "quick"}),
                    tool_use_block("b", {"mode": "handoff", "task": "forever"}),
                    tool_use_block("c", {"mode": "handoff", "task": "never starts"}),
                ],
                stop_reason="tool_use",
            )
        return text("unused")

    fake_anthropic.set_handler(
        by_agent(
            lead=lead,
            a=lambda r: text("quick done"),
            b=lambda r: slow(text("late"), delay=60),
            c=lambda r: text("should not run"),
        )
    )
    team = create_team(
        name="t",
        lead=agent(fake_anthropic, "lead"),
        members=[team_member(name=n, agent=agent(fake_anthropic, n)) for n in "abc"],
        mailbox=mailbox_of(backend, tmp_path),
    )
    mailbox = team.mailbox
    result = await asyncio.wait_for(team.prompt("go", timeout=3), 40)

    assert result.subtype == "error_abort"
    assert not any("You are c." in (r.system or "") for r in fake_anthropic.requests)
    statuses = {m.to_mailbox: m.status for m in await mailbox.inbox("t::a")}
    assert statuses == {"t::a": "done"}  # the runtime's work is visible in the backend
    # the running work and the work that never started both end cancelled before the
    # team's result (seeds: the runtime marks the current and remaining work cancelled)
    for member in "bc":
        (left,) = await mailbox.inbox(f"t::{member}")
        assert left.status == "cancelled", member
    assert await mailbox.claim_next("t::a") is None  # nothing left for a host drain to redo
    assert await mailbox.claim_next("t::c") is None
    # the team run, settling what its lead left, replays deterministically
    team_run = f"team-t-{team.lead.session_id}-1"
    history = await lattice_runtime.client.get_workflow_handle(team_run).fetch_history()
    await Replayer(workflows=[], plugins=[LatticePlugin(agents=[])]).replay_workflow(history)


async def test_two_handoffs_to_one_member_run_in_turn_on_its_session(
    fake_anthropic, lattice_runtime
):
    seen: list[int] = []

    def lead(request: RecordedRequest) -> Reply:
        if len(request.messages) == 1:
            return message(
                [
                    tool_use_block("scribe", {"mode": "handoff", "task": "first note"}),
                    tool_use_block("scribe", {"mode": "handoff", "task": "second note"}),
                ],
                stop_reason="tool_use",
            )
        return text("both noted")

    def scribe(request: RecordedRequest) -> Reply:
        seen.append(len(request.messages))
        return text(f"noted #{len(seen)}")

    fake_anthropic.set_handler(by_agent(lead=lead, scribe=scribe))
    member = agent(fake_anthropic, "scribe")
    team = create_team(
        name="desk",
        lead=agent(fake_anthropic, "lead"),
        members=[team_member(name="scribe", agent=member)],
        runner={"max_concurrent_work_items": 2},
    )
    result = await team.prompt("take notes")
    assert result.result == "both noted"
    assert seen == [1, 3]  # one at a time, the second on top of the first's conversation
    assert [m.role for m in await member.get_history()] == ["user", "assistant"] * 2


async def test_create_team_leaves_the_host_agents_as_they_were(fake_anthropic, lattice_runtime):
    """The lead and member Agents the host made keep their tools and keys; the team runs
    views of them (member tools on the lead, mailbox tools on members) on the same sessions,
    so a team query's turns are the host lead's history, and a worker finds the team from
    the lead it runs."""
    from agent_lattice.teams._team import team_of
    from agent_lattice.worker import AgentRegistry

    lead, writer = agent(fake_anthropic, "lead"), agent(fake_anthropic, "writer")
    before = {a.name: ([t.name for t in a.tools], a.key) for a in (lead, writer)}
    team = create_team(
        name=f"t{uuid.uuid4().hex[:6]}",
        lead=lead,
        members=[team_member(name="writer", agent=writer)],
    )
    assert {a.name: ([t.name for t in a.tools], a.key) for a in (lead, writer)} == before
    assert team.lead is not lead and team.lead.session is lead.session
    assert [t.name for t in team.lead.tools] == [*before["lead"][0], "writer"]
    member = team.members[0].agent
    assert member.session is writer.session and member.tool("team_reply") is not None
    assert team_of(team.lead) is team and team_of(lead) is None
    registry = AgentRegistry([team.lead])
    assert registry.team_of(team.lead.key, "another-session") is team  # by definition
    assert registry.team_of(lead.key) is None

    fake_anthropic.set_handler(by_agent(lead=Script(text("done"))))
    result = await team.prompt("go")
    assert result.result == "done"
    assert [m.role for m in await lead.get_history()] == ["user", "assistant"]
    assert not lead.session.busy
