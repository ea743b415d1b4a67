"""The Temporal server dies (kill -9) under running workers and `lattice run`: it comes back
on its own port, they reconnect and say so, the run finishes with its result, and the tool in
flight ran once; a server that stays away ends them with exit code 3 and one line naming it.

Each test starts its own dev server in its own LATTICE_HOME (never the session's server).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import RetryConfig, RPCError

from agent_lattice.client import DevServer
from agent_lattice.testing import (
    FakeAnthropicServer,
    RecordedRequest,
    Reply,
    assert_eventually,
    text,
    tool_use,
)
from agent_lattice.worker._telemetry import temporal_runtime

from conftest import LoggedProcess

pytestmark = pytest.mark.slow  # real processes killed, servers restarted

ROOT = Path(__file__).resolve().parent.parent
TARGET = "tests/outage_app.py:agent"
# Temporal Core gives up on a call (an activity's completion among them) after ~10 s
OUTAGE_S = 12.0


class Lattice(LoggedProcess):
    """A ``lattice`` command (or a ``script``) in a fresh interpreter; its output goes to
    files."""

    def __init__(
        self, name: str, argv: list[str], env: dict[str, str], logs: Path, *, script: bool = False
    ) -> None:
        command = ["-c", *argv] if script else ["-m", "agent_lattice.cli", *argv]
        super().__init__(name, command, env, logs)


def model(request: RecordedRequest) -> Reply:
    if request.tool_results:
        return text(f"done: {request.tool_results[0]['content']}")
    return tool_use("slow_note", {"text": (request.last_user_text or "").split()[-1]})


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    yield home
    if (left := DevServer.recorded(home)) is not None:
        with_pid = DevServer.running(home) or left
        with_pid.stop()


@pytest.fixture
def env(home: Path, tmp_path: Path, fake_anthropic: FakeAnthropicServer) -> dict[str, str]:
    fake_anthropic.set_handler(model)
    effects = tmp_path / "effects.log"
    effects.touch()
    base = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    return {
        **base,
        "LATTICE_HOME": str(home),
        "ANTHROPIC_BASE_URL": fake_anthropic.base_url,
        "ANTHROPIC_API_KEY": "test-key",
        "LATTICE_TEST_EFFECTS": str(effects),
        "COLUMNS": "200",
    }


@pytest.fixture
def procs() -> Iterator[list[Lattice]]:
    started: list[Lattice] = []
    yield started
    for lattice in started:
        lattice.stop()


def effects(env: dict[str, str]) -> list[str]:
    return Path(env["LATTICE_TEST_EFFECTS"]).read_text().splitlines()


def kill(server: DevServer) -> None:
    os.kill(server.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while _accepting(server.port) and time.monotonic() < deadline:
        time.sleep(0.05)


def _accepting(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


async def connected(address: str, **options: Any) -> Client:
    """``Client.connect`` to a server just started: it accepts connections a moment before
    its frontend serves ("Frontend is not healthy yet"), longer on a loaded machine. (The
    library's own connect waits the same way: client/_reconnect.py.)"""
    deadline = time.monotonic() + 30
    while True:
        try:
            return await Client.connect(address, **options)
        except RuntimeError as err:
            if "not healthy yet" not in str(err) or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)


async def healthy(client: Client) -> None:
    """The server's frontend answers: a (re)started server accepts connections a moment
    before it serves ("Frontend is not healthy yet"), longer on a loaded machine."""

    async def check() -> bool:
        try:
            return await client.service_client.check_health()
        except RPCError as err:
            raise AssertionError(f"not healthy: {err}") from err

    await assert_eventually(check, within=30)


def lingering_sockets(port: int) -> int:
    """Sockets on ``port`` that are not listening (TIME-WAIT, FIN-WAIT...): the ones a bind
    without SO_REUSEADDR fails on."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                if int(local.rsplit(":", 1)[1], 16) == port and state != "0A":
                    count += 1
    return count


# ---------------------------------------------------------------------------- the port


async def test_killed_server_comes_back_on_its_ports(home: Path, capfd) -> None:
    server, started = await asyncio.to_thread(DevServer.ensure, home, port=0)
    assert started and server.ui_port
    client = await connected(server.address)
    await healthy(client)
    # Killed with clients connected, the server closes first: its end of each connection
    # lingers in TIME-WAIT on the port (made sure of with a plain connection closed after it)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as plain:
        assert plain.recv(1024)  # the server's HTTP/2 settings: it accepted the connection
        kill(server)
        while plain.recv(1024):  # up to the server's FIN
            pass
    await assert_eventually(lambda: lingering_sockets(server.port) > 0, within=5)

    again, started = await asyncio.to_thread(DevServer.ensure, home)
    assert started and (again.port, again.ui_port) == (server.port, server.ui_port)
    assert again.pid != server.pid
    await healthy(client)  # the old client reaches it again
    assert "taken" not in capfd.readouterr().err

    # a port that another process really listens on is left to it, loudly
    kill(again)
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", server.port))
        squatter.listen()
        moved, started = await asyncio.to_thread(DevServer.ensure, home)
    assert started and moved.port != server.port and moved.ui_port == server.ui_port
    said = capfd.readouterr().err
    assert f"agent-lattice: port {server.port} is taken by another process" in said
    assert f"uses {moved.port} instead" in said and "restart them" in said


async def test_a_server_stopped_on_purpose_is_not_brought_back(home: Path) -> None:
    """A watcher that revives a dead server, trying while ``stop()`` (``lattice server
    stop``) runs: the stopped server stays stopped (its record outlived its process, and a
    revive in between started it again, or left one running with no record)."""
    server, _ = await asyncio.to_thread(DevServer.ensure, home, port=0, ui=False)
    stopping = asyncio.ensure_future(asyncio.to_thread(server.stop))
    revived: list[DevServer] = []
    try:
        while not stopping.done():
            back = await asyncio.to_thread(DevServer.revive, home, server.address)
            if back is not None:
                revived.append(back)
        await stopping
        assert revived == [] and DevServer.recorded(home) is None
        assert not _accepting(server.port)
    finally:
        for back in revived:
            back.stop()


# ---------------------------------------------------------------------------- an outage


async def worker_and_run(
    home: Path, env: dict[str, str], procs: list[Lattice], *, script: bool = False
) -> tuple[DevServer, Lattice, Lattice]:
    """A server of the test's own, a `lattice worker` and a `lattice run --no-worker` on it
    (given its address: they do not restart it), once the run's tool started; with
    ``script``, a script's prompt() (its own tool call started) too."""
    server, _ = await asyncio.to_thread(DevServer.ensure, home, port=0, ui=False)
    env = {**env, "TEMPORAL_ADDRESS": server.address}
    logs = home.parent
    procs.append(worker := Lattice("worker", ["worker", "tests/outage_app.py"], env, logs))
    await assert_eventually(lambda: "ready" in worker.out, within=30)
    procs.append(run := Lattice("run", ["run", TARGET, "note x", "--no-worker"], env, logs))
    if script:
        script_env = {**env, "PYTHONPATH": str(ROOT / "tests")}
        procs.append(Lattice("script", [PROMPT_SCRIPT], script_env, logs, script=True))
    await assert_eventually(lambda: "start:x" in effects(env), within=30)
    if script:
        await assert_eventually(lambda: "start:y" in effects(env), within=30)
    return server, worker, run


# A script whose prompt() waits for its result (its agent served by the script itself)
PROMPT_SCRIPT = (
    "import asyncio, outage_app\n"
    "print('result:', asyncio.run(outage_app.agent.prompt('note y')).result)"
)


async def test_worker_and_run_ride_out_a_server_restart(
    home: Path, env: dict[str, str], procs: list[Lattice]
) -> None:
    release = home.parent / "release"
    tool_env = {**env, "LATTICE_TEST_TOOL_S": "30", "LATTICE_TEST_RELEASE": str(release)}
    server, worker, run = await worker_and_run(home, tool_env, procs, script=True)
    script = procs[-1]
    kill(server)
    release.touch()  # the tools end while the server is gone: their results must not be lost
    await assert_eventually(lambda: sorted(effects(env))[:2] == ["done:x", "done:y"], within=5)
    await asyncio.sleep(OUTAGE_S)
    back, started = await asyncio.to_thread(DevServer.ensure, home, ui=False)
    assert started and back.address == server.address

    assert await asyncio.to_thread(run.finish, 60) == 0, run
    assert "← noted x" in run.out and "done: noted x" in run.out, run
    assert await asyncio.to_thread(script.finish, 60) == 0, script
    assert script.out == "result: done: noted y\n", script
    assert sorted(effects(env)) == ["done:x", "done:y", "start:x", "start:y"]  # each ran once
    unreachable = f"agent-lattice: Temporal server at {server.address} unreachable, retrying…"
    for process in (run, worker, script):
        assert process.err.count(unreachable) == 1, process
        assert f"agent-lattice: reconnected to {server.address}" in process.err, process
    worker.proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(worker.finish, 30) == 0, worker


async def test_a_server_that_stays_away_ends_run_and_worker_with_code_3(
    home: Path, env: dict[str, str], procs: list[Lattice]
) -> None:
    server, worker, run = await worker_and_run(home, {**env, "LATTICE_RECONNECT_S": "2"}, procs)
    kill(server)
    for process in (run, worker):
        assert await asyncio.to_thread(process.finish, 30) == 3, process
        last = process.err.strip().splitlines()[-1]
        assert last.startswith(f"error: lost the Temporal server at {server.address}"), process
        assert "LATTICE_RECONNECT_S" in last and "Traceback" not in process.err, process


async def test_run_restarts_the_embedded_server_it_lost(
    home: Path, env: dict[str, str], procs: list[Lattice], tmp_path: Path
) -> None:
    server, _ = await asyncio.to_thread(DevServer.ensure, home, port=0, ui=False)
    procs.append(run := Lattice("run", ["run", TARGET, "note x"], env, tmp_path))  # embedded
    await assert_eventually(lambda: "start:x" in effects(env), within=30)

    kill(server)
    assert await asyncio.to_thread(run.finish, 60) == 0, run
    assert "done: noted x" in run.out and effects(env) == ["start:x", "done:x"], run
    assert f"restarted the embedded Temporal server at {server.address}" in run.err, run
    back = DevServer.running(home)
    assert back is not None and back.address == server.address and back.pid != server.pid


async def test_core_retries_of_a_lost_server_print_nothing(home: Path, capfd) -> None:
    # A worker's polls are retried without end; after 15 tries Temporal Core prints an error
    # line per try (on stdout, which `lattice run --json` keeps for messages). Polls cannot be
    # configured, so a client call with the same unlimited retries stands in for them.
    server, _ = await asyncio.to_thread(DevServer.ensure, home, port=0, ui=False)
    client = await connected(
        server.address,
        runtime=temporal_runtime(),
        retry_config=RetryConfig(
            max_interval_millis=100, max_elapsed_time_millis=3000, max_retries=0
        ),
    )
    kill(server)
    with pytest.raises(RPCError):
        await client.get_workflow_handle("gone").describe()
    printed = capfd.readouterr()
    assert "retried" not in printed.out + printed.err
