"""Run histories out of the server and back through the workflows: ``lattice runs export``
writes them (decoded with the configured keys, or kept encrypted), ``lattice replay`` and
``assert_replays`` replay them against the installed agent-lattice and fail on the first
non-determinism, naming it; ``lattice runs`` lists runs as it did before it had a command."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_lattice import create_bare_agent
from agent_lattice.client import Runtime
from agent_lattice.testing import (
    FAST_SETTINGS,
    ReplayError,
    Script,
    assert_replays,
    text,
    tool_use,
)
from agent_lattice.worker._histories import encrypted_with, read_history

from conftest import API_KEY, make_calculator

ROOT = Path(__file__).resolve().parent.parent
KEY = base64.b64encode(os.urandom(32)).decode()
PROMPT = "What is 2+2? (PROMPT-5e1d)"


def lattice(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The ``lattice`` CLI in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "agent_lattice.cli", *argv],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def cli(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(lattice, *argv, env=env)


@pytest.fixture
def env(lattice_server: str, task_queue_prefix: str) -> dict[str, str]:
    """The CLI's environment: the session's server, no encryption keys."""
    plain = {k: v for k, v in os.environ.items() if not k.startswith("LATTICE_ENCRYPTION_")}
    return {**plain, "TEMPORAL_ADDRESS": lattice_server}


async def a_run(fake_anthropic, runtime: Runtime, name: str = "exported") -> str:
    """A query with a tool call, finished; its workflow id."""
    fake_anthropic.set_handler(Script(tool_use("calculator", {"expr": "2+2"}), text("4")))
    agent = create_bare_agent(
        name=name,
        api_key=API_KEY,
        base_url=fake_anthropic.base_url,
        model="claude-test",
        tools=[make_calculator()],
    )
    result = await agent.prompt(PROMPT, runtime=runtime)
    assert result.subtype == "success" and result.result == "4"
    assert result.workflow_id is not None
    return result.workflow_id


def renamed_activity(source: Path, target: Path) -> str:
    """``source`` with its first scheduled activity's type renamed (what a version that
    changed that step's activity would make differently), written to ``target``."""
    history = json.loads(source.read_text())
    for event in history["events"]:
        scheduled = event.get("activityTaskScheduledEventAttributes")
        if scheduled:
            scheduled["activityType"]["name"] += "_v2"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(history))
            return scheduled["activityType"]["name"]
    raise AssertionError(f"{source} schedules no activity")


async def test_an_exported_history_replays_and_one_made_nondeterministic_fails_naming_it(
    fake_anthropic, lattice_runtime, env, tmp_path
):
    workflow_id = await a_run(fake_anthropic, lattice_runtime)
    exported = tmp_path / "exported"

    done = await cli("runs", "export", workflow_id, "--to", str(exported), env=env)
    assert done.returncode == 0, done.stderr
    (path,) = exported.glob("*.json")
    assert path.name == f"{workflow_id}.json"
    assert f"{workflow_id} → {path}" in done.stdout and "events, plain" in done.stdout
    history = read_history(path)
    assert history.workflow_id == workflow_id  # from the file itself, not its name
    fetched = await lattice_runtime.client.get_workflow_handle(workflow_id).fetch_history()
    assert history.events == fetched.events  # the run's history, whole

    replayed = await cli("replay", str(exported), env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert f"ok {path}  {workflow_id}, {len(history.events)} events" in replayed.stdout
    assert "1 history replayed, none non-deterministic" in replayed.stdout
    assert await assert_replays(exported) == 1

    broken = tmp_path / "broken" / "edited.json"
    activity = renamed_activity(path, broken)
    with pytest.raises(ReplayError) as raised:
        await assert_replays(broken.parent)
    error = raised.value
    assert isinstance(error, AssertionError)  # a failed check in a test
    assert error.path == str(broken) and error.workflow_id == workflow_id
    message = str(error)
    assert message.startswith(f"{broken} (workflow {workflow_id}) does not replay on this ")
    assert "Nondeterminism error" in message and f"'{activity}'" in message
    failed = await cli("replay", str(broken.parent), env=env)
    assert failed.returncode == 1
    assert failed.stderr.startswith(f"error: {broken} (workflow {workflow_id}) does not replay")
    assert activity in failed.stderr and "Traceback" not in failed.stderr


async def test_an_encrypted_run_exports_decoded_or_kept_encrypted(
    fake_anthropic, lattice_server, task_queue_prefix, env, tmp_path
):
    runtime = await Runtime.connect(
        lattice_server, settings=FAST_SETTINGS, encryption_keys=f"a:{KEY}"
    )
    try:
        workflow_id = await a_run(fake_anthropic, runtime, name="sealed")
    finally:
        await runtime.close()
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"a:{KEY}\n")
    keyed = {**env, "LATTICE_ENCRYPTION_KEYS_FILE": str(keys_file)}

    # without the keys it cannot be decoded: said, naming the key and the way out
    refused = await cli("runs", "export", workflow_id, "--to", str(tmp_path / "x"), env=env)
    assert refused.returncode == 1
    assert f"error: {workflow_id}: a payload is encrypted with key 'a'" in refused.stderr
    assert "--encrypted" in refused.stderr

    decoded = tmp_path / "decoded"
    done = await cli("runs", "export", workflow_id, "--to", str(decoded), env=keyed)
    assert done.returncode == 0, done.stderr
    assert "events, decoded" in done.stdout
    history = read_history(decoded / f"{workflow_id}.json")
    assert encrypted_with(history) == set()
    started = history.events[0].workflow_execution_started_event_attributes
    assert b"PROMPT-5e1d" in started.input.payloads[0].data  # readable without the key
    replayed = await cli("replay", str(decoded), env=env)  # and replayed without it
    assert replayed.returncode == 0, replayed.stderr

    sealed = tmp_path / "sealed"
    done = await cli("runs", "export", workflow_id, "--to", str(sealed), "--encrypted", env=env)
    assert done.returncode == 0, done.stderr
    assert "events, encrypted" in done.stdout
    path = sealed / f"{workflow_id}.json"
    assert encrypted_with(read_history(path)) == {"a"}
    assert b"PROMPT-5e1d" not in base64.b64decode(
        json.loads(path.read_text())["events"][0]["workflowExecutionStartedEventAttributes"][
            "input"
        ]["payloads"][0]["data"]
    )
    failed = await cli("replay", str(sealed), env=env)
    assert failed.returncode == 1
    assert failed.stderr.startswith(f"error: {path} (workflow {workflow_id}) holds payloads ")
    assert "encrypted with key 'a', which this process was not given" in failed.stderr
    with pytest.raises(ReplayError, match="encrypted with key 'a'"):
        await assert_replays(sealed)
    replayed = await cli("replay", str(sealed), "--encryption-keys-file", str(keys_file), env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert await assert_replays(sealed, encryption_keys=f"a:{KEY}") == 1


async def test_lattice_runs_lists_as_before_now_that_it_has_a_command(
    fake_anthropic, lattice_runtime, env, tmp_path
):
    workflow_id = await a_run(fake_anthropic, lattice_runtime, name="listed")

    shown = await cli("runs", "--agent", "listed", "--json", "--limit", "5", env=env)
    assert shown.returncode == 0, shown.stderr
    (row,) = [json.loads(line) for line in shown.stdout.splitlines()]
    assert row["workflow_id"] == workflow_id and row["outcome"] == "success"
    table = await cli("runs", "--agent", "listed", "--since", "1h", env=env)
    assert table.returncode == 0, table.stderr
    assert workflow_id in table.stdout and "success" in table.stdout
    bad = await cli("runs", "--since", "bogus", env=env)
    assert bad.returncode == 2 and "--since takes a duration" in bad.stderr
    helped = await cli("runs", "-h", env=env)
    assert helped.returncode == 0
    assert "--limit" in helped.stdout and "export" in helped.stdout

    unknown = await cli("runs", "export", "no-such-run", "--to", str(tmp_path), env=env)
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("error: no run 'no-such-run' on ")
    missing = await cli("replay", str(tmp_path / "nothing-here"), env=env)
    assert missing.returncode == 2 and "no such file or directory" in missing.stderr
    empty = await cli("replay", str(tmp_path), env=env)
    assert empty.returncode == 1 and "no run histories (*.json) to replay" in empty.stderr
