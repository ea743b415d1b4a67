"""History stores (JSONL, Postgres, custom), replace_history, and resuming a session from what
Temporal holds in another process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid

import pytest

from agent_lattice import (
    ConcurrentQueryError,
    HistoryStoreError,
    ModelMessage,
    OptionError,
    create_agent,
    create_jsonl_history_store,
    create_postgres_history_store,
    define_history_store,
)
from agent_lattice.testing import (
    Script,
    check_history_store_conformance,
    hang,
    text,
    tool_use,
)

from conftest import API_KEY, make_calculator


async def test_jsonl_store_seeds_then_mirrors_every_message(make_agent, fake_anthropic, tmp_path):
    path = tmp_path / "sessions" / "ada.jsonl"
    path.parent.mkdir()
    earlier = [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello Ada."}]},
    ]
    path.write_text("".join(json.dumps(m) + "\n" for m in earlier) + '{"role": "user", "cont')
    fake_anthropic.set_handler(Script(tool_use("calculator", {"expr": "1+1"}), text("Ada.")))
    agent = make_agent(
        history_store=create_jsonl_history_store(path=path), tools=[make_calculator()]
    )

    result = await agent.prompt("What is my name?")

    assert result.result == "Ada."
    sent = fake_anthropic.requests[0].messages
    assert [m["content"] for m in sent[:2]] == [earlier[0]["content"], earlier[1]["content"]]
    # the torn last line was skipped, nothing else lost; the new messages were appended after it
    lines = path.read_text().splitlines()
    assert lines[2] == '{"role": "user", "cont'
    stored = [json.loads(line) for line in lines[3:]]
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
    assert stored[0]["content"] == "What is my name?"
    assert stored[2]["content"][0]["type"] == "tool_result"
    reloaded = await create_jsonl_history_store(path=path).load()
    assert reloaded == await agent.get_history()
    copy = await agent.get_history()
    copy.clear()
    assert len(await agent.get_history()) == 6  # get_history() is a copy


async def test_load_runs_once_and_replace_history_suppresses_it(make_agent, fake_anthropic):
    calls: list[str] = []
    stored: list[ModelMessage] = []

    async def load():
        calls.append("load")
        return [{"role": "user", "content": "seeded"}, {"role": "assistant", "content": "ok"}]

    store = define_history_store(
        load=load,
        append=lambda m: (calls.append("append"), stored.append(m)),
        replace=lambda ms: (calls.append(f"replace:{len(ms)}"), stored.__init__(ms)),
    )
    fake_anthropic.set_handler(Script(text("one"), text("two"), text("three")))
    agent = make_agent(history_store=store)
    await agent.prompt("first")
    await agent.prompt("second")
    assert calls.count("load") == 1
    assert len(fake_anthropic.requests[1].messages) == 5  # seeded 2 + first 2 + prompt

    fresh = make_agent(history_store=store)
    await fresh.replace_history(
        [
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": [{"type": "text", "text": "Nice to meet you, Ada."}]},
        ]
    )
    await fresh.prompt("third")
    assert calls.count("load") == 1  # the replacement suppressed the lazy load
    assert "replace:2" in calls
    assert fake_anthropic.requests[2].messages[0]["content"] == "My name is Ada."
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]


async def test_replace_history_is_idle_only(make_agent, fake_anthropic):
    fake_anthropic.set_handler(Script(hang(30)))
    agent = make_agent()
    task = asyncio.ensure_future(agent.prompt("hi"))
    await asyncio.sleep(0.5)
    with pytest.raises(ConcurrentQueryError):
        await agent.replace_history([])
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(OptionError, match="replace_history\\(\\): message 0"):
        await agent.replace_history([{"role": "robot", "content": "x"}])


async def test_failing_store_is_swallowed_unless_bound_to_fail(make_agent, fake_anthropic):
    def broken(*_):
        raise OSError("disk full")

    fake_anthropic.set_handler(Script(text("still here"), text("again")))
    lenient = make_agent(
        history_store=define_history_store(load=broken, append=broken, replace=broken)
    )
    result = await lenient.prompt("hi")
    assert result.result == "still here" and len(await lenient.get_history()) == 2

    strict = make_agent(
        history_store=define_history_store(
            load=list, append=broken, replace=broken, fail_on_error=True
        )
    )
    with pytest.raises(HistoryStoreError, match="append\\(\\) failed: OSError: disk full"):
        await strict.prompt("hi")
    assert strict.interrupt() is False  # the agent is idle again


def test_store_options_are_checked(tmp_path):
    with pytest.raises(OptionError, match="load must be callable"):
        define_history_store(load=None, append=print, replace=print)
    with pytest.raises(OptionError, match="history_store must be a HistoryStore"):
        create_agent(model="m", history_store=object())
    with pytest.raises(OptionError, match="table must be a lowercase SQL identifier"):
        create_postgres_history_store(dsn="postgresql://x", conversation_id="c", table="x; drop")
    with pytest.raises(OptionError, match="session_id must contain only"):
        create_agent(model="m", session_id="a b")


async def test_jsonl_store_conformance(tmp_path):
    path = tmp_path / "conv.jsonl"
    await check_history_store_conformance(lambda: create_jsonl_history_store(path=path))


async def test_postgres_store_conformance_and_isolation(postgres_dsn):
    table = f"lattice_history_test_{uuid.uuid4().hex[:8]}"
    conversation = "conv-a"
    try:
        await check_history_store_conformance(
            lambda: create_postgres_history_store(
                dsn=postgres_dsn, conversation_id=conversation, table=table, fail_on_error=True
            )
        )
        other = create_postgres_history_store(
            dsn=postgres_dsn, conversation_id="conv-b", table=table, fail_on_error=True
        )
        await other.append(ModelMessage(role="user", content="b only"))
        mine = create_postgres_history_store(
            dsn=postgres_dsn, conversation_id=conversation, table=table, fail_on_error=True
        )
        assert await mine.load() == []
        assert [m.content for m in await other.load()] == ["b only"]
    finally:
        import psycopg

        async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
            await conn.execute(f"DROP TABLE IF EXISTS {table}")


FIRST_PROCESS = """
import asyncio, sys
from agent_lattice import create_agent

async def main():
    agent = create_agent(api_key=sys.argv[1], base_url=sys.argv[2], model="claude-test",
                         name="resumable", session_id=sys.argv[3])
    print((await agent.prompt("My name is Ada.")).result)

asyncio.run(main())
"""


async def test_new_agent_resumes_a_session_from_temporal_in_another_process(
    lattice_server, fake_anthropic, lattice_runtime
):
    session = f"s{uuid.uuid4().hex[:10]}"
    fake_anthropic.set_handler(Script(text("Hello Ada."), text("Your name is Ada.")))
    env = {**os.environ, "TEMPORAL_ADDRESS": lattice_server}
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", FIRST_PROCESS, API_KEY, fake_anthropic.base_url, session],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Hello Ada."

    agent = create_agent(
        api_key=API_KEY,
        base_url=fake_anthropic.base_url,
        model="claude-test",
        name="resumable",
        session_id=session,
    )
    result = await agent.prompt("What is my name?")

    assert result.result == "Your name is Ada."
    sent = fake_anthropic.requests[1].messages
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"] == "My name is Ada."
    assert result.workflow_id == f"resumable-{session}-2"  # numbering continues
    assert [m.role for m in await agent.get_history()] == ["user", "assistant"] * 2
