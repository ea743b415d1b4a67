"""Several hosts, one Temporal: the server, two workers and the client on hosts of their own.

Each host is a Linux network namespace on one bridge: the Temporal dev server on A, a
``lattice worker`` on B and one on C (each with its own ``LATTICE_HOME``, sharing only the
Postgres transcript store and the live channel's key, ``LATTICE_CHANNEL_KEY``), the client on
D. The root namespace, on one more port of the
bridge, holds the fake model and a forwarder to Postgres (which listens on the root
namespace's loopback only). The processes' logs stay in the test's ``tmp_path``. Twenty
queries run (tools, delegations, a team); B's worker is killed with SIGKILL while one of its
tool calls runs. Everything finishes on C, no completed tool call runs again, and the live
tokens reach the client from whichever host ran the model request. A client that advertises
an address no worker can reach still gets its answer, without live tokens, and the worker
says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_lattice.client._server import dev_server_command
from agent_lattice.testing import (
    FakeAnthropicServer,
    RecordedRequest,
    Reply,
    assert_eventually,
    message,
    text,
    tool_use,
    tool_use_block,
)

from forwarder import Forwarder

pytestmark = pytest.mark.slow  # a server and three processes on four namespaces, one killed

HERE = Path(__file__).parent
POSTGRES_DSN = os.environ.get("LATTICE_TEST_POSTGRES_DSN")
HOSTS = "abcd"  # A: Temporal server, B and C: workers, D: client


def netns_unavailable() -> str | None:
    """Why this machine cannot make network namespaces, or None when it can."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux-only"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    probe = f"latprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add is not permitted here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class Hosts:
    """Hosts ``lat<token>a``..``d``: network namespaces whose ``eth0`` ports sit on a bridge in
    a namespace of its own (``lat<token>s``, whose empty firewall forwards everything, whatever
    the machine's own rules say of bridged traffic), with a port for the root namespace too
    (``<net>.1``, the only address it gets). Names are fresh per run; ``close()`` ends the
    processes started on the hosts and removes every namespace and link made."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(3)
        routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
        while True:  # a /24 no route of this machine uses
            self.net = f"10.{random.randint(160, 250)}.{random.randint(0, 255)}"
            if f"{self.net}." not in routes:
                break
        self.root = f"{self.net}.1"
        self.made: list[list[str]] = []  # how to undo each step, in order
        self.processes: list[subprocess.Popen[bytes]] = []

    def ns(self, host: str) -> str:
        return f"lat{self.token}{host}"

    def address(self, host: str) -> str:
        return f"{self.net}.{2 + HOSTS.index(host)}"

    def _port(self, name: str, into: str | None, address: str) -> None:
        """A veth pair: ``name`` on the switch's bridge, ``<name>p`` in ``into`` (a host's
        namespace, as ``eth0``; None: the root namespace) with ``address``."""
        switch = self.ns("s")
        _ip("link", "add", name, "type", "veth", "peer", "name", f"{name}p")
        self.made.append(["link", "del", name])
        _ip("link", "set", name, "netns", switch)
        _ip("-n", switch, "link", "set", name, "master", "br0", "up")
        if into is None:
            _ip("addr", "add", f"{address}/24", "dev", f"{name}p")
            _ip("link", "set", f"{name}p", "up")
            return
        _ip("link", "set", f"{name}p", "netns", into)
        _ip("-n", into, "link", "set", f"{name}p", "name", "eth0")
        _ip("-n", into, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", into, "link", "set", "eth0", "up")
        _ip("-n", into, "link", "set", "lo", "up")

    def open(self) -> Hosts:
        for host in "s" + HOSTS:
            _ip("netns", "add", self.ns(host))
            self.made.append(["netns", "del", self.ns(host)])
        _ip("-n", self.ns("s"), "link", "add", "br0", "type", "bridge")
        _ip("-n", self.ns("s"), "link", "set", "br0", "up")
        self._port(self.ns("r"), None, self.root)
        for host in HOSTS:
            self._port(self.ns(host), self.ns(host), self.address(host))
        return self

    def start(self, host: str, args: list[str], env: dict[str, str], **popen) -> subprocess.Popen:
        """``args`` run on ``host`` (``ip netns exec`` execs them: the pid is theirs)."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns(host), *args], env=env, **popen)
        self.processes.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        for undo in reversed(self.made):  # a link already gone with its namespace: fine
            subprocess.run(["ip", *undo], capture_output=True)


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    why = netns_unavailable()
    if why:
        pytest.skip(why)
    if not POSTGRES_DSN:
        pytest.skip("LATTICE_TEST_POSTGRES_DSN is not set (.ci/run sets it)")
    made = Hosts()
    try:
        yield made.open()
    finally:
        made.close()


@pytest.fixture
def effects(hosts: Hosts) -> Iterator[str]:
    """The table the app's tools write their side effects to (dropped afterwards)."""
    import psycopg

    table = f"lattice_multi_host_{hosts.token}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {table} (id serial PRIMARY KEY, key text, phase text, host text)"
        )
    yield table
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


def rows(table: str) -> list[tuple[str, str, str]]:
    import psycopg

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        return conn.execute(f"SELECT key, phase, host FROM {table} ORDER BY id").fetchall()


def _query_of(request: RecordedRequest) -> str:
    first = request.messages[0]["content"]
    found = re.search(r"q\d\d", first if isinstance(first, str) else json.dumps(first))
    assert found, first
    return found.group()


def model(request: RecordedRequest) -> Reply:
    """Each agent's script, by its system prompt; the query's id (q01..q21) names its calls."""
    system, q = request.system or "", _query_of(request)
    turn = 1 + sum(m["role"] == "assistant" for m in request.messages)
    if "You are scribe." in system:
        steps = [tool_use("record", {"text": f"{q}-a"}), tool_use("slow_note", {"text": f"{q}-b"})]
        return steps[turn - 1] if turn <= 2 else text(f"{q} written down, every word of it")
    if "You are boss." in system:
        if turn == 1:
            return tool_use("delegate", {"task": f"{q} delegated"})
        return text(f"{q} boss got: {request.tool_results[0]['content']}")
    if "You are helper." in system:
        return tool_use("record", {"text": f"{q}-c"}) if turn == 1 else text(f"{q} helped")
    if "You are chief." in system:
        if turn == 1:
            return message(
                [
                    tool_use_block("fast", {"mode": "handoff", "task": f"{q} record"}),
                    tool_use_block("slow", {"mode": "handoff", "task": f"{q} note"}),
                ],
                stop_reason="tool_use",
            )
        return text(f"{q} crew finished")
    name, key = ("record", f"{q}-f") if "You are fast." in system else ("slow_note", f"{q}-s")
    return tool_use(name, {"text": key}) if turn == 1 else text(f"{q} {name} done")


EXPECTED = {
    "scribe": "{q} written down, every word of it",
    "boss": "{q} boss got: {q} helped",
    "crew": "{q} crew finished",
}


async def _line(stream, within: float, what: str) -> bytes:
    line = await asyncio.wait_for(asyncio.to_thread(stream.readline), within)
    assert line, f"{what} exited before it said so"
    return line


async def test_queries_survive_a_worker_host_killed_mid_run(hosts: Hosts, effects: str, tmp_path):
    import psycopg.conninfo

    pg = psycopg.conninfo.conninfo_to_dict(POSTGRES_DSN)
    forwarder = Forwarder(
        (str(pg.get("host", "127.0.0.1")), int(pg.get("port", 5432))), listen=hosts.root
    )
    fake = FakeAnthropicServer(model, host=hosts.root).start()
    try:
        dsn = psycopg.conninfo.make_conninfo(POSTGRES_DSN, host=hosts.root, port=forwarder.port)
        lines, killed_at = await _run(hosts, effects, tmp_path, fake, dsn)
    finally:
        fake.stop()
        forwarder.close()

    results, unreachable = lines[:20], lines[20]["unreachable"]
    # every query finished, with its answer
    assert sorted(r["q"] for r in results) == [f"q{i:02d}" for i in range(1, 21)]
    for r in results:
        assert r["subtype"] == "success", r
        assert r["result"] == EXPECTED[r["kind"]].format(q=r["q"]), r
        # live tokens reached host D from the worker hosts: the final turn's text, whole
        assert r["streamed"] == r["result"], r

    ran = rows(effects)
    done = Counter(key for key, phase, _ in ran if phase == "done")
    started = Counter(key for key, phase, _ in ran if phase == "start")
    # no tool call ran twice; every call the model saw succeed ran exactly once
    assert max(done.values()) == 1, done
    seen_ok = {
        r["content"].split()[-1]
        for request in fake.requests
        for r in request.tool_results
        if not r.get("is_error") and r["content"].startswith(("recorded ", "noted "))
    }
    assert seen_ok and all(done[key] == 1 for key in seen_ok), (seen_ok, done)
    # the kill cut a slow_note on B: it ran again, to its end, on C
    cut = [key for key, n in started.items() if n == 2]
    assert cut and all(done[key] == 1 for key in cut), started
    before, after = ran[:killed_at], ran[killed_at:]
    assert after and {host for _, _, host in after} == {"c"}
    # queries B worked on before the kill were finished by C
    on_b = {key[:3] for key, _, host in before if host == "b"}
    assert on_b & {key[:3] for key, _, _ in after}, (on_b, after)

    # a client whose stream address no worker reaches: the answer, no live tokens
    assert unreachable["subtype"] == "success"
    assert unreachable["result"] == EXPECTED["scribe"].format(q="q21")
    assert unreachable["events"] == 0 and unreachable["streamed"] == ""
    said = (tmp_path / "c" / "worker.log").read_text()
    assert "live tokens cannot reach the caller at tcp://127.0.0.1:" in said, said[-3000:]
    assert "set LATTICE_STREAM_HOST on the caller" in said


def _env(hosts: Hosts, tmp_path: Path, host: str, **extra: str) -> dict[str, str]:
    home = tmp_path / host
    home.mkdir(exist_ok=True)
    return {
        **os.environ,
        "LATTICE_HOME": str(home),  # each host its own
        "TEMPORAL_ADDRESS": f"{hosts.address('a')}:7233",
        "LATTICE_STREAM_HOST": hosts.address(host),
        "LATTICE_TEST_HOST": host,
        **extra,
    }


async def _run(
    hosts: Hosts, table: str, tmp_path: Path, fake: FakeAnthropicServer, dsn: str
) -> tuple[list[dict], int]:
    """Start the server on A, the workers on B and C, the client on D (all at once: the
    workers and the client wait for the server); SIGKILL B's worker inside a slow_note.
    Returns the client's lines and how many effects were written before the kill."""
    shared = {
        "LATTICE_TRANSCRIPT_DSN": dsn,
        "LATTICE_TEST_EFFECTS_DSN": dsn,
        "LATTICE_TEST_EFFECTS_TABLE": table,
        "ANTHROPIC_BASE_URL": fake.base_url,
        "LATTICE_TASK_QUEUE_PREFIX": f"mh{hosts.token}.",
        # the secret that signs the live channel between hosts (one home's key file is
        # that home's alone)
        "LATTICE_CHANNEL_KEY": secrets.token_urlsafe(32),
    }
    # every address of host A: the dev server's own services dial each other on 127.0.0.1
    # whatever --ip says (bound to A's bridge address alone, it cannot reach itself)
    env = _env(hosts, tmp_path, "a")
    server = dev_server_command(Path(env["LATTICE_HOME"]), port=7233, ip="0.0.0.0")
    with (tmp_path / "a" / "temporal.log").open("wb") as log:
        hosts.start("a", server, env, stdout=log, stderr=subprocess.STDOUT)
    worker = [sys.executable, "-m", "agent_lattice.cli", "worker", str(HERE / "multi_host_app.py")]
    b, _ = (
        hosts.start(
            h,
            worker,
            _env(hosts, tmp_path, h, **shared),
            stdout=(tmp_path / h / "worker.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        for h in "bc"
    )
    client = hosts.start(
        "d",
        [sys.executable, str(HERE / "multi_host_client.py")],
        _env(hosts, tmp_path, "d", **shared),
        stdout=subprocess.PIPE,
    )

    def b_is_inside_a_slow_note() -> bool:
        assert b.poll() is None, "worker B exited"
        phases = Counter((key, phase) for key, phase, host in rows(table) if host == "b")
        return any(phases[(key, "start")] > phases[(key, "done")] for key, _ in phases)

    await assert_eventually(b_is_inside_a_slow_note, within=60, interval=0.05)
    b.send_signal(signal.SIGKILL)
    b.wait(10)
    killed_at = len(rows(table))

    lines = [json.loads(await _line(client.stdout, 90, "the client")) for _ in range(21)]
    assert await asyncio.to_thread(client.wait, 30) == 0
    return lines, killed_at
