"""Commit notices: the worker tells a query's reader what each workflow task published once
the server has taken it (``worker/_commits``), so the reader neither long-polls the run's
history nor queries its stream per turn; a lost notice costs a read, never a message."""

from __future__ import annotations

import base64
import os

import pytest
from temporalio.client import WorkflowHandle, WorkflowHistoryEventAsyncIterator

from agent_lattice import AssistantMessage, ResultMessage, Runtime, UserMessage
from agent_lattice.client import _follow
from agent_lattice.testing import FAST_SETTINGS, Script, text, tool_use
from agent_lattice.worker import _commits
from agent_lattice.worker._sdk_internals import fast_paths_on

from conftest import make_calculator
from crash_app import build_agent

pytestmark = pytest.mark.skipif(
    not fast_paths_on(), reason="the commit_notices fast path is off (LATTICE_SDK_FAST_PATHS=off)"
)


TURNS = 5
EXPECTED = ["system", *["assistant", "user"] * TURNS, "assistant", "result"]


@pytest.fixture
def reads(monkeypatch):
    """The client's stream queries and history pages (counted, nothing replaced)."""
    counts = {"query": 0, "page": 0}
    query, page = WorkflowHandle.query, WorkflowHistoryEventAsyncIterator.fetch_next_page

    async def counted_query(self, name, *args, **kwargs):
        if name == _follow.POLL_QUERY:
            counts["query"] += 1
        return await query(self, name, *args, **kwargs)

    async def counted_page(self, *args, **kwargs):
        counts["page"] += 1
        await page(self, *args, **kwargs)

    monkeypatch.setattr(WorkflowHandle, "query", counted_query)
    monkeypatch.setattr(WorkflowHistoryEventAsyncIterator, "fetch_next_page", counted_page)
    return counts


def tool_turns(n: int) -> Script:
    return Script(*(tool_use("calculator", {"expr": f"{i}+1"}) for i in range(n)), text("done"))


def durable(messages: list) -> list[str]:
    return [m.type for m in messages if m.type != "stream_event"]


async def every_message_once(make_agent, fake_anthropic, name: str) -> list:
    """A query of TURNS tool turns: each of its messages once, in order."""
    fake_anthropic.set_handler(tool_turns(TURNS))
    agent = make_agent(name=name, tools=[make_calculator()])
    messages = [m async for m in agent.query("go")]
    assert durable(messages) == EXPECTED
    results = [m.message.content[0].content for m in messages if isinstance(m, UserMessage)]
    assert results == [str(i + 1) for i in range(TURNS)]
    return messages


async def test_a_query_reads_what_its_tasks_published_from_the_worker(
    make_agent, fake_anthropic, reads, monkeypatch
):
    """Every message once, in order, with no stream query per turn and no history page per
    workflow task: the run's close is all the reader long-polls for."""
    monkeypatch.setattr(_follow, "NOTICE_QUIET_S", 30.0)  # no check while a loaded CI waits
    messages = await every_message_once(make_agent, fake_anthropic, "noticed")
    assert isinstance(messages[-1], ResultMessage) and messages[-1].result == "done"
    # the first task is read as without notices when its history page beats its notice (one
    # query at most); after that, nothing per turn (without notices: 7 queries, 23 pages)
    assert reads["query"] <= 1, reads
    assert reads["page"] <= 8, reads


@pytest.mark.parametrize("lost", ["every other", "all after the first"])
async def test_a_lost_notice_costs_a_read_not_a_message(
    make_agent, fake_anthropic, monkeypatch, reads, lost
):
    """Notices that never arrive (a worker killed after the server took its task, a channel
    that broke): the reader finds what they carried with a read of the stream, and once a
    read finds messages no notice brought it reads as without notices for the rest."""
    send, sent = _commits._Channels.send, []

    def lossy(self, *args, **kwargs):
        sent.append(args)
        if (lost == "every other" and len(sent) % 2 == 0) or (
            lost == "all after the first" and len(sent) > 1
        ):
            return None
        return send(self, *args, **kwargs)

    monkeypatch.setattr(_commits._Channels, "send", lossy)
    await every_message_once(make_agent, fake_anthropic, "lossy")
    assert len(sent) > TURNS  # the worker did mean to tell the reader
    assert reads["query"] >= 1  # and the reader found what was lost by reading


@pytest.mark.slow
async def test_with_encryption_keys_notices_travel_encrypted(
    lattice_server, task_queue_prefix, fake_anthropic, workers, reads, monkeypatch
):
    """A worker with encryption keys sends its notices too, encrypted on the caller's sealed
    channel (a key derived from the encryption keys), so the reader reads nothing per turn."""
    monkeypatch.setattr(_follow, "NOTICE_QUIET_S", 30.0)
    monkeypatch.setenv("LATTICE_ENCRYPTION_KEYS", f"k1:{base64.b64encode(os.urandom(32)).decode()}")
    fake_anthropic.set_handler(
        Script(*(tool_use("record", {"text": f"n{i}"}) for i in range(TURNS)), text("done"))
    )
    await workers()  # with the keys, from the environment
    runtime = await Runtime.connect(lattice_server, settings=FAST_SETTINGS, inline_workers=False)
    try:
        messages = [
            m async for m in build_agent(fake_anthropic.base_url).query("go", runtime=runtime)
        ]
    finally:
        await runtime.close()
    assert durable(messages) == EXPECTED
    assert reads["query"] <= 1, reads
    assert reads["page"] <= 8, reads


async def test_a_worker_in_another_process_notices_over_tcp(
    remote_runtime, fake_anthropic, workers, reads, monkeypatch
):
    """The notices of a worker in another process travel over the caller's side channel."""
    monkeypatch.setattr(_follow, "NOTICE_QUIET_S", 30.0)
    fake_anthropic.set_handler(
        Script(*(tool_use("record", {"text": f"n{i}"}) for i in range(TURNS)), text("done"))
    )
    await workers()
    agent = build_agent(fake_anthropic.base_url)
    messages = [m async for m in agent.query("go", runtime=remote_runtime)]
    assert durable(messages) == EXPECTED
    assert [m for m in messages if isinstance(m, AssistantMessage)][-1].message.content
    assert reads["query"] <= 1, reads
    assert reads["page"] <= 8, reads
