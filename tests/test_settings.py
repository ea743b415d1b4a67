"""The LATTICE_* settings: read in agent_lattice/_settings.py only, when they are used."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import agent_lattice
from agent_lattice import ConfigurationError
from agent_lattice._messages import ToolResultBlock
from agent_lattice.history._transcripts import SqliteTranscriptStore, open_transcript_store
from agent_lattice.workspace._tools import default_workspace

PACKAGE = Path(agent_lattice.__file__).parent
# an environment read naming a LATTICE_ variable, in any spelling the package could use
ENV_READ = re.compile(r"(environ|getenv)\W*(get\()?\W*[\"']LATTICE_")


def test_settings_are_read_in_one_module():
    readers = [
        f"{path.relative_to(PACKAGE)}:{n}"
        for path in PACKAGE.rglob("*.py")
        if path.name != "_settings.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if ENV_READ.search(line)
    ]
    assert readers == []


async def test_inline_limit_set_after_import_is_honoured(tmp_path, monkeypatch):
    store = SqliteTranscriptStore(tmp_path / "t.db")
    block = ToolResultBlock(tool_use_id="t1", content="x" * 100)
    assert (await store.externalize(block)).content_ref is None  # default 2048
    monkeypatch.setenv("LATTICE_INLINE_LIMIT", "10")
    assert (await store.externalize(block)).content_ref is not None
    monkeypatch.setenv("LATTICE_INLINE_LIMIT", "ten")
    with pytest.raises(ConfigurationError, match="LATTICE_INLINE_LIMIT='ten'"):
        await store.externalize(block)


def test_home_set_per_test_places_transcripts_and_workspaces(tmp_path, monkeypatch):
    monkeypatch.delenv("LATTICE_TRANSCRIPT_DSN", raising=False)
    monkeypatch.setenv("LATTICE_HOME", str(tmp_path))
    assert default_workspace(None, "s1") == tmp_path / "workspaces" / "agent-s1"
    store = open_transcript_store()
    assert isinstance(store, SqliteTranscriptStore)
    assert store.path == tmp_path / "transcripts.db"


@pytest.mark.parametrize("name", ["LATTICE_TRANSCRIPT_DSN", "ANTHROPIC_API_KEY"])
def test_a_secret_comes_from_its_file_form_too(name, tmp_path, monkeypatch):
    """A mounted secret (``<NAME>_FILE``) instead of a variable: the deploy kit gives the
    transcript DSN and the model's key as files, never in the environment."""
    read = {
        "LATTICE_TRANSCRIPT_DSN": agent_lattice._settings.transcript_dsn,
        "ANTHROPIC_API_KEY": agent_lattice._settings.model_api_key,
    }[name]
    monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv(f"{name}_FILE", raising=False)
    assert read() is None
    path = tmp_path / "secret"
    path.write_text("the-value\n")
    monkeypatch.setenv(f"{name}_FILE", str(path))
    assert read() == "the-value"  # the trailing newline of `echo ... > file` is no part of it
    monkeypatch.setenv(name, "also-given")
    with pytest.raises(ConfigurationError, match=f"set {name} or {name}_FILE, not both"):
        read()
    monkeypatch.delenv(name)
    path.write_text("\n")
    with pytest.raises(ConfigurationError, match=f"{name}_FILE={path}: the file is empty"):
        read()
    monkeypatch.setenv(f"{name}_FILE", str(tmp_path / "missing"))
    with pytest.raises(ConfigurationError, match="cannot read it"):
        read()


async def test_the_model_key_file_is_what_the_provider_sends(
    lattice_runtime, tmp_path, monkeypatch
):
    from agent_lattice import create_agent
    from agent_lattice.testing import FakeAnthropicServer, text

    key = tmp_path / "anthropic-api-key"
    key.write_text("sk-ant-from-a-file\n")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY_FILE", str(key))
    with FakeAnthropicServer(lambda _request: text("ok")) as server:
        agent = create_agent(base_url=server.base_url, model="claude-test", workspace=False)
        result = await agent.prompt("hi", runtime=lattice_runtime)
        assert result.result == "ok", result
        sent = server.requests[0].headers
        given = f"{sent.get('x-api-key')} {sent.get('authorization')}"  # (the SDK's choice)
        assert "sk-ant-from-a-file" in given.split(), sent
