"""Session: one conversation's state, driven through its public methods by the client and the
activities (no server here: the transcript store is a real SQLite one in a temp folder)."""

from __future__ import annotations

from typing import Literal

import pytest

from agent_lattice import ConcurrentQueryError, ModelMessage, create_bare_agent
from agent_lattice._session import Session
from agent_lattice.history._transcripts import SqliteTranscriptStore
from agent_lattice.testing import collect, text

from conftest import API_KEY, note_rpcs


def _msg(role: Literal["user", "assistant"], text: str) -> ModelMessage:
    return ModelMessage(role=role, content=text)


class _Run:
    def __init__(self) -> None:
        self.interrupted = 0

    def interrupt(self) -> bool:
        self.interrupted += 1
        return True


async def test_one_query_at_a_time_and_only_the_holder_interrupts():
    session = Session("s1")
    run = _Run()
    session.reserve(run)  # type: ignore[arg-type] - only interrupt() is asked of it
    with pytest.raises(ConcurrentQueryError, match="one conversation"):
        session.reserve()
    assert session.interrupt() and run.interrupted == 1
    with pytest.raises(ConcurrentQueryError, match="replace_history"):
        await session.replace([_msg("user", "x")])
    session.release()
    session.reserve()  # a delegated query: its parent's run controls it
    assert session.busy and not session.interrupt()
    session.release()
    assert not session.busy and not session.interrupt()


async def test_queries_are_numbered_and_the_history_grows_or_is_replaced_by_a_compaction(
    tmp_path,
):
    store = SqliteTranscriptStore(tmp_path / "transcripts.db")
    session = Session("s2")
    await session.load()
    assert session.loaded and session.history == []
    assert [session.next_query(), session.next_query()] == [1, 2]
    first = [_msg("user", "a"), _msg("assistant", "b")]
    await session.absorb(first)
    head = await session.transcript_head(store)
    assert await session.transcript_head(store) == head  # kept while the history is unchanged
    assert [m.text for m in await store.messages(head)] == ["a", "b"]
    await session.absorb([_msg("user", "c")])
    assert await session.transcript_head(store) != head  # the history grew
    summary = [_msg("user", "summary")]
    await session.absorb([_msg("assistant", "d")], compacted_to=summary)
    assert [m.text for m in session.history] == ["summary"]


async def test_an_agent_and_its_views_share_one_session():
    agent = create_bare_agent(api_key=API_KEY, base_url="http://127.0.0.1:9", model="m")
    view = agent.with_tools([])
    assert view.session is agent.session and view.session_id == agent.session_id
    await agent.replace_history([{"role": "user", "content": "hi"}])
    assert [m.text for m in await view.get_history()] == ["hi"]
    agent.session.reserve()
    with pytest.raises(ConcurrentQueryError):
        await collect(view.query("again"))
    agent.session.release()


def test_a_team_the_host_drops_is_collected(fake_anthropic):
    import gc
    import weakref

    from agent_lattice import create_team, team_member
    from agent_lattice.teams._team import team_of

    from conftest import named_agent

    lead = named_agent(fake_anthropic, "lead")
    team = create_team(
        name="dropped",
        lead=lead,
        members=[team_member(name="w", agent=named_agent(fake_anthropic, "w"))],
        expose_lead_mailbox_tools=True,  # the lead's tools then refer to the team
    )
    assert team_of(team.lead) is team
    gone = [weakref.ref(team), weakref.ref(team.lead)]
    del team
    for _ in range(3):  # a cycle freed by one pass may hold the next (finalizers run between)
        gc.collect()
    assert [ref() for ref in gone] == [None, None]


async def test_a_session_made_here_is_not_looked_up_on_the_server(
    make_agent, fake_anthropic, lattice_runtime, monkeypatch
):
    """An agent given no session_id has a new session: its first query starts without asking
    Temporal for earlier queries of it (a service making an agent per request pays no round
    trip for them); an agent given a session_id is looked up, to resume it."""
    fake_anthropic.set_handler(lambda r: text("hello"))
    service = lattice_runtime.client.workflow_service
    calls = note_rpcs(monkeypatch, service, "describe_workflow_execution")

    def asked() -> list[str]:
        return [req.execution.workflow_id for _, req in calls]

    fresh = make_agent(name="fresh")
    assert (await fresh.prompt("Hi.")).result == "hello"
    assert asked() == []
    given = f"s{fresh.session_id[:8]}"
    named = make_agent(name="named", session_id=given)
    assert (await named.prompt("Hi.")).result == "hello"
    assert asked() == [f"named-{given}-1"]  # no earlier query: a new session after all
