"""A script killed mid-query (SIGKILL) leaves its run RUNNING on its private task queue with no
one to serve it. A later process with the same agent and session adopts it, so does a
`lattice worker` for the app; `lattice attach` says at once that it is orphaned; `lattice
interrupt` says nothing would happen, and `--force` ends it keeping its completed turns."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import pytest_asyncio
from orphan_app import build_agent, build_boss

from agent_lattice import ConcurrentQueryError, create_agent
from agent_lattice.testing import (
    Handler,
    RecordedRequest,
    Reply,
    assert_eventually,
    hang,
    text,
    tool_use,
)
from agent_lattice.worker import create_worker

from conftest import child_ids
from test_cli import Cli

pytestmark = pytest.mark.slow  # real processes killed, servers restarted

HERE = Path(__file__).parent
ROOT = HERE.parent
PROMPT = "Record A, then answer."


@pytest.fixture
def effects(tmp_path, monkeypatch) -> Path:
    """Side effects of the tools, and a LATTICE_HOME (transcripts) every process shares."""
    path = tmp_path / "effects.log"
    path.touch()
    monkeypatch.setenv("LATTICE_TEST_EFFECTS", str(path))
    monkeypatch.setenv("LATTICE_HOME", str(tmp_path / "home"))
    return path


def model(request: RecordedRequest) -> Reply:
    """Record A; the answer after it hangs the first time (its process is killed meanwhile)."""
    if request.last_user_text == "next":
        return text("hello again")
    if not request.tool_results:
        return tool_use("record", {"text": "A"})
    return hang(60) if request.index == 1 else text("done")


@pytest.fixture
def start_script(lattice_server, fake_anthropic, effects):
    """Start a query of orphan_app's agent (``boss``: its delegating agent) in a script;
    returns (the script's process, workflow id, session id)."""

    async def start(
        handler: Handler, kind: str = "agent"
    ) -> tuple[asyncio.subprocess.Process, str, str]:
        fake_anthropic.set_handler(handler)
        session = uuid.uuid4().hex[:12]
        script = await asyncio.create_subprocess_exec(
            *[sys.executable, str(HERE / "orphan_app.py"), lattice_server],
            *[fake_anthropic.base_url, session, PROMPT, kind],
            env={**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{ROOT}"},
            stdout=asyncio.subprocess.DEVNULL,
        )
        return script, f"{'orphanboss' if kind == 'boss' else 'orphan'}-{session}-1", session

    return start


@pytest.fixture
def make_orphan(start_script, lattice_runtime):
    """Run a query in a script (see ``start_script``) and SIGKILL the script once
    ``ready()``; returns (workflow id, session id)."""

    async def orphan(
        handler: Handler, ready: Callable[[], bool], kind: str = "agent"
    ) -> tuple[str, str]:
        script, workflow_id, session = await start_script(handler, kind)
        try:
            await assert_eventually(ready, within=30)
        finally:
            script.send_signal(signal.SIGKILL)
            await script.wait()
        return workflow_id, session

    return orphan


@pytest_asyncio.fixture
async def orphaned(make_orphan, fake_anthropic, effects):
    """An orphaned run: its script ran the tool, then was killed while the model answered."""
    orphan = await make_orphan(model, lambda: len(fake_anthropic.requests) == 2)
    assert effects.read_text().splitlines() == ["record:A"]
    return orphan


def cli_env(lattice_server: str, fake_anthropic, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": lattice_server,
        "ANTHROPIC_BASE_URL": fake_anthropic.base_url,
        "LATTICE_TEST_OUTPUT": str(tmp_path),
        "COLUMNS": "200",
    }


async def wait_stderr(cli: Cli, needle: str, within: float) -> None:
    await assert_eventually(lambda: needle in cli.err, within=within)


async def test_attach_to_an_unknown_id_answers_at_once(lattice_server, fake_anthropic, tmp_path):
    env = cli_env(lattice_server, fake_anthropic, tmp_path)
    await asyncio.to_thread(Cli.run("--help", env=env).finish)  # the fork server is warm
    started = time.monotonic()
    unknown = Cli.run("attach", "nosuchid", env=env)
    assert await asyncio.to_thread(unknown.finish, 30) == 1, unknown
    assert time.monotonic() - started < 10  # was 60 s of silence
    assert "no run with id 'nosuchid'" in unknown.err


async def test_same_agent_and_session_in_a_new_process_adopts_the_orphaned_run(
    orphaned, fake_anthropic, effects, lattice_runtime
):
    workflow_id, session = orphaned
    started = time.monotonic()
    agent = build_agent(fake_anthropic.base_url, session)
    result = await asyncio.wait_for(agent.prompt("next"), 60)
    took = time.monotonic() - started

    assert result.subtype == "success" and result.result == "hello again", result
    assert result.workflow_id == f"orphan-{session}-2"
    old = await lattice_runtime.outcome(workflow_id)
    assert old.subtype == "success" and old.result == "done"
    assert effects.read_text().splitlines() == ["record:A"]  # the completed tool never re-ran
    history = await agent.get_history()
    assert [m.role for m in history] == ["user", "assistant"] * 3
    assert history[2].content[0].content == "recorded A"
    assert [history[3].text, history[4].text, history[5].text] == ["done", "next", "hello again"]
    assert took < 30, took
    print(f"adopted and answered in {took:.1f} s")


async def test_adopting_a_run_serves_its_delegated_child_too(
    make_orphan, fake_anthropic, effects, lattice_runtime
):
    def model(request: RecordedRequest) -> Reply:
        done = [r["content"] for r in request.tool_results]
        if "You are orphanboss." in (request.system or ""):
            if request.last_user_text == "next":
                return text("hello again")
            return tool_use("delegate", {"task": "record A then B"}) if not done else text("ok")
        if not done:
            return tool_use("record", {"text": "A"})
        return tool_use("block", {"text": "B"}) if done == ["recorded A"] else text("A and B")

    def child_tool_runs() -> bool:  # the script is killed while the child's 2nd tool runs
        return "block-start:B" in effects.read_text()

    workflow_id, session = await make_orphan(model, child_tool_runs, kind="boss")
    boss = build_boss(fake_anthropic.base_url, session)
    result = await asyncio.wait_for(boss.prompt("next"), 60)

    assert result.result == "hello again", result
    old = await lattice_runtime.outcome(workflow_id)
    assert old.subtype == "success" and old.result == "ok", old
    child = [m for m in await boss.get_history() if m.role == "user"][1].content[0]
    assert "A and B" in json.dumps(child.content)  # the child's answer reached its parent
    # the child's completed tool ran once; the call the kill cut (not idempotent) never
    # again: the child's model heard it did not finish
    assert effects.read_text().splitlines() == ["record:A", "block-start:B"]
    answers = [str(a["content"]) for r in fake_anthropic.requests for a in r.tool_results]
    assert any(a.startswith("Tool 'block' did not finish") for a in answers), answers


async def test_ending_an_orphan_ends_its_delegated_child_too(
    make_orphan, fake_anthropic, effects, lattice_runtime
):
    def model(request: RecordedRequest) -> Reply:
        if "You are orphanboss." in (request.system or ""):
            return tool_use("delegate", {"task": "record A then B"})
        done = [r["content"] for r in request.tool_results]
        if not done:
            return tool_use("record", {"text": "A"})
        return tool_use("block", {"text": "B"}) if done == ["recorded A"] else text("A and B")

    def child_tool_runs() -> bool:
        return "block-start:B" in effects.read_text()

    workflow_id, _ = await make_orphan(model, child_tool_runs, kind="boss")
    (child_id,) = await child_ids(lattice_runtime.client, workflow_id)
    result = await asyncio.wait_for(lattice_runtime.end_orphan(workflow_id), 60)

    assert result is not None and result.subtype == "interrupted", result
    child = await lattice_runtime.outcome(child_id)
    assert child.subtype == "interrupted", child  # not left running, nor terminated
    assert effects.read_text().splitlines() == ["record:A", "block-start:B"]


async def test_another_definition_of_the_agent_does_not_adopt_it(orphaned, fake_anthropic):
    workflow_id, session = orphaned
    changed = create_agent(
        name="orphan",
        session_id=session,
        base_url=fake_anthropic.base_url,
        api_key="test",
        model="claude-test",
        system_prompt="A different prompt.",
    )
    with pytest.raises(ConcurrentQueryError, match=f"interrupt --force {workflow_id}"):
        await changed.prompt("next")


async def test_lattice_worker_for_the_app_adopts_the_orphaned_run(
    orphaned, fake_anthropic, effects, lattice_runtime, lattice_server, tmp_path
):
    workflow_id, _ = orphaned
    env = cli_env(lattice_server, fake_anthropic, tmp_path)
    worker = Cli.run("worker", str(HERE / "orphan_app.py"), env=env)
    try:
        result = await asyncio.wait_for(lattice_runtime.outcome(workflow_id), 60)
        assert result.subtype == "success" and result.result == "done", result
        assert effects.read_text().splitlines() == ["record:A"]
        await wait_stderr(worker, f"adopting orphaned run {workflow_id}", 5)
        await wait_stderr(worker, f"adopted run {workflow_id} closed", 10)
    finally:
        worker.signal(signal.SIGTERM)
        await asyncio.to_thread(worker.finish)


async def test_attach_says_orphaned_and_interrupt_force_ends_it_keeping_its_turns(
    orphaned, fake_anthropic, effects, lattice_runtime, lattice_server, tmp_path
):
    workflow_id, session = orphaned
    env = cli_env(lattice_server, fake_anthropic, tmp_path)
    await asyncio.to_thread(Cli.run("--help", env=env).finish)  # the fork server is warm
    started = time.monotonic()
    attach = Cli.run("attach", workflow_id, env=env)
    await wait_stderr(attach, f"{workflow_id} is orphaned", 5)
    assert time.monotonic() - started < 5
    assert f"lattice interrupt --force {workflow_id}" in attach.err
    assert f"session id {session!r}" in attach.err
    runs = Cli.run("runs", env=env)
    assert await asyncio.to_thread(runs.finish) == 0, runs
    assert "orphaned" in next(line for line in runs.stdout if workflow_id in line)

    plain = Cli.run("interrupt", workflow_id, env=env)
    assert await asyncio.to_thread(plain.finish) == 1, plain
    assert "nothing happens to it until it is adopted" in plain.err

    forced = Cli.run("interrupt", "--force", workflow_id, env=env)
    assert await asyncio.to_thread(forced.finish) == 0, forced
    assert forced.out == f"{workflow_id} ended: interrupted (completed turns kept)"
    # it followed the run to its end (and did not wait ~30 s on the CLI that ended it)
    assert await asyncio.to_thread(attach.finish, 5) == 0, attach
    assert attach.stdout[-1].startswith("■ interrupted"), attach

    agent = build_agent(fake_anthropic.base_url, session)
    result = await asyncio.wait_for(agent.prompt("next"), 30)
    assert result.result == "hello again"
    history = await agent.get_history()
    assert history[2].content[0].content == "recorded A"  # the completed turn is kept
    assert history[-1].text == "hello again"
    assert effects.read_text().splitlines() == ["record:A"]


async def test_a_live_script_s_run_is_never_taken_for_an_orphan(
    start_script, fake_anthropic, lattice_runtime, lattice_server, tmp_path
):
    """While the script that runs a query lives (here: its model request hangs), another
    process over the same session waits its turn, `lattice runs` shows it running and
    `lattice interrupt --force` only interrupts it: the script ends its own query."""
    script, workflow_id, session = await start_script(model)
    try:
        await assert_eventually(lambda: len(fake_anthropic.requests) == 2, within=30)
        agent = build_agent(fake_anthropic.base_url, session)
        with pytest.raises(ConcurrentQueryError, match="served by a live worker"):
            await agent.prompt("next")

        env = cli_env(lattice_server, fake_anthropic, tmp_path)
        runs = Cli.run("runs", env=env)
        assert await asyncio.to_thread(runs.finish) == 0, runs
        line = next(line for line in runs.stdout if workflow_id in line)
        assert "running" in line and "orphaned" not in line, line

        forced = Cli.run("interrupt", "--force", workflow_id, env=env)
        assert await asyncio.to_thread(forced.finish) == 0, forced
        assert forced.out == f"interrupt sent to {workflow_id} (it was running)"
        assert await asyncio.wait_for(script.wait(), 30) == 0  # its prompt() returned
        result = await lattice_runtime.outcome(workflow_id)
        assert result.subtype == "interrupted", result
    finally:
        if script.returncode is None:
            script.send_signal(signal.SIGKILL)
            await script.wait()


async def test_a_run_waiting_for_its_worker_is_not_called_orphaned(
    remote_runtime, fake_anthropic, lattice_server, tmp_path
):
    """A run on a shared queue (``lattice worker``'s) while no worker runs, e.g. during a
    deploy, has lost no process: `lattice runs` says it waits for a worker, not orphaned."""
    fake_anthropic.set_handler(lambda _request: text("never asked"))
    agent = create_agent(
        name=f"waits{uuid.uuid4().hex[:8]}",
        base_url=fake_anthropic.base_url,
        api_key="test",
        model="claude-test",
    )
    query = asyncio.ensure_future(agent.prompt("hi", runtime=remote_runtime))
    workflow_id = f"{agent.name}-{agent.session_id}-1"
    handle = remote_runtime.client.get_workflow_handle(workflow_id)

    async def started() -> bool:
        try:
            await handle.describe()
        except Exception:
            return False
        return True

    try:
        await assert_eventually(started, within=10)
        runs = Cli.run("runs", env=cli_env(lattice_server, fake_anthropic, tmp_path))
        assert await asyncio.to_thread(runs.finish) == 0, runs
        line = next(line for line in runs.stdout if workflow_id in line)
        assert "no worker" in line and "orphaned" not in line, line
    finally:
        await handle.terminate(reason="test over")
        await asyncio.wait_for(query, 10)


async def test_a_worker_in_another_pid_namespace_under_the_same_host_name_is_live(
    remote_runtime, fake_anthropic, lattice_server, tmp_path
):
    """Containers can share a host name (a Kubernetes pod, docker --network host) but not
    their pids: a worker there reports ``pid@host`` with a pid this process cannot see. Its
    run is served, not orphaned: `lattice interrupt --force` only interrupts it."""
    fake_anthropic.set_handler(lambda _request: hang(60))
    agent = create_agent(
        name=f"contained{uuid.uuid4().hex[:8]}",
        base_url=fake_anthropic.base_url,
        api_key="test",
        model="claude-test",
    )
    gone = await asyncio.create_subprocess_exec("true")
    await gone.wait()  # its pid names no process here; the other container's worker has it
    identity = f"{gone.pid}@{socket.gethostname()}"
    async with create_worker(
        remote_runtime.client, [agent], task_queue=agent.task_queue, identity=identity
    ):
        query = asyncio.ensure_future(agent.prompt("hi", runtime=remote_runtime))
        await assert_eventually(lambda: len(fake_anthropic.requests) == 1, within=10)
        workflow_id = f"{agent.name}-{agent.session_id}-1"
        forced = Cli.run(
            "interrupt",
            "--force",
            workflow_id,
            env=cli_env(lattice_server, fake_anthropic, tmp_path),
        )
        assert await asyncio.to_thread(forced.finish) == 0, forced
        assert forced.out == f"interrupt sent to {workflow_id} (it was running)"
        result = await asyncio.wait_for(query, 10)
        assert result.subtype == "interrupted", result


async def test_interrupt_force_on_a_shared_queue_leaves_the_other_runs_there_alone(
    remote_runtime, fake_anthropic, lattice_server, tmp_path
):
    """Two runs wait on the shared queue of `lattice worker` (none runs); ending one with
    --force must not touch the other (its model request failed "not registered" on the
    agentless worker that --force runs), which goes on once a worker is back."""
    fake_anthropic.set_handler(lambda _request: text("answered"))
    name = f"shared{uuid.uuid4().hex[:8]}"

    def make():
        return create_agent(
            name=name, base_url=fake_anthropic.base_url, api_key="test", model="claude-test"
        )

    target, other = make(), make()
    ended = asyncio.ensure_future(target.prompt("one", runtime=remote_runtime))
    waiting = asyncio.ensure_future(other.prompt("two", runtime=remote_runtime))
    target_id = f"{name}-{target.session_id}-1"

    async def started() -> bool:
        try:
            for agent in (target, other):
                await remote_runtime.client.get_workflow_handle(
                    f"{name}-{agent.session_id}-1"
                ).describe()
        except Exception:
            return False
        return True

    await assert_eventually(started, within=10)
    forced = Cli.run(
        "interrupt", "--force", target_id, env=cli_env(lattice_server, fake_anthropic, tmp_path)
    )
    assert await asyncio.to_thread(forced.finish) == 0, forced
    assert forced.out == f"{target_id} ended: interrupted (completed turns kept)"
    assert (await asyncio.wait_for(ended, 10)).subtype == "interrupted"
    assert not waiting.done()

    async with create_worker(remote_runtime.client, [other], task_queue=other.task_queue):
        result = await asyncio.wait_for(waiting, 20)
    assert result.subtype == "success" and result.result == "answered", result
