"""Team mailboxes: every backend passes the conformance check."""

from __future__ import annotations

import sqlite3
import uuid

import pytest

from agent_lattice import (
    OptionError,
    TeamMailbox,
    TeamMessage,
    create_memory_mailbox,
    create_postgres_mailbox,
    create_sqlite_mailbox,
    create_workflow_mailbox,
    mailbox_id,
)
from agent_lattice.testing import check_mailbox_conformance


async def test_memory_mailbox_conformance():
    box = create_memory_mailbox()
    await check_mailbox_conformance(lambda: box)


async def test_sqlite_mailbox_conformance(tmp_path):
    await check_mailbox_conformance(lambda: create_sqlite_mailbox(path=tmp_path / "team.db"))


async def test_sqlite_mailbox_over_a_host_connection(tmp_path):
    """The host keeps its connection: the mailbox uses it (its table in that database) and
    never closes it."""
    conn = sqlite3.connect(tmp_path / "host.db", check_same_thread=False)
    try:
        conn.execute("CREATE TABLE host_notes (note TEXT)")
        conn.commit()
        # a new mailbox object per call, all over the one connection
        await check_mailbox_conformance(lambda: create_sqlite_mailbox(database=conn))
        count = conn.execute("SELECT count(*) FROM lattice_team_messages").fetchone()[0]
        assert count > 0  # the messages live in the host's database
        conn.execute("INSERT INTO host_notes VALUES ('still mine')")
        conn.commit()
        assert conn.execute("SELECT note FROM host_notes").fetchall() == [("still mine",)]
        # another process (a file-path mailbox) sees the same messages
        reader = create_sqlite_mailbox(path=tmp_path / "host.db")
        assert len(await reader.inbox("eng::researcher")) == 2
    finally:
        conn.close()


def test_sqlite_mailbox_arguments(tmp_path):
    with pytest.raises(OptionError, match=r"exactly one of path= .* or database="):
        create_sqlite_mailbox()
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    with pytest.raises(OptionError, match=r"exactly one of path= .* or database="):
        create_sqlite_mailbox(path=tmp_path / "x.db", database=conn)
    with pytest.raises(OptionError, match=r"database must be a sqlite3\.Connection; got str"):
        create_sqlite_mailbox(database=str(tmp_path / "x.db"))  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="table must be a lowercase SQL identifier"):
        create_sqlite_mailbox(database=conn, table="Bad Table")
    pinned = sqlite3.connect(":memory:")  # check_same_thread=True by default
    with pytest.raises(OptionError, match="check_same_thread=False"):
        create_sqlite_mailbox(database=pinned)
    pinned.close()
    conn.close()
    with pytest.raises(OptionError, match="database is not usable: Cannot operate on a closed"):
        create_sqlite_mailbox(database=conn)


async def test_workflow_mailbox_conformance(lattice_runtime):
    name = f"conformance-{uuid.uuid4().hex[:8]}"
    # a new client object each call: the state lives in the workflow, not in the object
    await check_mailbox_conformance(lambda: create_workflow_mailbox(name))


async def test_workflow_mailbox_keeps_its_messages_across_continue_as_new(lattice_runtime):
    box = create_workflow_mailbox(f"can-{uuid.uuid4().hex[:8]}", max_history_events=30)
    for i in range(12):  # each send and each update adds history events: several runs
        await box.send(TeamMessage(from_mailbox="t::lead", to_mailbox="t::a", body=str(i)))
        if i % 3 == 0:
            claimed = await box.claim_next("t::a")
            await box.set_status(claimed.id, "done", result=f"r{i}")
    handle = lattice_runtime.client.get_workflow_handle(box.workflow_id)
    description = await handle.describe()
    assert description.run_id != description.raw_description.workflow_execution_info.first_run_id
    inbox = await box.inbox("t::a")
    assert [m.body for m in inbox] == [str(i) for i in range(12)]  # nothing lost, in order
    assert [m.body for m in inbox if m.status == "done"] == ["0", "1", "2", "3"]
    assert [m.result for m in inbox if m.status == "done"] == ["r0", "r3", "r6", "r9"]
    assert (await box.claim_next("t::a")).body == "4"  # the oldest pending one
    first_done = next(m for m in inbox if m.status == "done")
    with pytest.raises(OptionError, match=f"{first_done.id} is already done; it cannot become"):
        await box.set_status(first_done.id, "failed")  # refused by the update's validator


async def test_postgres_mailbox_conformance(postgres_dsn):
    import psycopg

    table = f"lattice_team_test_{uuid.uuid4().hex[:8]}"
    try:
        await check_mailbox_conformance(
            lambda: create_postgres_mailbox(dsn=postgres_dsn, table=table)
        )
    finally:
        async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
            await conn.execute(f"DROP TABLE IF EXISTS {table}")


def test_mailbox_ids_and_options(tmp_path):
    assert mailbox_id("engineering", "researcher") == "engineering::researcher"
    assert isinstance(create_memory_mailbox(), TeamMailbox)
    with pytest.raises(OptionError, match="table must be a lowercase SQL identifier"):
        create_sqlite_mailbox(path=tmp_path / "x.db", table="Bad Table")
    with pytest.raises(OptionError, match="dsn must be a connection string"):
        create_postgres_mailbox(dsn="")
    with pytest.raises(OptionError, match="name must be a printable string"):
        create_workflow_mailbox("")
    assert create_workflow_mailbox("a team").workflow_id.endswith("team-mailbox-a team")
    with pytest.raises(OptionError, match="max_history_events"):
        create_workflow_mailbox("team", max_history_events=3)


async def test_a_workflow_mailbox_no_worker_hosts_says_so(
    lattice_server, task_queue_prefix, monkeypatch
):
    from agent_lattice import ConfigurationError, Runtime
    from agent_lattice.client import _mailbox

    monkeypatch.setattr(_mailbox, "ANSWER_TIMEOUT_S", 1.0)
    runtime = await Runtime.connect(lattice_server, inline_workers=False, quiet=True)
    try:
        box = create_workflow_mailbox(f"unhosted-{uuid.uuid4().hex[:6]}", runtime=runtime)
        sent = await box.send(TeamMessage(from_mailbox="u::lead", to_mailbox="u::a", body="x"))
        assert sent.body == "x"  # a send is a signal: it lands without any worker
        for read in (box.inbox("u::a"), box.claim_next("u::a")):
            with pytest.raises(ConfigurationError, match="is a worker hosting task queue"):
                await read
    finally:
        await runtime.close()
