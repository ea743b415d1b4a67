"""The transcript travels by reference: only new content enters workflow history, large tool
results and prompts are stored once, and everything a user sees is resolved."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import uuid

import pytest

from agent_lattice import ConfigurationError, ToolResult, ToolResultBlock, UserMessage, tool
from agent_lattice._messages import ModelMessage
from agent_lattice.history._transcripts import (
    PostgresTranscriptStore,
    SqliteTranscriptStore,
    TranscriptMissing,
)
from agent_lattice.testing import SAMPLE_CONVERSATION, Script, collect, text, tool_use

from conftest import Expr


async def test_large_tool_results_and_prompts_stay_out_of_history(make_agent, fake_anthropic):
    big = "".join(f"line {i:05d} of the report\n" for i in range(1000))  # ~25 KB
    prompt = "Summarize this: " + "lorem ipsum " * 1000  # ~12 KB
    fake_anthropic.set_handler(
        Script(tool_use("report", {"expr": "q3"}), tool_use("report", {"expr": "q4"}), text("ok"))
    )
    agent = make_agent(
        tools=[tool("report", "Fetch a report", Expr, lambda _: ToolResult(content=big))]
    )

    messages = await collect(agent.query(prompt))

    result = messages[-1]
    assert result.subtype == "success"
    # the provider got everything, resolved
    last = fake_anthropic.requests[-1]
    assert last.messages[0]["content"] == prompt
    assert [r["content"] for r in last.tool_results] == [big]
    assert fake_anthropic.requests[1].tool_results[0]["content"] == big
    # so did the caller, and the stored conversation
    user_messages = [m for m in messages if isinstance(m, UserMessage)]
    assert [m.message.content[0].content for m in user_messages] == [big, big]
    assert all(m.message.content[0].content_ref is None for m in user_messages)
    history = await agent.get_history()
    assert history[0].content == prompt and history[2].content[0].content == big
    # but Temporal's history holds neither the results nor the prompt
    handle = make_agent.runtime.client.get_workflow_handle(result.workflow_id)
    raw = (await handle.fetch_history()).to_json()
    assert "line 00999 of the report" not in raw
    assert "lorem ipsum " * 20 not in raw
    assert len(raw) < 60_000


async def test_transcript_does_not_grow_each_model_input(make_agent, fake_anthropic):
    fake_anthropic.set_handler(
        Script(*(tool_use("report", {"expr": str(i)}) for i in range(6)), text("done"))
    )
    agent = make_agent(tools=[tool("report", "r", Expr, lambda e: "x" * 500 + e.expr)])
    result = await agent.prompt("go")
    assert result.num_turns == 7
    history = await make_agent.runtime.client.get_workflow_handle(
        result.workflow_id
    ).fetch_history()
    inputs = [
        e.activity_task_scheduled_event_attributes.input.ByteSize()
        for e in history.events
        if e.activity_task_scheduled_event_attributes.activity_type.name == "lattice.model_request"
    ]
    assert len(inputs) == 7
    # each model request carries a head and at most one turn of new content, never the transcript
    assert max(inputs) - min(inputs) < 1500, inputs
    assert len(fake_anthropic.requests[-1].messages) == 13  # the model did see all of it


async def test_long_query_continues_as_new_invisibly(lattice_server, fake_anthropic, tmp_path):
    from temporalio.client import WorkflowExecutionStatus

    from agent_lattice import AssistantMessage, ResultMessage, Runtime, create_agent
    from agent_lattice.testing import FAST_SETTINGS

    runtime = await Runtime.connect(
        lattice_server, settings=FAST_SETTINGS.model_copy(update={"turns_per_run": 3})
    )
    try:
        fake_anthropic.set_handler(
            Script(
                *(
                    tool_use("report", {"expr": str(i)}, usage={"input_tokens": 1})
                    for i in range(7)
                ),
                text("all 7 done", usage={"input_tokens": 1}),
            )
        )
        agent = create_agent(
            api_key="k",
            base_url=fake_anthropic.base_url,
            model="claude-test",
            name="marathon",
            tools=[tool("report", "r", Expr, lambda e: f"report {e.expr}")],
        ).bind_runtime(runtime)

        messages = await collect(agent.query("Run 8 turns.", timeout=120))

        result = messages[-1]
        assert isinstance(result, ResultMessage)
        assert result.subtype == "success" and result.result == "all 7 done"
        assert result.num_turns == 8 and result.usage.input_tokens == 8
        # the consumer saw every turn once, in order, across the runs
        turns = [m.turn for m in messages if isinstance(m, AssistantMessage)]
        assert turns == list(range(1, 9))
        assert [m.type for m in messages if m.type != "stream_event"].count("system") == 1
        history = await agent.get_history()
        assert len(history) == 1 + 8 + 7
        assert [r["content"] for r in fake_anthropic.requests[-1].tool_results] == ["report 6"]
        # three runs: the first two continued as new
        runs = [
            e async for e in runtime.client.list_workflows(f"WorkflowId = '{result.workflow_id}'")
        ]
        statuses = sorted(r.status for r in runs)
        assert statuses.count(WorkflowExecutionStatus.CONTINUED_AS_NEW) == 2, statuses
        # a closed run still reads back whole
        replay = [m async for m in runtime.durable_messages(result.workflow_id)]
        assert [m.turn for m in replay if isinstance(m, AssistantMessage)] == list(range(1, 9))
    finally:
        await runtime.close()


def _store(kind: str, tmp_path, request: pytest.FixtureRequest):
    if kind == "sqlite":
        return SqliteTranscriptStore(tmp_path / "t.db")
    return PostgresTranscriptStore(request.getfixturevalue("postgres_dsn"))


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_transcript_stores_are_content_addressed_and_idempotent(kind, tmp_path, request):
    store, name = _store(kind, tmp_path, request), kind
    head = await store.append(None, SAMPLE_CONVERSATION[:2])
    again = await store.append(None, SAMPLE_CONVERSATION[:2])  # a retried activity
    assert head == again, name
    full = await store.append(head, SAMPLE_CONVERSATION[2:])
    assert await store.messages(full) == SAMPLE_CONVERSATION, name
    assert await store.messages(head) == SAMPLE_CONVERSATION[:2], name
    # a branch from an earlier head leaves the other branch intact
    branch = await store.append(head, SAMPLE_CONVERSATION[3:])
    assert len(await store.messages(branch)) == 3
    assert await store.messages(full) == SAMPLE_CONVERSATION
    assert await store.messages(None) == []
    with pytest.raises(TranscriptMissing, match="LATTICE_TRANSCRIPT_DSN"):
        await store.messages("0" * 64)
    small = ToolResultBlock(tool_use_id="t", content="ok")
    assert await store.externalize(small) == small
    big = ToolResultBlock(tool_use_id="t", content=[{"type": "text", "text": "y" * 5000}])
    ref = await store.externalize(big)
    assert ref.content_ref and len(ref.content) < 300
    assert json.loads(await store.get_blob(ref.content_ref)) == big.content


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_tool_call_records_keep_the_first_result(kind, tmp_path, request):
    """A finished tool call's result under its idempotency key: a start mark gives way to
    the result, a later attempt's result does not replace the first."""
    if kind == "sqlite":  # a store made before the table existed gets it when opened
        with sqlite3.connect(tmp_path / "t.db") as db:
            db.execute("CREATE TABLE lattice_blobs (ref TEXT PRIMARY KEY, data TEXT NOT NULL)")
    store = _store(kind, tmp_path, request)
    key = f"wf-{uuid.uuid4().hex}/toolu_1"
    assert await store.tool_call(key) == (False, None)
    await store.tool_call_started(key)
    assert await store.tool_call(key) == (True, None)
    await store.tool_call_finished(key, '{"content": "first"}')
    await store.tool_call_finished(key, '{"content": "second"}')
    await store.tool_call_started(key)
    assert await store.tool_call(key) == (True, '{"content": "first"}')
    assert await store.tool_call(f"{key}x") == (False, None)


class _CountingStore(SqliteTranscriptStore):
    """Counts the transcripts it reads back from its database."""

    reads = 0

    def _chain(self, head: str) -> list[tuple[str, str, str | None]] | None:
        self.reads += 1
        return super()._chain(head)


async def test_a_worker_keeps_every_running_conversation_in_memory(tmp_path):
    """200 conversations moving turn by turn, interleaved (a worker's model requests): each
    next request's transcript comes from memory, none is read back and validated again."""
    store = _CountingStore(tmp_path / "t.db")
    heads: list[str | None] = [None] * 200
    for turn in range(4):
        for i in range(len(heads)):
            said = ModelMessage(role="user", content=f"conversation {i} turn {turn}")
            heads[i] = await store.append(heads[i], [said])
            messages = await store.messages(heads[i], copies=False)
            assert [m.content for m in messages][-1] == said.content
            assert len(messages) == turn + 1
    assert store.reads == 0


async def test_the_transcript_cache_is_bounded_by_size(tmp_path, monkeypatch):
    """LATTICE_TRANSCRIPT_CACHE_MB bounds it: past the bound the least recently used goes
    (and is read back, whole, when asked for); a bad value is refused by name."""
    monkeypatch.setenv("LATTICE_TRANSCRIPT_CACHE_MB", str(3000 / 2**20))  # ~3,000 B of JSON
    store = _CountingStore(tmp_path / "t.db")
    first = await store.append(None, [ModelMessage(role="user", content="a" * 1000)])
    second = await store.append(None, [ModelMessage(role="user", content="b" * 1000)])
    assert [m.content for m in await store.messages(first)] == ["a" * 1000]
    assert store.reads == 0  # both fit; reading the first makes the second the oldest
    third = await store.append(None, [ModelMessage(role="user", content="c" * 1000)])
    await store.messages(first)
    await store.messages(third)
    assert store.reads == 0
    assert [m.content for m in await store.messages(second)] == ["b" * 1000]
    assert store.reads == 1  # evicted, read back from the database
    huge = await store.append(None, [ModelMessage(role="user", content="d" * 5000)])  # > bound
    assert [m.content for m in await store.messages(huge)] == ["d" * 5000]
    assert store.reads == 2
    monkeypatch.setenv("LATTICE_TRANSCRIPT_CACHE_MB", "lots")
    with pytest.raises(ConfigurationError, match="LATTICE_TRANSCRIPT_CACHE_MB='lots'"):
        await SqliteTranscriptStore(tmp_path / "u.db").messages(first)


async def test_a_write_waits_for_another_writer_without_holding_up_the_loop(tmp_path):
    """Writes are tried on the event loop's thread only when SQLite takes them at once: one
    that meets another process's writer waits for it in a thread while the loop runs on, and
    lands once that writer is done."""
    store = SqliteTranscriptStore(tmp_path / "t.db")
    head = await store.append(None, [ModelMessage(role="user", content="before")])
    other = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # holds the write lock, as another process's writer does
    try:
        writing = asyncio.create_task(
            store.append(head, [ModelMessage(role="assistant", content="after")])
        )
        started = time.monotonic()
        for _ in range(10):  # the loop keeps turning while the write waits
            await asyncio.sleep(0.02)
        # a write that waited on the loop's thread would hold it for SQLite's busy timeout
        assert time.monotonic() - started < 2.5
        assert not writing.done()
    finally:
        other.execute("COMMIT")
        other.close()
    new_head = await asyncio.wait_for(writing, 10)
    fresh = SqliteTranscriptStore(tmp_path / "t.db")  # reads the database, not a cache
    assert [m.content for m in await fresh.messages(new_head)] == ["before", "after"]


async def test_writes_on_the_loop_leave_the_wal_checkpointed(tmp_path):
    """The loop's writes never checkpoint (that syncs the file); every so many go through a
    thread that does, so the WAL stays near SQLite's threshold (1,000 pages) instead of
    holding everything written."""
    store = SqliteTranscriptStore(tmp_path / "t.db")
    head = None
    for i in range(640):  # ~20 MB
        head = await store.append(head, [ModelMessage(role="user", content=f"{i} " + "x" * 30_000)])
    wal = (tmp_path / "t.db-wal").stat().st_size
    assert wal < 8 * 2**20, wal
    fresh = SqliteTranscriptStore(tmp_path / "t.db")
    assert len(await fresh.messages(head)) == 640
