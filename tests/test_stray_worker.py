"""A process talks to one server: a worker whose embedded server was stopped does not go on
to serve the next server that starts on its port (another LATTICE_HOME's), with its own code
and keys; it stops, saying why. A process that reconnects to another server than its own at
its address (another namespace id) stops using it: its inline workers stop, its calls raise
``ServerGoneError``.

The servers they lose are their own, in their own LATTICE_HOMEs (never the session's).
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from test_server_restart import TARGET, Lattice, model, procs  # noqa: F401

from agent_lattice import ServerGoneError, create_agent
from agent_lattice.client import DevServer, Runtime
from agent_lattice.client._server import _free_port
from agent_lattice.testing import FakeAnthropicServer, Script, assert_eventually, text

from conftest import API_KEY
from forwarder import Forwarder

QUERIES = 6


@pytest.fixture
def homes(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    homes = (tmp_path / "a", tmp_path / "b")
    yield homes
    for home in homes:
        if (left := DevServer.recorded(home)) is not None:
            (DevServer.running(home) or left).stop()


def home_env(home: Path, fake: FakeAnthropicServer, **more: str) -> dict[str, str]:
    """A process of ``home``: its embedded server (no TEMPORAL_* address), its own effects."""
    effects = home.parent / f"{home.name}-effects.log"
    effects.touch()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "LATTICE_"))}
    return {
        **base,
        "LATTICE_HOME": str(home),
        "ANTHROPIC_BASE_URL": fake.base_url,
        "ANTHROPIC_API_KEY": "test-key",
        "LATTICE_TEST_EFFECTS": str(effects),
        "LATTICE_TEST_TOOL_S": "0.2",
        "COLUMNS": "200",
        **more,
    }


def effects(env: dict[str, str]) -> list[str]:
    return Path(env["LATTICE_TEST_EFFECTS"]).read_text().splitlines()


async def namespace_id(address: str) -> str:
    client = await Client.connect(address)
    request = DescribeNamespaceRequest(namespace="default")
    return (await client.workflow_service.describe_namespace(request)).namespace_info.id


async def test_a_process_that_reconnects_to_another_server_stops_using_it(
    lattice_server: str, tmp_path: Path
) -> None:
    other, _ = await asyncio.to_thread(DevServer.ensure, tmp_path / "other", port=0, ui=False)
    try:
        with Forwarder(lattice_server) as proxy:
            runtime = await Runtime.connect(proxy.address)
            try:
                with FakeAnthropicServer(Script(text("ok"))) as fake:
                    agent = create_agent(api_key=API_KEY, base_url=fake.base_url, model="m")
                    assert (await agent.prompt("hi", runtime=runtime)).result == "ok"
                identity = runtime.watch.identity
                assert identity and runtime.watch.gone is None
                # the same server, reconnected to: nothing to say
                proxy.retarget(lattice_server)
                await runtime.list_runs(limit=1)
                assert not await runtime.watch._replaced(runtime.client)
                assert runtime.watch.gone is None

                proxy.retarget(other.address)
                await assert_eventually(lambda: runtime.watch.gone is not None, within=10)
                gone = runtime.watch.gone
                assert gone is not None and runtime.watch.lost.is_set()
                assert gone.startswith(f"the Temporal server at {proxy.address} is not the one")
                other_id = await namespace_id(other.address)
                assert other_id != identity
                assert f"id {identity} then, {other_id} now" in gone
                assert gone.endswith("restart the process to use the server there now")
                # its inline workers stop taking tasks; its calls say why at once
                workers = [task for _worker, task in runtime._workers.values()]
                assert workers
                await assert_eventually(lambda: all(task.done() for task in workers), within=30)
                with pytest.raises(ServerGoneError, match="is not the one this process"):
                    await runtime.list_runs(limit=1)
                with pytest.raises(ServerGoneError, match="is not the one this process"):
                    await agent.prompt("again", runtime=runtime)
            finally:
                await runtime.close()
    finally:
        other.stop()


@pytest.mark.slow  # real servers stopped and started, real worker processes
async def test_a_worker_of_a_stopped_server_leaves_the_next_one_on_its_port_alone(
    homes: tuple[Path, Path],
    fake_anthropic: FakeAnthropicServer,
    procs: list[Lattice],  # noqa: F811
) -> None:
    fake_anthropic.set_handler(model)
    home_a, home_b = homes
    logs = home_a.parent
    port = _free_port()
    server_a, _ = await asyncio.to_thread(DevServer.ensure, home_a, port=port, ui=False)
    key = base64.b64encode(os.urandom(32)).decode()
    env_a = home_env(home_a, fake_anthropic, LATTICE_ENCRYPTION_KEYS=f"k1:{key}")
    env_b = home_env(home_b, fake_anthropic)
    # home A's worker, on its embedded server, with its own keys
    procs.append(worker_a := Lattice("worker-a", ["worker", "tests/outage_app.py"], env_a, logs))
    await assert_eventually(lambda: "ready" in worker_a.out, within=30)

    # `lattice server stop` in home A, then home B's embedded server on the same port
    procs.append(stop := Lattice("stop-a", ["server", "stop"], env_a, logs))
    assert await asyncio.to_thread(stop.finish, 30) == 0, stop
    server_b, started = await asyncio.to_thread(DevServer.ensure, home_b, port=port, ui=False)
    assert started and server_b.address == server_a.address

    procs.append(worker_b := Lattice("worker-b", ["worker", "tests/outage_app.py"], env_b, logs))
    await assert_eventually(lambda: "ready" in worker_b.out, within=30)
    runs = []
    for i in range(QUERIES):
        argv = ["run", TARGET, f"note q{i}", "--no-worker"]
        procs.append(run := Lattice(f"run-{i}", argv, env_b, logs))
        runs.append(run)
    for i, run in enumerate(runs):
        assert await asyncio.to_thread(run.finish, 60) == 0, run
        assert f"done: noted q{i}" in run.out, run
    # every query was served by home B's worker, none by home A's
    assert sorted(effects(env_b)) == sorted(
        f"{what}:q{i}" for i in range(QUERIES) for what in ("start", "done")
    )
    assert effects(env_a) == []

    # home A's worker stopped, with one line saying why (besides its INFO log records)
    assert await asyncio.to_thread(worker_a.finish, 30) == 3, worker_a
    said = [x for x in worker_a.err.strip().splitlines() if " INFO " not in x]
    assert len(said) == 1, worker_a
    assert said[0].startswith(f"error: the embedded Temporal server at {server_a.address}")
    assert "was stopped" in said[0] and str(home_a) in said[0], worker_a
    worker_b.proc.terminate()
    assert await asyncio.to_thread(worker_b.finish, 30) == 0, worker_b
