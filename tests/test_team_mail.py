"""The team runtime drives the mailbox during a running team.query(): members' team_send and
the host's team.send() are claimed and run as they arrive (drain()'s rules, the concurrency
limit), answers reach the lead; create_team_runner(); host AgentLike members streamed."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from pydantic import TypeAdapter

from agent_lattice import (
    AgentMessageEvent,
    OptionError,
    ResultMessage,
    TeamAgentEvent,
    TeamMessageEvent,
    TeamRunner,
    TeamRunnerMessage,
    create_memory_mailbox,
    create_sqlite_mailbox,
    create_team,
    create_team_runner,
    team_member,
)
from agent_lattice.testing import (
    RecordedRequest,
    Reply,
    assert_eventually,
    collect,
    message,
    slow,
    text,
    tool_use,
    tool_use_block,
)

from conftest import HostMember, StreamingHostMember, by_agent, waiting_tool
from conftest import named_agent as agent


def message_id_of(prompt: str) -> str:
    return prompt.split("message_id: ")[1].split("\n")[0]


def first_prompt(request: RecordedRequest) -> str | None:
    """The prompt of a member's run, on its first request (None on later ones)."""
    content = request.messages[-1]["content"]
    return content if isinstance(content, str) else None


def running_most(events: list) -> int:
    """The most work items running at once, from the stream's started/finished events."""
    running = most = 0
    for e in events:
        if isinstance(e, TeamAgentEvent):
            running += 1 if e.event == "started" else -1
            most = max(most, running)
    return most


async def test_a_member_s_team_send_to_a_peer_runs_during_the_query(
    fake_anthropic, lattice_runtime
):
    writer_prompts: list[str] = []

    def lead(request: RecordedRequest) -> Reply:
        if len(request.messages) == 1:
            return tool_use("researcher", {"mode": "handoff", "task": "research the SDK"})
        if len(request.messages) == 3:
            return tool_use("wait_for_mail", {})
        return text("lead done")

    def researcher(request: RecordedRequest) -> Reply:
        prompt = first_prompt(request)
        if prompt is not None and "research the SDK" in prompt:
            return tool_use("team_send", {"to": "writer", "body": "draft the intro, please"})
        if prompt is not None:  # the writer's reply, delivered: it needs no answer
            assert "a reply for you" in prompt and "draft: intro" in prompt
            return text("thanks")
        return text("asked the writer")

    def writer(request: RecordedRequest) -> Reply:
        prompt = first_prompt(request)
        if prompt is None:
            return text("replied")
        writer_prompts.append(prompt)
        return tool_use("team_reply", {"message_id": message_id_of(prompt), "body": "draft: intro"})

    fake_anthropic.set_handler(by_agent(lead=lead, researcher=researcher, writer=writer))
    box: dict[str, object] = {}

    async def settled() -> bool:
        mailbox = box["team"].mailbox
        asked = await mailbox.inbox("docs::writer")
        answered = await mailbox.inbox("docs::researcher")
        mail = [m for m in answered if m.kind == "reply"]
        return [m.status for m in asked] == ["done"] and [m.status for m in mail] == ["done"]

    team = create_team(
        name="docs",
        lead=agent(fake_anthropic, "lead", tools=[waiting_tool(settled)]),
        members=[
            team_member(name="researcher", agent=agent(fake_anthropic, "researcher")),
            team_member(name="writer", agent=agent(fake_anthropic, "writer")),
        ],
    )
    box["team"] = team

    stream = await collect(team.query("Write the docs."))

    assert stream[-1].result == "lead done"
    assert len(writer_prompts) == 1 and "draft the intro, please" in writer_prompts[0]
    assert "from: docs::researcher" in writer_prompts[0]
    (asked,) = await team.mailbox.inbox("docs::writer")
    assert (asked.status, asked.result) == ("done", "draft: intro")
    handoff, reply = await team.mailbox.inbox("docs::researcher")
    assert handoff.metadata["work_item_id"]  # the handoff, mirrored before the reply
    assert (reply.kind, reply.reply_to, reply.status) == ("reply", asked.id, "done")
    assert reply.result == "delivered to researcher"
    # the mail's work shows in the stream like a handoff's: its events and the peer's messages
    mail_events = [
        e for e in stream if isinstance(e, TeamMessageEvent) and e.message_id == asked.id
    ]
    assert [e.event for e in mail_events] == ["sent", "completed"]
    assert mail_events[-1].body == "draft: intro"
    agents = [(e.member, e.event) for e in stream if isinstance(e, TeamAgentEvent)]
    assert agents.count(("writer", "started")) == 1 and agents.count(("researcher", "started")) == 2
    assert running_most(stream) == 1  # serial by default, mail and handoffs alike
    assert any(isinstance(e, AgentMessageEvent) and e.member == "writer" for e in stream)


@pytest.mark.parametrize("backend", ["workflow", "sqlite", "memory"])
async def test_the_host_s_send_during_a_query_is_answered_and_the_answers_reach_the_lead(
    fake_anthropic, lattice_runtime, tmp_path, backend
):
    """team.send() while the query runs: the member is prompted at once; its team_reply, and
    the diagnostic of a member that ends without answering, reach the lead with its next
    tool results."""
    seen_by_lead: list[str] = []

    def lead(request: RecordedRequest) -> Reply:
        seen_by_lead.append(request.last_user_text or "")
        delivered = "\n".join(seen_by_lead)
        answers = ("haiku: old pond", "without team_reply or team_followup", "host did:")
        if all(a in delivered for a in answers):
            return text("lead read its mail")
        return tool_use("wait_for_mail", {})  # until both answers have been delivered

    def writer(request: RecordedRequest) -> Reply:
        prompt = first_prompt(request)
        if prompt is None:
            return text("replied")
        return tool_use(
            "team_reply", {"message_id": message_id_of(prompt), "body": "haiku: old pond"}
        )

    fake_anthropic.set_handler(
        by_agent(lead=lead, writer=writer, quiet=lambda r: text("I will not use the mailbox."))
    )
    mailbox = {
        "workflow": None,
        "sqlite": create_sqlite_mailbox(path=tmp_path / "team.db"),
        "memory": create_memory_mailbox(),
    }[backend]
    sent: dict[str, str] = {}

    async def answered(ctx) -> bool:
        ended = [(await team.mailbox.get(i)).status for i in sent.values()]
        if sorted(ended) != ["done", "done", "failed"]:
            return False
        # and the lead has been told (the runtime's events reach it in order, one signal
        # after the other: the last may still be on its way when the mailbox shows the end)
        history = await lattice_runtime.client.get_workflow_handle(ctx.workflow_id).fetch_history()
        told = set()
        for event in history.events:
            signaled = event.workflow_execution_signaled_event_attributes
            if event.HasField("workflow_execution_signaled_event_attributes") and (
                signaled.signal_name == "team_message"
            ):
                data = json.loads(signaled.input.payloads[0].data)
                if data["event"] in ("completed", "failed"):
                    told.add(data["message_id"])
        return set(sent.values()) <= told

    team = create_team(
        name="studio",
        lead=agent(fake_anthropic, "lead", tools=[waiting_tool(answered)], max_turns=60),
        members=[
            team_member(name="writer", agent=agent(fake_anthropic, "writer")),
            team_member(name="quiet", agent=agent(fake_anthropic, "quiet")),
            team_member(name="helper", agent=HostMember(delay=0)),  # answers with its result
        ],
        mailbox=mailbox,
    )
    run = asyncio.ensure_future(collect(team.query("Wait for the mail.")))
    await assert_eventually(lambda: len(seen_by_lead) >= 1)  # the query is running
    sent["writer"] = (await team.send("writer", "write a haiku", from_="lead")).id
    sent["quiet"] = (await team.send("quiet", "say something", from_="lead")).id
    sent["helper"] = (await team.send("helper", "ping", from_="lead")).id
    stream = await asyncio.wait_for(run, 60)

    assert stream[-1].result == "lead read its mail"
    haiku = await team.mailbox.get(sent["writer"])
    assert (haiku.status, haiku.result) == ("done", "haiku: old pond")
    failed = await team.mailbox.get(sent["quiet"])
    assert failed.status == "failed"
    assert "quiet ended (success) without team_reply or team_followup" in failed.result
    lead_box = {m.reply_to: m for m in await team.mailbox.inbox("studio::lead")}
    assert (lead_box[haiku.id].kind, lead_box[haiku.id].status) == ("reply", "done")
    diagnostic = lead_box[failed.id]
    assert diagnostic.kind == "followup" and diagnostic.status == "done"
    assert diagnostic.body.startswith(f"Message {failed.id} failed:")
    assert "I will not use the mailbox." in diagnostic.body
    delivered = "\n".join(seen_by_lead)
    assert "Team mail in your mailbox studio::lead" in delivered
    assert f"[followup from studio::quiet · message {diagnostic.id} · re {failed.id}]" in delivered
    pinged = await team.mailbox.get(sent["helper"])
    assert pinged.status == "done" and pinged.result.startswith("host did: Team studio:")
    assert "team_reply" not in pinged.result  # not asked to use a tool it does not have
    assert lead_box[pinged.id].kind == "reply" and lead_box[pinged.id].body == pinged.result
    ended = {e.message_id: e.event for e in stream if isinstance(e, TeamMessageEvent)}
    assert ended == {haiku.id: "completed", failed.id: "failed", pinged.id: "completed"}


async def test_mail_runs_within_the_limit_one_at_a_time_per_mailbox(
    fake_anthropic, lattice_runtime
):
    lock, both = threading.Lock(), threading.Event()
    in_flight = {"now": 0, "most": 0}
    prompts: list[str] = []

    def member(request: RecordedRequest) -> Reply:
        prompt = first_prompt(request)
        if prompt is None:
            return text("replied")
        with lock:
            prompts.append(prompt)
            in_flight["now"] += 1
            in_flight["most"] = max(in_flight["most"], in_flight["now"])
            if in_flight["now"] >= 2:
                both.set()
        both.wait(30)  # the first two runs wait for each other: two run at once
        with lock:
            in_flight["now"] -= 1
        return tool_use("team_reply", {"message_id": message_id_of(prompt), "body": "ok"})

    def lead(request: RecordedRequest) -> Reply:
        return tool_use("wait_for_mail", {}) if len(request.messages) == 1 else text("done")

    fake_anthropic.set_handler(by_agent(lead=lead, a=member, b=member, c=member))
    sent: list[str] = []

    async def all_done() -> bool:
        statuses = [(await team.mailbox.get(i)).status for i in sent]
        return statuses == ["done"] * 4

    team = create_team(
        name="pool",
        lead=agent(fake_anthropic, "lead", tools=[waiting_tool(all_done)]),
        members=[team_member(name=n, agent=agent(fake_anthropic, n)) for n in "abc"],
        runner={"max_concurrent_work_items": 2},
    )
    run = asyncio.ensure_future(collect(team.query("go")))
    await assert_eventually(lambda: len(fake_anthropic.requests) >= 1)
    for to in ("a", "a", "b", "c"):  # two for a: they run in turn
        sent.append((await team.send(to, f"task for {to}")).id)
    stream = await asyncio.wait_for(run, 60)

    assert stream[-1].result == "done"
    assert in_flight["most"] == 2 and running_most(stream) == 2
    assert len(prompts) == 4
    running: set[str] = set()
    for e in stream:  # a's two messages never overlap
        if isinstance(e, TeamAgentEvent) and e.member == "a":
            assert (e.event == "started") != ("a" in running)
            running.symmetric_difference_update({"a"})


def test_create_team_runner_checks_its_options(fake_anthropic):
    team = create_team(name="t", lead=agent(fake_anthropic, "lead"), members=[])
    assert create_team_runner(team).max_concurrent_work_items == 1
    assert create_team_runner(team, {"max_concurrent_work_items": 3}).max_concurrent_work_items == 3
    for bad in (0, -1, True, 2.0, "2"):
        with pytest.raises(
            OptionError, match=r"create_team_runner\(\): max_concurrent_work_items must be a "
        ):
            create_team_runner(team, max_concurrent_work_items=bad)
    with pytest.raises(
        OptionError, match='TeamRunnerOptions: unknown option "maxConcurrentWorkItems"'
    ):
        create_team_runner(team, maxConcurrentWorkItems=2)
    with pytest.raises(OptionError, match="team must be a Team"):
        create_team_runner(team.lead)
    runner = create_team_runner(team, max_concurrent_work_items=2)
    assert isinstance(runner, TeamRunner) and runner.team is team
    assert runner.interrupt() is False  # idle


async def test_a_team_runner_runs_with_its_limit_and_an_abort_cancels_its_work_first(
    fake_anthropic, lattice_runtime
):
    both = threading.Event()
    started: list[str] = []

    def lead(request: RecordedRequest) -> Reply:
        return message(
            [tool_use_block(n, {"mode": "handoff", "task": f"job {n}"}) for n in "ab"],
            stop_reason="tool_use",
        )

    def member(name: str, reply: Reply | None):
        def handle(request: RecordedRequest) -> Reply:
            started.append(name)
            if name in "ab":  # a and b run at once (the runner's limit, not the team's 1)
                if len(started) >= 2:
                    both.set()
                both.wait(30)
            return reply or slow(text("late"), delay=60)

        return handle

    fake_anthropic.set_handler(
        by_agent(lead=lead, a=member("a", text("a done")), b=member("b", None), c=member("c", None))
    )
    team = create_team(
        name="crew",
        lead=agent(fake_anthropic, "lead"),
        members=[team_member(name=n, agent=agent(fake_anthropic, n)) for n in "abcd"],
    )
    runner = create_team_runner(team, max_concurrent_work_items=2)
    abort = asyncio.Event()
    run = asyncio.ensure_future(collect(runner.query("go", signal=abort)))

    async def a_done() -> bool:
        return [m.status for m in await team.mailbox.inbox("crew::a")] == ["done"]

    await assert_eventually(a_done)
    to_c = await team.send("c", "mail for c")  # claimed in a's place: b and c run
    await assert_eventually(lambda: "c" in started)
    to_d = await team.send("d", "mail for d")  # no room: it waits
    abort.set()
    stream = await asyncio.wait_for(run, 60)

    result = stream[-1]
    assert isinstance(result, ResultMessage) and result.subtype == "error_abort"
    assert started[:2] in (["a", "b"], ["b", "a"]) and "d" not in started
    # the running work, handed off or claimed, is cancelled before the result arrives; mail
    # never claimed stays pending (for drain() or a later query)
    (b,) = await team.mailbox.inbox("crew::b")
    assert b.status == "cancelled"
    assert (await team.mailbox.get(to_c.id)).status == "cancelled"
    assert (await team.mailbox.get(to_d.id)).status == "pending"
    events = [
        m for m in stream if isinstance(m, TeamMessageEvent | TeamAgentEvent | AgentMessageEvent)
    ]
    runner_messages = TypeAdapter(list[TeamRunnerMessage]).validate_python(
        [e.model_dump() for e in events]
    )
    assert [type(m) for m in runner_messages] == [type(e) for e in events]
    assert running_most(stream) == 2
    assert runner.interrupt() is False  # idle again

    # interrupt() delegates to the lead: True while a query runs
    fake_anthropic.set_handler(by_agent(lead=lambda r: slow(text("never"), delay=30)))
    before = len(fake_anthropic.requests)
    second = asyncio.ensure_future(runner.prompt("again"))
    await assert_eventually(lambda: len(fake_anthropic.requests) > before)
    assert runner.interrupt() is True
    assert (await asyncio.wait_for(second, 40)).subtype == "interrupted"


async def test_a_host_member_s_query_streams_its_messages_in_the_team_stream(
    fake_anthropic, lattice_runtime
):
    def lead(request: RecordedRequest) -> Reply:
        if len(request.messages) == 1:
            return tool_use("host", {"mode": "handoff", "task": "index the repo"})
        if len(request.messages) == 3:
            return tool_use("host", {"mode": "ask", "task": "one more"})
        return text("all reported")

    fake_anthropic.set_handler(by_agent(lead=lead))
    host = StreamingHostMember()
    team = create_team(
        name="hosted",
        lead=agent(fake_anthropic, "lead"),
        members=[team_member(name="host", agent=host)],
    )

    stream = await collect(team.query("go"))

    assert stream[-1].result == "all reported"
    assert host.prompts == ["index the repo", "one more"]
    nested = [(e.member, e.message.type) for e in stream if isinstance(e, AgentMessageEvent)]
    # each run's durable messages, not its token events: the handoff's, then the ask's
    assert nested == [("host", "assistant"), ("host", "result")] * 2
    results = [
        e.message.result
        for e in stream
        if isinstance(e, AgentMessageEvent) and e.message.type == "result"
    ]
    assert results == ["host did: index the repo", "host did: one more"]
    # the cost in the lead's history: one signal per durable message
    lead_run = f"lead-{team.lead.session_id}-1"
    history = await lattice_runtime.client.get_workflow_handle(lead_run).fetch_history()
    signals = [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in history.events
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    assert signals.count("agent_message") == 4


async def test_a_send_from_another_process_is_claimed_by_the_running_query(
    fake_anthropic, lattice_runtime, tmp_path
):
    """A Team object that runs no query (another process's: `lattice team send`, a web
    handler) sends mail: the team's query running elsewhere claims it through Temporal."""

    def lead(request: RecordedRequest) -> Reply:
        if len(request.messages) == 1:
            return tool_use("wait_for_mail", {})
        return text("lead done")

    def writer(request: RecordedRequest) -> Reply:
        prompt = first_prompt(request)
        if prompt is None:
            return text("replied")
        return tool_use("team_reply", {"message_id": message_id_of(prompt), "body": "a haiku"})

    fake_anthropic.set_handler(by_agent(lead=lead, writer=writer))
    path = tmp_path / "team.db"
    sent: list[str] = []

    async def answered() -> bool:
        return bool(sent) and (await running.mailbox.get(sent[0])).status == "done"

    def build(tools: list):
        return create_team(
            name="remote",
            lead=agent(fake_anthropic, "lead", tools=tools),
            members=[team_member(name="writer", agent=agent(fake_anthropic, "writer"))],
            mailbox=create_sqlite_mailbox(path=path),
        )

    running = build([waiting_tool(answered)])
    elsewhere = build([])  # knows nothing of the query: it only shares the mailbox
    run = asyncio.ensure_future(collect(running.query("Wait for the mail.")))
    await assert_eventually(lambda: len(fake_anthropic.requests) >= 1)
    sent.append((await elsewhere.send("writer", "write a haiku", from_="lead")).id)
    stream = await asyncio.wait_for(run, 60)

    assert stream[-1].result == "lead done"
    message = await elsewhere.mailbox.get(sent[0])
    assert (message.status, message.result) == ("done", "a haiku")
