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
