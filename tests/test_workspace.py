"""Built-in workspace tools: behaviour, and the write boundary with its escapes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from agent_lattice import (
    OptionError,
    ToolContext,
    agent_tool,
    create_agent,
    create_bare_agent,
    define_agent,
)
from agent_lattice.testing import RecordedRequest, Reply, Script, text, tool_use
from agent_lattice.workspace._tools import (
    bash_write_targets,
    create_agent_workspace_tools,
    create_builtin_tools,
)

from conftest import API_KEY


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    tools = {t.name: t for t in create_agent_workspace_tools(root)}
    return root, outside, tools


def ctx(*grants: Path) -> ToolContext:
    return ToolContext(
        session_id="s", tool_use_id="t", tool_name="x", workspace_grants=tuple(map(str, grants))
    )


async def call(tools, name, *grants, **input):
    return await tools[name].invoke(input, ctx(*grants))


def denial(result) -> dict:
    assert result.is_error, result
    payload = json.loads(result.content)
    assert payload["error"] == "permission_denied"
    return payload


async def test_read_numbers_lines_pages_and_refuses_binaries(ws):
    root, _, tools = ws
    (root / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 3001)))
    (root / "long.txt").write_text("x" * 5000 + "\n")
    (root / "bin.dat").write_bytes(b"\x00\x01\x02" * 100)

    first = await call(tools, "Read", file_path="a.txt")
    assert first.content.startswith("     1\tline 1\n     2\tline 2")
    assert "of 3000; use offset/limit" in first.content  # paged by lines and by size
    assert len(first.content) < 31_000
    page = await call(tools, "Read", file_path=str(root / "a.txt"), offset=2999, limit=5)
    assert page.content.splitlines()[:2] == ["  2999\tline 2999", "  3000\tline 3000"]
    assert "line truncated" in (await call(tools, "Read", file_path="long.txt")).content
    assert "binary file (300 bytes)" in (await call(tools, "Read", file_path="bin.dat")).content
    missing = await call(tools, "Read", file_path="nope.txt")
    assert missing.is_error and "File not found" in missing.content


async def test_write_and_edit_inside_the_workspace(ws):
    root, _, tools = ws
    wrote = await call(tools, "Write", file_path="deep/er/notes.md", content="alpha beta alpha")
    assert not wrote.is_error and (root / "deep/er/notes.md").read_text() == "alpha beta alpha"

    twice = await call(
        tools, "Edit", file_path="deep/er/notes.md", old_string="alpha", new_string="A"
    )
    assert twice.is_error and "matches 2 times" in twice.content
    once = await call(
        tools, "Edit", file_path="deep/er/notes.md", old_string="beta", new_string="B"
    )
    assert not once.is_error
    every = await call(
        tools,
        "Edit",
        file_path="deep/er/notes.md",
        old_string="alpha",
        new_string="A",
        replace_all=True,
    )
    assert "Replaced 2" in every.content and (root / "deep/er/notes.md").read_text() == "A B A"
    absent = await call(
        tools, "Edit", file_path="deep/er/notes.md", old_string="zzz", new_string="y"
    )
    assert absent.is_error and "not found" in absent.content


async def test_writes_cannot_escape(ws):
    root, outside, tools = ws
    (root / "link").symlink_to(outside)
    for path in [
        str(outside / "x.txt"),  # absolute
        "../outside/x.txt",  # traversal
        "sub/../../outside/x.txt",
        "link/x.txt",  # symlink out of the root
        "~/x.txt",
    ]:
        payload = denial(await call(tools, "Write", file_path=path, content="no"))
        assert payload["allowed_roots"] == [str(root.resolve())]
        assert payload["tool"] == "Write"
        assert "workspace grant" in payload["suggested_next_step"]
    assert not (outside / "x.txt").exists()
    assert denial(await call(tools, "Edit", file_path="link/y", old_string="a", new_string="b"))
    # a grant widens the boundary
    granted = await call(tools, "Write", outside, file_path=str(outside / "ok.txt"), content="yes")
    assert not granted.is_error and (outside / "ok.txt").read_text() == "yes"


@pytest.mark.parametrize(
    "command",
    [
        "echo hi > {out}/a",
        "echo hi >> {out}/a",
        "echo hi | tee {out}/a",
        "ls 2>&1 | tee -a {out}/a",
        "cp /etc/hostname {out}/a",
        "mv x.txt {out}/a",
        "rm -rf {out}",
        "mkdir -p {out}/d",
        "touch {out}/a",
        "sed -i s/a/b/ {out}/a",
        "sed -i.bak -e s/a/b/ {out}/a",
        "cat <<EOF > {out}/a\nhello > there\nEOF",
        "dd if=/dev/zero of={out}/a count=1",
        "true && echo hi >{out}/a",
        "FOO=1 install -m 644 x.txt {out}/a",
    ],
)
async def test_bash_write_forms_outside_are_denied(ws, command):
    root, outside, tools = ws
    (root / "x.txt").write_text("x")
    result = await call(tools, "Bash", command=command.format(out=outside))
    payload = denial(result)
    assert payload["tool"] == "Bash" and payload["requested_path"].startswith(str(outside))
    assert list(outside.iterdir()) == []  # nothing ran


async def test_bash_runs_in_the_workspace(ws):
    root, _, tools = ws
    ok = await call(
        tools, "Bash", command="echo made > made.txt && cat made.txt && pwd 2>/dev/null"
    )
    assert not ok.is_error and "made" in ok.content and str(root.resolve()) in ok.content
    assert "[exit code 0]" in ok.content and (root / "made.txt").exists()
    failed = await call(tools, "Bash", command="echo oops >&2; exit 3")
    assert failed.is_error and "oops" in failed.content and "[exit code 3]" in failed.content
    started = time.monotonic()
    slow = await call(tools, "Bash", command="sleep 30", timeout=0.5)
    assert slow.is_error and "timed out after 0.5 s" in slow.content
    assert time.monotonic() - started < 10
    big = await call(tools, "Bash", command="head -c 100000 /dev/zero | tr '\\0' y")
    assert "output truncated" in big.content and len(big.content) < 31_000
    # reads anywhere are not gated (but in the OS sandbox /tmp is private, and outside is in it)
    assert not (await call(tools, "Bash", command="ls /usr/bin > /dev/null")).is_error


async def test_ls_glob_and_grep(ws):
    root, _, tools = ws
    (root / "pkg").mkdir()
    (root / "pkg" / "old.py").write_text("def Handler():\n    pass\n")
    os.utime(root / "pkg" / "old.py", (1, 1))
    (root / "pkg" / "new.py").write_text("handler = 1\nhandler()\n")
    (root / "notes.md").write_text("nothing here\n")

    listing = (await call(tools, "LS", path=".")).content
    assert "  notes.md" in listing and "  pkg/" in listing
    globbed = (await call(tools, "Glob", pattern="**/*.py")).content.splitlines()
    assert [Path(p).name for p in globbed] == ["new.py", "old.py"]  # newest first

    files = (await call(tools, "Grep", pattern="handler", case_insensitive=True)).content
    assert sorted(Path(p).name for p in files.splitlines()) == ["new.py", "old.py"]
    counts = (await call(tools, "Grep", pattern="handler", output_mode="count")).content
    assert counts.strip().endswith("new.py:2")
    content = (
        await call(tools, "Grep", pattern="^handler", output_mode="content", type="py")
    ).content
    assert content.splitlines()[0].endswith("new.py:1:handler = 1")
    limited = await call(tools, "Grep", pattern="h", output_mode="content", head_limit=1)
    assert len(limited.content.splitlines()) == 1
    assert "No matches" in (await call(tools, "Grep", pattern="zzz", glob="*.md")).content
    assert (await call(tools, "Grep", pattern="(")).is_error


def test_bash_write_detection_is_best_effort_but_covers_the_obvious():
    assert bash_write_targets("echo 'a > b' && cat x | grep y") == []
    assert bash_write_targets("cmd 2>&1 >/dev/null") == ["/dev/null"]
    assert bash_write_targets("cp -t dest a b") == ["dest"]
    assert bash_write_targets("chmod 644 f1 f2") == ["f1", "f2"]


def test_concurrency_flags_and_assembly(tmp_path, monkeypatch):
    monkeypatch.setenv("LATTICE_HOME", str(tmp_path))
    tools = {t.name: t for t in create_builtin_tools(cwd=tmp_path, allowed_directories=[tmp_path])}
    assert {n for n, t in tools.items() if t.is_concurrency_safe is not None} == {
        "Read", "LS", "Glob", "Grep"
    }  # fmt: skip
    named = create_agent(model="m", name="researcher")
    assert named.workspace == tmp_path / "workspaces" / "researcher"
    assert [t.name for t in named.tools] == ["Read", "Write", "Edit", "LS", "Glob", "Grep", "Bash"]
    nameless = create_agent(model="m")
    assert nameless.workspace == tmp_path / "workspaces" / f"agent-{nameless.session_id}"
    chosen = create_agent(model="m", workspace=str(tmp_path / "mine"))
    assert chosen.workspace == (tmp_path / "mine").resolve()
    assert (
        create_bare_agent(model="m").tools == () and create_bare_agent(model="m").workspace is None
    )
    assert create_agent(model="m", workspace=False).tools == ()
    assert define_agent(model="m", workspace=False).spawn().tools == ()
    with pytest.raises(OptionError, match="each workspace grant is"):
        named.query("x", permissions={"workspace_grants": ["/tmp"]})
    with pytest.raises(OptionError, match='QueryPermissions: unknown option "grants"'):
        named.query("x", permissions={"grants": []})


async def test_agent_writes_its_workspace_through_activities(
    fake_anthropic, lattice_runtime, tmp_path, monkeypatch
):
    monkeypatch.setenv("LATTICE_HOME", str(tmp_path))
    fake_anthropic.set_handler(
        Script(
            tool_use("Write", {"file_path": "report.md", "content": "# Findings"}),
            tool_use("Write", {"file_path": "/etc/lattice-test", "content": "no"}),
            text("Wrote report.md."),
        )
    )
    agent = create_agent(
        api_key=API_KEY, base_url=fake_anthropic.base_url, model="claude-test", name="scribe"
    )
    result = await agent.prompt("Write a report.")
    assert result.result == "Wrote report.md."
    assert (tmp_path / "workspaces" / "scribe" / "report.md").read_text() == "# Findings"
    refused = json.loads(fake_anthropic.requests[2].tool_results[0]["content"])
    assert (
        refused["error"] == "permission_denied" and refused["requested_path"] == "/etc/lattice-test"
    )
    system = fake_anthropic.requests[0].system
    assert f"Workspace: your private workspace is {tmp_path / 'workspaces' / 'scribe'}" in system
    history = await lattice_runtime.client.get_workflow_handle(result.workflow_id).fetch_history()
    kinds = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert kinds.count("lattice.tool_call") == 2


async def test_delegated_grants_only_within_the_callers_permissions(
    fake_anthropic, lattice_runtime, tmp_path, monkeypatch
):
    monkeypatch.setenv("LATTICE_HOME", str(tmp_path))
    shared = tmp_path / "shared"
    shared.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def handle(request: RecordedRequest) -> Reply:
        if "You are writer." in (request.system or ""):
            if not request.tool_results:
                return tool_use("Write", {"file_path": str(shared / "api.md"), "content": "API"})
            if len(request.messages) == 3:
                return tool_use("Write", {"file_path": str(elsewhere / "x.md"), "content": "no"})
            return text("done writing")
        if not request.tool_results:
            return tool_use(
                "write_docs",
                {
                    "task": "Write the API doc.",
                    "workspace_grants": [
                        {"root": str(shared), "access": ["write"], "reason": "project docs"},
                        {"root": str(elsewhere), "access": ["write"]},
                    ],
                },
            )
        return text("delegated")

    fake_anthropic.set_handler(handle)
    writer = define_agent(
        api_key=API_KEY,
        base_url=fake_anthropic.base_url,
        model="claude-test",
        name="writer",
        system_prompt="You are writer.",
    )
    lead = create_agent(
        api_key=API_KEY,
        base_url=fake_anthropic.base_url,
        model="claude-test",
        name="lead",
        tools=[agent_tool("write_docs", writer)],
    )
    result = await lead.prompt(
        "Document the API.",
        permissions={"workspace_grants": [{"root": str(shared), "access": ["write"]}]},
    )
    assert result.result == "delegated"
    assert (shared / "api.md").read_text() == "API"  # covered by the lead's grant: accepted
    assert list(elsewhere.iterdir()) == []  # not covered: refused and enforced
    child = [r for r in fake_anthropic.requests if "You are writer." in (r.system or "")]
    prompt = child[0].messages[0]["content"]
    assert f"- {shared} (write): project docs" in prompt
    assert "Refused workspace grants" in prompt and str(elsewhere) in prompt
    assert json.loads(child[2].tool_results[0]["content"])["error"] == "permission_denied"
