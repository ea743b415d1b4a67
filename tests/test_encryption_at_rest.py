"""Encryption at rest: with keys, the transcript store (SQLite and Postgres: messages, large
tool results, tool call records) and the history stores that ask hold no plain text, their
keys rotate (k1 → k2,k1 → k2) and a key that is gone is one error naming its id; stores
written before keys were set still read. (A whole deployment grepped byte by byte:
tests/test_deployment_grep.py.)"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from agent_lattice import (
    ConfigurationError,
    EncryptionKeys,
    HistoryStoreError,
    LatticePlugin,
    ModelMessage,
    ToolResultBlock,
    UnknownEncryptionKeyError,
    create_bare_agent,
    create_jsonl_history_store,
    create_postgres_history_store,
)
from agent_lattice.client import Runtime
from agent_lattice.history._transcripts import (
    PostgresTranscriptStore,
    SqliteTranscriptStore,
    TranscriptStore,
)
from agent_lattice.testing import (
    FAST_SETTINGS,
    SAMPLE_CONVERSATION,
    FakeAnthropicServer,
    Script,
    text,
)
from agent_lattice.workflows._types import AgentRunOutput

from conftest import API_KEY, TRANSCRIPT_TABLES, table_text

K1 = base64.b64encode(os.urandom(32)).decode()
K2 = base64.b64encode(os.urandom(32)).decode()


def keys(text: str | None) -> EncryptionKeys | None:
    return None if text is None else EncryptionKeys.parse(text)


ONLY_K1, BOTH, ONLY_K2 = f"k1:{K1}", f"k2:{K2},k1:{K1}", f"k2:{K2}"


def sqlite_text(path: Path) -> str:
    """The raw bytes of a SQLite store and its WAL, as text a grep would see."""
    files = [path, path.with_name(path.name + "-wal")]
    return "\n".join(p.read_bytes().decode("latin-1") for p in files if p.exists())


def opener(kind: str, tmp_path: Path, dsn: str | None):
    def store(key_text: str | None) -> TranscriptStore:
        if kind == "sqlite":
            return SqliteTranscriptStore(tmp_path / "t.db", keys(key_text))
        assert dsn is not None
        return PostgresTranscriptStore(dsn, keys(key_text))

    async def raw() -> str:
        if kind == "sqlite":
            return sqlite_text(tmp_path / "t.db")
        assert dsn is not None
        return await table_text(dsn, *TRANSCRIPT_TABLES)

    return store, raw


def said(text: str, role: str = "user") -> ModelMessage:
    return ModelMessage(role=role, content=text)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_transcript_rows_are_encrypted_and_rotate_from_k1_to_k2(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    dsn = request.getfixturevalue("pg_schema") if kind == "postgres" else None
    store, raw = opener(kind, tmp_path, dsn)
    tag = uuid.uuid4().hex[:8]

    # before keys: plain rows, SHA-256 addresses (what every store written so far holds)
    plain = store(None)
    old_head = await plain.append(None, [said(f"PLAIN-{tag} from before the keys")])
    assert f"PLAIN-{tag}" in await raw()

    # k1: the old chain still reads and goes on; what is new is encrypted
    k1 = store(ONLY_K1)
    assert [m.content for m in await k1.messages(old_head)] == [f"PLAIN-{tag} from before the keys"]
    head1 = await k1.append(old_head, [said(f"SECRET1-{tag}", "assistant")])
    big = ToolResultBlock(tool_use_id="t", content="z" * 3000 + f" BLOB1-{tag}")
    ref1 = (await k1.externalize(big)).content_ref
    assert ref1 is not None
    await k1.tool_call_finished(f"call1-{tag}", json.dumps({"content": f"CALL1-{tag}"}))
    # content addressing keeps working: equal content, equal keys (a retried activity)
    assert await k1.append(old_head, [said(f"SECRET1-{tag}", "assistant")]) == head1
    # ... and a keyed hash: the same text under no keys (another deployment) is another head
    same = [said(f"the same text {tag}")]
    assert await plain.append(None, same) != await k1.append(None, same)

    # k2 first, k1 still listed: every k1 record reads, new ones are k2's
    both = store(BOTH)
    assert [m.content for m in await both.messages(head1)][-1] == f"SECRET1-{tag}"
    assert (await both.get_blob(ref1)).endswith(f'BLOB1-{tag}"')
    assert await both.tool_call(f"call1-{tag}") == (True, json.dumps({"content": f"CALL1-{tag}"}))
    head2 = await both.append(head1, [said(f"SECRET2-{tag}")])
    ref2 = await both.put_blob(json.dumps(f"BLOB2-{tag}"))
    await both.tool_call_finished(f"call2-{tag}", json.dumps({"content": f"CALL2-{tag}"}))

    text = await raw()
    for secret in ("SECRET1", "BLOB1", "CALL1", "SECRET2", "BLOB2", "CALL2"):
        assert f"{secret}-{tag}" not in text, secret

    # k1 dropped: what only k2 wrote reads; a chain through k1's records is one clear error
    k2 = store(ONLY_K2)
    assert json.loads(await k2.get_blob(ref2)) == f"BLOB2-{tag}"
    assert await k2.tool_call(f"call2-{tag}") == (True, json.dumps({"content": f"CALL2-{tag}"}))
    fresh = await k2.append(None, [said(f"only k2 {tag}")])
    assert [m.content for m in await k2.messages(fresh)] == [f"only k2 {tag}"]
    with pytest.raises(UnknownEncryptionKeyError) as caught:
        await k2.messages(head2)
    assert caught.value.key_id == "k1"
    message = str(caught.value)
    assert message == (
        "a transcript message is encrypted with key 'k1', which this process was not given "
        "(its keys: k2); add that key to LATTICE_ENCRYPTION_KEYS after the current one"
    )
    assert K1 not in message and K2 not in message
    with pytest.raises(
        UnknownEncryptionKeyError, match="stored tool result is encrypted with key 'k1'"
    ):
        await k2.get_blob(ref1)
    with pytest.raises(
        UnknownEncryptionKeyError, match="tool call's record is encrypted with key 'k1'"
    ):
        await k2.tool_call(f"call1-{tag}")
    # the old plain rows read under any keys, and a process with none is told what it lacks
    assert len(await k2.messages(old_head)) == 1
    with pytest.raises(
        UnknownEncryptionKeyError, match="'k2' and this process has no encryption keys"
    ):
        await store(None).messages(fresh)
    # the same id with another key: refused, not garbage
    with pytest.raises(
        UnknownEncryptionKeyError, match="does not decrypt with this process's key 'k2'"
    ):
        await store(f"k2:{K1}").get_blob(ref2)


async def test_a_store_from_before_key_ids_gets_them_when_opened(tmp_path: Path) -> None:
    """A SQLite store made by an earlier version (no key_id columns) keeps its rows and takes
    encrypted ones beside them."""
    path = tmp_path / "t.db"
    with sqlite3.connect(path) as db:
        db.executescript(
            "CREATE TABLE lattice_chunks (hash TEXT PRIMARY KEY, body TEXT NOT NULL);"
            "CREATE TABLE lattice_links (head TEXT PRIMARY KEY, parent TEXT, chunk TEXT NOT NULL);"
            "CREATE TABLE lattice_blobs (ref TEXT PRIMARY KEY, data TEXT NOT NULL);"
            "CREATE TABLE lattice_tool_calls (call_key TEXT PRIMARY KEY, result TEXT,"
            " recorded_at REAL NOT NULL DEFAULT 0);"
            "INSERT INTO lattice_blobs VALUES ('r', '\"old\"');"
        )
    store = SqliteTranscriptStore(path, keys(ONLY_K1))
    assert await store.get_blob("r") == '"old"'
    head = await store.append(None, SAMPLE_CONVERSATION)
    assert await SqliteTranscriptStore(path, keys(BOTH)).messages(head) == SAMPLE_CONVERSATION


@pytest.mark.parametrize("kind", ["jsonl", "postgres"])
async def test_history_stores_encrypt_when_asked_and_rotate(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    tag = uuid.uuid4().hex[:8]
    conversation = f"c-{tag}"
    dsn = request.getfixturevalue("pg_schema") if kind == "postgres" else None

    def store(encryption_keys: Any):
        if kind == "jsonl":
            return create_jsonl_history_store(
                path=tmp_path / "h.jsonl", fail_on_error=True, encryption_keys=encryption_keys
            )
        assert dsn is not None
        return create_postgres_history_store(
            dsn=dsn,
            conversation_id=conversation,
            fail_on_error=True,
            encryption_keys=encryption_keys,
        )

    async def raw() -> str:
        if kind == "jsonl":
            return (tmp_path / "h.jsonl").read_text()
        assert dsn is not None
        return await table_text(dsn, "lattice_history")

    # written plain before the keys: still read; appends under keys are encrypted
    await store(None).append(said(f"PLAIN-{tag}"))
    k1 = store(ONLY_K1)
    await k1.append(said(f"SECRET1-{tag}", "assistant"))
    assert [m.content for m in await k1.load()] == [f"PLAIN-{tag}", f"SECRET1-{tag}"]
    assert f"PLAIN-{tag}" in await raw() and f"SECRET1-{tag}" not in await raw()
    assert "key_id" in await raw()  # beside the record, in the clear
    # rotation: k2 first reads k1's; a replace rewrites everything under k2
    both = store(BOTH)
    assert len(await both.load()) == 2
    await both.append(said(f"SECRET2-{tag}"))
    with pytest.raises(
        HistoryStoreError, match="encrypted with key 'k1', which this process was not given"
    ):
        await store(ONLY_K2).load()
    await both.replace(await both.load())
    text = await raw()
    assert all(f"{s}-{tag}" not in text for s in ("PLAIN", "SECRET1", "SECRET2")), text
    assert [m.content for m in await store(ONLY_K2).load()] == [
        f"PLAIN-{tag}",
        f"SECRET1-{tag}",
        f"SECRET2-{tag}",
    ]
    # without keys an encrypted record is an error naming its key, never skipped as malformed
    with pytest.raises(HistoryStoreError, match="encrypted with key 'k2' and this process has no"):
        await store(None).load()


async def test_a_history_store_follows_the_runtime_keys_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``encryption_keys="runtime"``: the keys the process's lattice plugin was given (over
    the settings); none at all is an error saying so, at the store's first use."""
    import agent_lattice._keys as process

    monkeypatch.setattr(process, "_PROCESS", [])
    monkeypatch.delenv("LATTICE_ENCRYPTION_KEYS", raising=False)
    monkeypatch.delenv("LATTICE_ENCRYPTION_KEYS_FILE", raising=False)
    path = tmp_path / "h.jsonl"
    store = create_jsonl_history_store(path=path, fail_on_error=True, encryption_keys="runtime")
    with pytest.raises(
        HistoryStoreError, match='encryption_keys="runtime", and this process has no'
    ):
        await store.append(said("hello"))
    monkeypatch.setenv("LATTICE_ENCRYPTION_KEYS", ONLY_K1)  # the settings, when no plugin says
    await store.append(said("under k1"))
    LatticePlugin(encryption_keys=ONLY_K2)  # a runtime's own keys win
    LatticePlugin()  # (a plugin reading the settings does not override them)
    await store.append(said("under k2"))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["key_id"] for line in lines] == ["k1", "k2"]
    mine = create_jsonl_history_store(path=path, encryption_keys=f"k2:{K2},k1:{K1}")
    assert [m.content for m in await mine.load()] == ["under k1", "under k2"]
    with pytest.raises(ConfigurationError, match="encryption_keys: key 'k1' is not valid base64"):
        create_jsonl_history_store(path=path, encryption_keys="k1:not base64!")


async def test_a_session_goes_on_as_keys_are_turned_on_and_rotated(
    lattice_server: str,
    fake_anthropic: FakeAnthropicServer,
    task_queue_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One conversation, each query from a process of its own: before keys, under k1, under
    k2,k1, under k2 alone; the model gets the whole conversation each time (each process
    stores the conversation it resumes under its own first key). What k1 wrote is still
    there, and a process with k2 alone that reads it is told it lacks k1."""
    for name in (
        "LATTICE_TRANSCRIPT_DSN",
        "LATTICE_ENCRYPTION_KEYS",
        "LATTICE_ENCRYPTION_KEYS_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    monkeypatch.setenv("LATTICE_HOME", str(home))
    session = f"s{uuid.uuid4().hex[:10]}"
    fake_anthropic.set_handler(Script(text("one"), text("two"), text("three"), text("four")))

    async def prompt(key_text: str | None, words: str) -> str | None:
        runtime = await Runtime.connect(
            lattice_server, settings=FAST_SETTINGS, encryption_keys=key_text
        )
        try:
            agent = create_bare_agent(
                api_key=API_KEY,
                base_url=fake_anthropic.base_url,
                model="claude-test",
                name="rotating",
                session_id=session,
            ).bind_runtime(runtime)
            return (await agent.prompt(words)).result
        finally:
            await runtime.close()

    said = ["before the keys", "one", "under k1", "two", "under k2, k1 listed", "three"]
    assert await prompt(None, said[0]) == "one"
    assert await prompt(ONLY_K1, said[2]) == "two"
    assert await prompt(BOTH, said[4]) == "three"
    assert await prompt(ONLY_K2, "k1 dropped") == "four"
    sent = [str(m["content"]) for m in fake_anthropic.requests[-1].messages]
    assert [next(w for w in said if w in m) for m in sent[:-1]] == said

    runtime = await Runtime.connect(lattice_server, encryption_keys=BOTH)
    try:
        handle = runtime.client.get_workflow_handle(
            f"rotating-{session}-2", result_type=AgentRunOutput
        )
        head = (await handle.result()).head  # the transcript the k1 worker wrote
    finally:
        await runtime.close()
    assert head is not None
    with sqlite3.connect(home / "transcripts.db") as db:
        ids = {row[0] for row in db.execute("SELECT DISTINCT key_id FROM lattice_chunks")}
    assert ids == {None, "k1", "k2"}
    store = SqliteTranscriptStore(home / "transcripts.db", keys(BOTH))
    assert "under k1" in str(await store.messages(head))
    with pytest.raises(UnknownEncryptionKeyError, match="key 'k1', which this process was not"):
        await SqliteTranscriptStore(home / "transcripts.db", keys(ONLY_K2)).messages(head)
