"""Work a team lead leaves behind when its run finishes: claimed mail still running ends
``cancelled`` (in the team's mailbox, and as the member's result), and the team's events
about it — the member's ``team_agent`` finish and the ``team_message`` ``cancelled`` —
reach the team query's stream before its result, though the lead's run has closed."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agent_lattice import (
    AgentMessageEvent,
    ResultMessage,
    TeamAgentEvent,
    TeamMessageEvent,
    create_team,
    team_member,
)
from agent_lattice.testing import RecordedRequest, Reply, assert_eventually, collect, slow, text

from conftest import HostMember, by_agent
from conftest import named_agent as agent


class _SlowHost(HostMember):
    """A host AgentLike member whose prompt() says when it started, then takes a minute."""

    def __init__(self, started: threading.Event) -> None:
        super().__init__(delay=60)
        self.started = started

    async def prompt(self, prompt, **options) -> ResultMessage:
        self.started.set()
        return await super().prompt(prompt, **options)


@pytest.mark.parametrize("member_kind", ["agent", "host"])
async def test_mail_still_running_when_the_lead_finishes_ends_cancelled_in_the_stream(
    fake_anthropic, lattice_runtime, member_kind
):
    member_started = threading.Event()

    def lead(request: RecordedRequest) -> Reply:
        member_started.wait(30)  # the lead finishes while the member works on its mail
        return text("lead done")

    def busy(request: RecordedRequest) -> Reply:
        member_started.set()
        return slow(text("never"), delay=60)

    fake_anthropic.set_handler(by_agent(lead=lead, busy=busy))
    host = _SlowHost(member_started)
    member = agent(fake_anthropic, "busy") if member_kind == "agent" else host
    team = create_team(
        name="shop",
        lead=agent(fake_anthropic, "lead"),
        members=[team_member(name="busy", agent=member)],
    )
    run = asyncio.ensure_future(collect(team.query("go")))
    await assert_eventually(lambda: len(fake_anthropic.requests) >= 1)  # the lead is asked
    sent = await team.send("busy", "a long job", from_="lead")
    stream = await asyncio.wait_for(run, 60)

    result = stream[-1]
    assert isinstance(result, ResultMessage) and result.subtype == "success"
    assert result.result == "lead done"  # the lead did not wait for the mail's work
    message = await team.mailbox.get(sent.id)
    assert message.status == "cancelled", message
    # the stream tells the whole story, in order, before the result
    told = [(e.type, e.event) for e in stream if isinstance(e, TeamMessageEvent | TeamAgentEvent)]
    finish = [("team_agent", "finished")] if member_kind == "agent" else []  # a run's result
    assert told == [
        ("team_message", "sent"),
        ("team_agent", "started"),
        *finish,
        ("team_message", "cancelled"),
    ]
    (cancelled,) = [e for e in stream if isinstance(e, TeamMessageEvent) and e.event != "sent"]
    assert cancelled.message_id == sent.id and cancelled.to_mailbox == "shop::busy"
    assert cancelled.body == message.result  # why it ended, as the mailbox says
    if member_kind == "agent":
        (finished,) = [e for e in stream if isinstance(e, TeamAgentEvent) and e.event == "finished"]
        assert finished.subtype == "error_abort"  # the member's run was stopped
        # and the member's own messages end with that result, nested in the stream
        nested = [e.message for e in stream if isinstance(e, AgentMessageEvent)]
        assert isinstance(nested[-1], ResultMessage) and nested[-1].subtype == "error_abort"
    else:
        assert host.cancelled.is_set()  # the host's prompt() was cancelled, not waited out
