"""MCP tools of an app module (``examples/mcp_worker.py``, the real ``mcp-server-time``) in
real processes: served by ``lattice worker`` (the MCP server a child of the worker, killed
here), answered by ``lattice run``, and run as a plain script. No API key: the example's
scripted fake model asks the server for the time and answers with what it said.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agent_lattice import ResultMessage, ToolResultBlock
from agent_lattice.worker._worker import resolve_agent

from conftest import LoggedProcess, running, running_children, wait_until

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "mcp_worker.py"
TIMEOUT = 90.0

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds processes in /proc")


def time_server_of(worker: LoggedProcess) -> list[int]:
    """The worker's running ``mcp-server-time`` processes (its children)."""
    return running_children(worker.pid, lambda argv: argv[-2:] == ["-m", "mcp_server_time"])


@pytest.fixture
def env(
    lattice_server: str, task_queue_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """No API key (the example's fake model answers), the session's server, this test's
    queues (LATTICE_TASK_QUEUE_PREFIX is in os.environ) and a LATTICE_HOME (transcripts) the
    test process shares with the processes it starts."""
    monkeypatch.setenv("LATTICE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # the definition the worker has
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")},
        "TEMPORAL_ADDRESS": lattice_server,
        "COLUMNS": "200",
    }


@pytest.fixture
def processes() -> Iterator[list[LoggedProcess]]:
    started: list[LoggedProcess] = []
    yield started
    for process in started:
        process.stop()


def cli(*argv: str) -> list[str]:
    return ["-m", "agent_lattice.cli", *argv]


def assert_real_time(answer: str, zone: str) -> None:
    """``answer`` carries the time server's JSON for ``zone``, the time being now."""
    said = json.loads(answer.split("The time server says: ", 1)[1].strip())
    assert said["timezone"] == zone, answer
    when = datetime.fromisoformat(said["datetime"])
    now = datetime.now(UTC)
    assert abs((when - now).total_seconds()) < 300, (answer, now)
    assert when.utcoffset() == now.astimezone(ZoneInfo(zone)).utcoffset(), answer


# -- the example in real processes --------------------------------------------------------


async def ask(runtime: Any, prompt: str) -> tuple[ToolResultBlock, ResultMessage]:
    """One query of the example's ``clock`` (a fresh session), served by the worker process."""
    agent = resolve_agent(f"{EXAMPLE}:clock")
    results: list[ToolResultBlock] = []
    async for message in agent.query(prompt, runtime=runtime):
        if message.type == "user":
            results += [b for b in message.message.blocks if isinstance(b, ToolResultBlock)]
        elif isinstance(message, ResultMessage):
            assert len(results) == 1, (results, message)
            return results[0], message
    raise AssertionError("no result")


@pytest.mark.timeout(300)
async def test_the_worker_hosts_the_mcp_server_and_reconnects_after_it_dies(
    env, tmp_path, processes, remote_runtime
):
    worker = LoggedProcess("worker", cli("worker", str(EXAMPLE)), env, tmp_path)
    processes.append(worker)
    started = lambda: "ready" in worker.out or worker.proc.poll() is not None  # noqa: E731
    await asyncio.to_thread(wait_until, started, "the worker", TIMEOUT)
    assert worker.proc.poll() is None, worker

    result, end = await ask(remote_runtime, "What time is it in Paris?")
    assert result.is_error in (None, False), result
    assert end.subtype == "success"
    assert_real_time(end.result, "Europe/Paris")
    [server] = time_server_of(worker)  # the connection lives in the worker, its child

    os.kill(server, signal.SIGKILL)
    await asyncio.to_thread(wait_until, lambda: not running(server), "the MCP server to die")
    result, end = await ask(remote_runtime, "What time is it in Tokyo?")
    assert result.is_error is True, result  # the call that met the dead connection
    assert "MCP server 'mcp-time': connection lost" in str(result.content), result
    assert "The next call reconnects" in str(result.content)
    assert end.result.startswith("The time server failed: "), end.result

    result, end = await ask(remote_runtime, "What time is it in Tokyo?")
    assert result.is_error in (None, False), result
    assert_real_time(end.result, "Asia/Tokyo")
    [again] = time_server_of(worker)
    assert again != server

    worker.proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(worker.finish, TIMEOUT) == 0, worker
    assert "workers stopped" in worker.err, worker
    assert "Traceback" not in worker.err, worker
    wait_until(lambda: not running(again), "the worker to stop its MCP server", timeout=15)


@pytest.mark.timeout(180)
def test_lattice_run_prints_the_time_servers_answer(env, tmp_path, processes):
    run = LoggedProcess(
        "run", cli("run", f"{EXAMPLE}:clock", "What time is it in Paris?"), env, tmp_path
    )
    processes.append(run)
    assert run.finish(TIMEOUT) == 0, run
    assert "scripted fake model" in run.err, run
    assert "serving clock in this process" in run.err, run
    [answer] = [line for line in run.out.splitlines() if line.startswith("The time server says")]
    assert_real_time(answer, "Europe/Paris")
    assert "✓ success" in run.out, run


@pytest.mark.timeout(180)
def test_the_example_runs_as_a_script(env, tmp_path, processes):
    script = LoggedProcess("script", [str(EXAMPLE), "What time is it in London?"], env, tmp_path)
    processes.append(script)
    assert script.finish(TIMEOUT) == 0, script
    assert "scripted fake model" in script.err, script
    assert "Traceback" not in script.err and "Unclosed" not in script.err, script
    assert_real_time(script.out.strip(), "Europe/London")
