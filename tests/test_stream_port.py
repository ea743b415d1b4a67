"""``LATTICE_STREAM_PORT``: the live side channel on fixed ports a network policy can name. A
worker serves attached readers on the port, a query's caller takes the workers' tokens on the
next one; unset, both take free ports (as before)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

from agent_lattice import ConfigurationError, _settings
from agent_lattice.client import Runtime
from agent_lattice.client._server import _free_port
from agent_lattice.testing import FakeAnthropicServer, slow, text
from agent_lattice.workflows._types import AgentRunInput

from test_cli import Cli

APP = Path(__file__).with_name("cli_app.py")
STORY = "Every token of this story crossed the fixed live-token ports of two processes."


def _pair_of_free_ports() -> int:
    """A port P with P and P + 1 free now."""
    for _ in range(50):
        port = _free_port()
        if port < 65534:
            try:
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    raise AssertionError("no two free ports in a row")


@pytest.mark.parametrize("raw", ["abc", "0", "65535", "-1"])
def test_a_stream_port_that_is_no_port_is_refused_naming_it(raw, monkeypatch):
    monkeypatch.setenv("LATTICE_STREAM_PORT", raw)
    with pytest.raises(ConfigurationError, match=f"LATTICE_STREAM_PORT={raw!r}"):
        _settings.stream_port()


async def test_a_caller_listens_on_the_port_after_the_workers_and_a_second_one_is_refused(
    lattice_server, monkeypatch
):
    port = _pair_of_free_ports()
    monkeypatch.setenv("LATTICE_STREAM_PORT", str(port))
    first = await Runtime.connect(lattice_server, inline_workers=False)
    second = await Runtime.connect(lattice_server, inline_workers=False)
    try:
        receiver = await first.stream_receiver()
        assert receiver.address == f"tcp://127.0.0.1:{port + 1}"
        with pytest.raises(ConfigurationError, match=f"cannot listen on port {port + 1}"):
            await second.stream_receiver()
    finally:
        await first.close()
        await second.close()


@pytest.fixture
def procs() -> Iterator[list[Cli]]:
    started: list[Cli] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.signal(signal.SIGKILL)


def test_live_tokens_cross_processes_on_the_fixed_ports(
    lattice_server: str,
    task_queue_prefix: str,
    fake_anthropic: FakeAnthropicServer,
    tmp_path: Path,
    procs: list[Cli],
) -> None:
    fake_anthropic.set_handler(lambda _request: slow(text(STORY), delay=0.05))
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": lattice_server,
        "LATTICE_TASK_QUEUE_PREFIX": task_queue_prefix,
        "ANTHROPIC_BASE_URL": fake_anthropic.base_url,
        "ANTHROPIC_API_KEY": "test-key",
        "LATTICE_HOME": str(tmp_path / "home"),
        "LATTICE_TEST_OUTPUT": str(tmp_path),
        "COLUMNS": "200",
    }
    worker_port, caller_port = _pair_of_free_ports(), _pair_of_free_ports()
    worker_env = {**env, "LATTICE_STREAM_PORT": str(worker_port)}
    procs.append(worker := Cli.run("worker", str(APP), env=worker_env))
    worker.wait_for("ready")
    caller_env = {**env, "LATTICE_STREAM_PORT": str(caller_port)}
    procs.append(
        run := Cli.run("run", f"{APP}:agent", "Tell a story", "--no-worker", env=caller_env)
    )
    workflow_id = run.wait_for(r"workflow (\S+)")[1]
    assert run.finish() == 0, run
    assert STORY in run.out  # streamed by the worker to the caller's fixed port
    facts = _run_facts(lattice_server, workflow_id, f"{task_queue_prefix}lattice.clitest")
    assert facts["stream_to"] == f"tcp://127.0.0.1:{caller_port + 1}"
    assert f" live=tcp://127.0.0.1:{worker_port}" in facts["pollers"]
    worker.signal(signal.SIGTERM)
    assert worker.finish() == 0, worker


def _run_facts(server: str, workflow_id: str, queue: str) -> dict[str, str]:
    """Where the run's caller took live tokens (its input's ``stream_to``) and the identities
    of the pollers of ``queue`` (a worker's names its live port)."""

    async def read() -> dict[str, str]:
        runtime = await Runtime.connect(server, inline_workers=False)
        try:
            client = runtime.client
            history = await client.get_workflow_handle(workflow_id).fetch_history()
            started = history.events[0].workflow_execution_started_event_attributes
            (run_input,) = await client.data_converter.decode(
                started.input.payloads, [AgentRunInput]
            )
            described = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=client.namespace,
                    task_queue=TaskQueue(name=queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
                    task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
                )
            )
            return {
                "stream_to": run_input.stream_to or "",
                "pollers": "\n".join(p.identity for p in described.pollers),
            }
        finally:
            await runtime.close()

    return asyncio.run(read())
