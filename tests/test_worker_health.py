"""A worker's probes (``lattice worker --health-port``, ``LATTICE_HEALTH_PORT``): ``/livez``
answers while the process does; ``/readyz`` only once the server lists the worker among its
task queue's pollers, and no more once the worker is told to stop. The deploy kit's
Kubernetes probes call them (tests/test_deploy_smoke.py runs the real command)."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
import uuid

import pytest

from agent_lattice import ConfigurationError, create_bare_agent
from agent_lattice.client._server import _free_port
from agent_lattice.testing import assert_eventually
from agent_lattice.worker import create_worker
from agent_lattice.worker._health import HealthEndpoints


def get(port: int, path: str) -> tuple[int, str]:
    """The status and body of a GET on this machine (0 and why: nothing answered)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode().strip()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode().strip()
    except OSError as err:
        return 0, str(err)


async def fetch(port: int, path: str) -> tuple[int, str]:
    return await asyncio.to_thread(get, port, path)


async def test_ready_means_connected_and_polling_and_not_once_stopping(
    remote_runtime, fake_anthropic
):
    agent = create_bare_agent(
        name=f"probed{uuid.uuid4().hex[:6]}",
        model="claude-test",
        api_key="test",
        base_url=fake_anthropic.base_url,
    )
    worker = create_worker(remote_runtime.client, [agent], task_queue=agent.task_queue)
    port = _free_port()
    health = HealthEndpoints(remote_runtime.client, [worker], port)
    await health.start()
    try:
        assert await fetch(port, "/livez") == (200, "ok")
        assert await fetch(port, "/readyz") == (503, "the workers have not started")
        task = asyncio.create_task(worker.run())
        health.running([task])

        async def ready() -> bool:
            return (await fetch(port, "/readyz")) == (200, "ready")

        await assert_eventually(ready, within=20)
        assert (await fetch(port, "/nowhere"))[0] == 404
        health.stopping()  # SIGTERM: the orchestrator stops sending it work at once
        assert await fetch(port, "/readyz") == (503, "shutting down")
        await worker.shutdown()
        await task
        assert await fetch(port, "/livez") == (200, "ok")
    finally:
        await health.close()


async def test_a_worker_whose_task_queue_nobody_polls_is_not_ready(remote_runtime):
    """The worker's task runs, but the server lists no poller of this process on the queue
    (a worker that never reached its queue): not ready, and the queue is named."""
    queue = f"unpolled-{uuid.uuid4().hex[:6]}"
    worker = create_worker(remote_runtime.client, [], task_queue=queue)
    never = asyncio.create_task(asyncio.Event().wait())  # stands for a running worker task
    health = HealthEndpoints(remote_runtime.client, [worker], _free_port())
    health.running([never])
    try:
        assert await health.not_ready() == f"not polling task queue {queue} yet"
    finally:
        never.cancel()


async def test_a_taken_health_port_is_a_clear_error(remote_runtime):
    first = HealthEndpoints(remote_runtime.client, [], _free_port())
    await first.start()
    try:
        second = HealthEndpoints(remote_runtime.client, [], first._port)
        with pytest.raises(ConfigurationError, match=f"health port {first._port}: cannot listen"):
            await second.start()
    finally:
        await first.close()
