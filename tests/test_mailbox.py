"""Team mailboxes: every backend passes the conformance check."""

from __future__ import annotations

import os
import uuid

import pytest

from agent_lattice import (
    OptionError,
    TeamMailbox,
    create_memory_mailbox,
    create_postgres_mailbox,
    create_sqlite_mailbox,
    mailbox_id,
)
from agent_lattice.testing import check_mailbox_conformance

POSTGRES_DSN = os.environ.get("LATTICE_TEST_POSTGRES_DSN")


async def test_memory_mailbox_conformance():
    box = create_memory_mailbox()
    await check_mailbox_conformance(lambda: box)


async def test_sqlite_mailbox_conformance(tmp_path):
    await check_mailbox_conformance(lambda: create_sqlite_mailbox(path=tmp_path / "team.db"))


@pytest.mark.skipif(
    not POSTGRES_DSN, reason="LATTICE_TEST_POSTGRES_DSN is not set (.ci/run sets it)"
)
async def test_postgres_mailbox_conformance():
    import psycopg

    table = f"lattice_team_test_{uuid.uuid4().hex[:8]}"
    try:
        await check_mailbox_conformance(
            lambda: create_postgres_mailbox(dsn=POSTGRES_DSN, table=table)
        )
    finally:
        async with await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as conn:
            await conn.execute(f"DROP TABLE IF EXISTS {table}")


def test_mailbox_ids_and_options(tmp_path):
    assert mailbox_id("engineering", "researcher") == "engineering::researcher"
    assert isinstance(create_memory_mailbox(), TeamMailbox)
    with pytest.raises(OptionError, match="table must be a lowercase SQL identifier"):
        create_sqlite_mailbox(path=tmp_path / "x.db", table="Bad Table")
    with pytest.raises(OptionError, match="dsn must be a connection string"):
        create_postgres_mailbox(dsn="")
