"""With encryption keys set, the conversation is encrypted wherever it goes: a query with a
distinctive prompt, tool input, tool result (a small one, and a large one stored by
reference) and answer leaves none of them in any file under ``LATTICE_HOME`` — the embedded
server's temporal.db and its WAL, transcripts.db and its WAL, a JSONL history store,
everything — nor in a Postgres transcript store's tables or a Postgres history store. The
same query without keys leaves them in all of those, so the grep can fail. `lattice attach`
reads the run back with the keys (decrypting its transcript) and names the key without
them. A real embedded dev server in a home of the test's own, a real Postgres."""

from __future__ import annotations

import asyncio
import base64
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from agent_lattice import (
    ToolResult,
    create_bare_agent,
    create_jsonl_history_store,
    create_postgres_history_store,
    tool,
)
from agent_lattice.client import DevServer, Runtime
from agent_lattice.testing import FAST_SETTINGS, FakeAnthropicServer, Script, text, tool_use

from conftest import API_KEY, TRANSCRIPT_TABLES, Expr, table_text

KEYS = f"k1:{base64.b64encode(os.urandom(32)).decode()}"


def grep(home: Path, markers: list[str]) -> dict[str, dict[str, int]]:
    """Each marker's occurrences in the raw bytes of every file under ``home``, by file."""
    found: dict[str, dict[str, int]] = {}
    for path in sorted(home.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        for marker in markers:
            if count := data.count(marker.encode()):
                found.setdefault(marker, {})[str(path.relative_to(home))] = count
    return found


async def ask(runtime: Runtime, fake: FakeAnthropicServer, markers: dict[str, str], store) -> str:
    """One query whose every part carries a marker; its workflow id."""
    fake.set_handler(
        Script(
            tool_use("lookup", {"expr": f"small {markers['input']}"}),
            tool_use("lookup", {"expr": "large"}),
            text(f"The answer is {markers['answer']}."),
        )
    )

    def lookup(input: Expr) -> ToolResult:
        if input.expr == "large":  # past the inline limit, at its end: stored by reference only
            return ToolResult(content="filler " * 600 + markers["blob"])
        return ToolResult(content=f"found {markers['result']}")

    agent = create_bare_agent(
        api_key=API_KEY,
        base_url=fake.base_url,
        model="claude-test",
        name=f"grep-{uuid.uuid4().hex[:6]}",
        tools=[tool("lookup", "Look a thing up", Expr, lookup)],
        history_store=store,
    ).bind_runtime(runtime)
    result = await agent.prompt(f"Please look up {markers['prompt']}")
    assert result.subtype == "success" and markers["answer"] in (result.result or "")
    # read back whole, the large result from the store
    history = await agent.get_history()
    assert markers["blob"] in str(history[4].content)
    return result.workflow_id


def attach(workflow_id: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "agent_lattice.cli", "attach", workflow_id, "--no-stream"]
    return subprocess.run(
        [*command, "--json"], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("keyed", [True, False], ids=["keys", "no-keys"])
async def test_with_keys_no_file_or_table_holds_the_conversation_in_plain_text(
    keyed: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_anthropic: FakeAnthropicServer,
    task_queue_prefix: str,
    pg_schema: str,
) -> None:
    tag = uuid.uuid4().hex[:8]
    markers = {
        part: f"{part.upper()}-{tag}" for part in ("prompt", "input", "result", "blob", "answer")
    }
    home = tmp_path / "home"
    for name in (
        "LATTICE_TRANSCRIPT_DSN",
        "LATTICE_ENCRYPTION_KEYS",
        "LATTICE_ENCRYPTION_KEYS_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LATTICE_HOME", str(home))
    keys = KEYS if keyed else None
    history_keys = "runtime" if keyed else None
    server, _ = await asyncio.to_thread(DevServer.ensure, home, port=0, ui=False)
    try:
        # transcripts in SQLite under the home, a JSONL history store beside them
        runtime = await Runtime.connect(
            server.address, settings=FAST_SETTINGS, encryption_keys=keys
        )
        try:
            jsonl = create_jsonl_history_store(
                path=home / "history.jsonl", fail_on_error=True, encryption_keys=history_keys
            )
            workflow_id = await ask(runtime, fake_anthropic, markers, jsonl)
        finally:
            await runtime.close()
        # then in Postgres, with a Postgres history store
        monkeypatch.setenv("LATTICE_TRANSCRIPT_DSN", pg_schema)
        runtime = await Runtime.connect(
            server.address, settings=FAST_SETTINGS, encryption_keys=keys
        )
        try:
            postgres = create_postgres_history_store(
                dsn=pg_schema, conversation_id=tag, fail_on_error=True, encryption_keys=history_keys
            )
            await ask(runtime, fake_anthropic, markers, postgres)
        finally:
            await runtime.close()
        monkeypatch.delenv("LATTICE_TRANSCRIPT_DSN")

        # `lattice attach` reads the first run back, its large result from the transcripts
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("LATTICE_ENCRYPTION")},
            "TEMPORAL_ADDRESS": server.address,
        }
        shown = await asyncio.to_thread(
            attach, workflow_id, {**env, **({"LATTICE_ENCRYPTION_KEYS": KEYS} if keyed else {})}
        )
        assert shown.returncode == 0, shown.stderr
        assert markers["blob"] in shown.stdout and markers["answer"] in shown.stdout
        if keyed:
            refused = await asyncio.to_thread(attach, workflow_id, env)
            assert refused.returncode != 0
            assert "encrypted with key 'k1'" in refused.stderr, refused.stderr
            assert KEYS.partition(":")[2] not in refused.stderr
    finally:
        await asyncio.to_thread(server.stop)  # its WAL flushed, what it wrote is on disk

    in_files = grep(home, list(markers.values()))
    tables = await table_text(pg_schema, *TRANSCRIPT_TABLES, "lattice_history")
    in_postgres = {m: n for m in markers.values() if (n := tables.count(m))}
    names = {name for counts in in_files.values() for name in counts}
    print(
        f"\n{'with' if keyed else 'without'} keys: {sum(sum(c.values()) for c in in_files.values())}"
        f" hits in {len(names)} files under LATTICE_HOME ({', '.join(sorted(names)) or 'none'}),"
        f" {sum(in_postgres.values())} in the Postgres tables"
    )
    if keyed:
        assert in_files == {} and in_postgres == {}
        # there was something to grep: every store holds the conversation, under k1
        with sqlite3.connect(home / "transcripts.db") as db:
            for table in ("lattice_chunks", "lattice_blobs", "lattice_tool_calls"):
                rows = db.execute(f"SELECT count(*) FROM {table} WHERE key_id = 'k1'").fetchone()
                assert rows[0] > 0, table
        assert tables.count(",k1)") >= 6 + 1 + 2  # 6 messages, a blob, 2 calls
        assert len((home / "history.jsonl").read_text().splitlines()) == 6
        return
    # without keys every marker is there: in the transcript store, the history stores and
    # (all but the large result's end, stored by reference) in Temporal's database
    for marker in markers.values():
        files = in_files.get(marker, {})
        assert any(name.startswith("transcripts.db") for name in files), (marker, files)
        assert "history.jsonl" in files, (marker, files)
        assert marker in in_postgres, marker
        if marker != markers["blob"]:
            assert any(name.startswith("temporal.db") for name in files), (marker, files)
