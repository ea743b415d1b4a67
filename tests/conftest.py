from __future__ import annotations

import ast
import asyncio
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import hypothesis  # noqa: F401 - imported before any thread starts (see below)
import pytest
import pytest_asyncio
from pydantic import BaseModel

from agent_lattice import (
    AssistantMessage,
    ModelMessage,
    ResultMessage,
    StreamEventMessage,
    ToolResult,
    create_bare_agent,
    tool,
)
from agent_lattice.client import Runtime
from agent_lattice.testing import FAST_SETTINGS, FakeAnthropicServer

pytest_plugins = ["agent_lattice.testing.pytest_plugin"]

# hypothesis's pytest plugin would otherwise import hypothesis at the end of the session, when
# worker threads are alive; CPython 3.11's ast.parse (pytest's assertion rewriting) can fail
# with "AST constructor recursion depth mismatch" then.

API_KEY = "sk-ant-test-SECRET-4f2b9c"

_PARSE = "import ast, pickle, sys; pickle.dump([ast.parse(open(p).read()) for p in sys.argv[1:]], sys.stdout.buffer)"


def parse_sources(paths: Iterable[Path]) -> dict[Path, ast.Module]:
    """The syntax trees of ``paths``, parsed in a child process. In this process the session's
    Temporal workers compile code in their threads, and CPython 3.11 counts the AST
    constructor's recursion in state those threads share (gh-106905): ``ast.parse`` here can
    fail with "AST constructor recursion depth mismatch". The trees come back pickled."""
    paths = list(paths)
    out = subprocess.run(
        [sys.executable, "-c", _PARSE, *map(str, paths)], capture_output=True, check=True
    )
    return dict(zip(paths, pickle.loads(out.stdout), strict=True))


class Expr(BaseModel):
    expr: str


def make_calculator(calls: list[str] | None = None, **options: object):
    def calculator(input: Expr) -> ToolResult:
        if calls is not None:
            calls.append(input.expr)
        left, _, right = input.expr.partition("+")
        return ToolResult(content=str(int(left) + int(right)))

    return tool("calculator", "Add two integers written as 'a+b'", Expr, calculator, **options)


# -- Postgres: a testcontainers one where Docker answers, else the machine's service ------


def docker_unreachable(timeout: float = 1.0) -> str | None:
    """None when a Docker daemon answers ``GET /_ping`` at ``DOCKER_HOST`` (default the local
    socket), else why not. Asked directly, with a short timeout: docker-py, which
    testcontainers uses, would wait a minute for a daemon that is not there."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    scheme, _, where = host.partition("://")
    try:
        if scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(where)
        elif scheme == "tcp":
            name, _, port = where.rpartition(":")
            sock = socket.create_connection((name, int(port)), timeout=timeout)
        else:
            return f"DOCKER_HOST={host} is not probed (unix:// and tcp:// are)"
        with sock:
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            answer = sock.recv(1024)
    except OSError as err:
        return f"no Docker daemon at {host} ({err.strerror or err})"
    return (
        None
        if answer.startswith(b"HTTP/1.") and b" 200 " in answer[:16]
        else (f"{host} did not answer like a Docker daemon")
    )


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A Postgres for the tests of Postgres stores: a throwaway testcontainers one when a
    Docker daemon answers, else ``LATTICE_TEST_POSTGRES_DSN`` (the machine's service;
    ``.ci/run`` sets it); the tests skip, naming both reasons, when there is neither."""
    unreachable = docker_unreachable()
    if unreachable is None:
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine", driver=None) as container:
            yield container.get_connection_url()
        return
    dsn = os.environ.get("LATTICE_TEST_POSTGRES_DSN")
    if not dsn:
        pytest.skip(f"no Postgres: {unreachable}, and LATTICE_TEST_POSTGRES_DSN is not set")
    yield dsn


@pytest.fixture
def pg_schema(postgres_dsn: str) -> Iterator[str]:
    """A DSN whose tables are made in a schema of this test's own, dropped at its end."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    schema = f"lattice_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield make_conninfo(postgres_dsn, options=f"-csearch_path={schema}")
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


async def table_text(dsn: str, *tables: str) -> str:
    """Every row of ``tables`` as text, as a grep of the table would see it."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        out = []
        for table in tables:
            rows = await (await conn.execute(f"SELECT t::text FROM {table} t")).fetchall()
            out += [row[0] for row in rows]
        return "\n".join(out)


TRANSCRIPT_TABLES = ("lattice_chunks", "lattice_links", "lattice_blobs", "lattice_tool_calls")


@pytest_asyncio.fixture
async def remote_runtime(lattice_server, task_queue_prefix):
    """A runtime with no workers of its own: queries run on worker processes the test
    starts (and kills)."""
    runtime = await Runtime.connect(lattice_server, settings=FAST_SETTINGS, inline_workers=False)
    yield runtime
    await runtime.close()


@pytest.fixture
def make_agent(fake_anthropic: FakeAnthropicServer, lattice_runtime):
    """Agents pointed at the fake provider, running on the test's runtime, with exactly the
    tools a test gives them (no built-in workspace tools: tests/test_workspace.py has those)."""

    def factory(**options: object):
        options.setdefault("model", "claude-test")
        return create_bare_agent(api_key=API_KEY, base_url=fake_anthropic.base_url, **options)

    factory.runtime = lattice_runtime
    return factory


HISTORIES = __import__("pathlib").Path(__file__).parent / "histories"


async def keep_history(runtime, workflow_id: str, name: str):
    """Fetch a run's history; with LATTICE_RECORD_HISTORIES=1 also commit it for replay tests."""
    import os

    history = await runtime.client.get_workflow_handle(workflow_id).fetch_history()
    if os.environ.get("LATTICE_RECORD_HISTORIES") == "1":
        HISTORIES.mkdir(exist_ok=True)
        (HISTORIES / f"{name}.json").write_text(history.to_json())
    return history


def note_rpcs(monkeypatch, service, *names: str) -> list[tuple[str, object]]:
    """Every call of ``service``'s RPCs ``names`` from now on, as (name, request) in order:
    the real RPCs are made, each noted first."""
    calls: list[tuple[str, object]] = []
    for name in names:
        real = getattr(service, name)

        async def call(*args, _name=name, _real=real, **options):
            calls.append((_name, args[0] if args else None))
            return await _real(*args, **options)

        monkeypatch.setattr(service, name, call)
    return calls


def by_agent(**handlers):
    """A fake-provider handler for several agents: each request goes to the handler (a
    ``Script`` or any function of the request) of the agent whose system prompt says
    "You are <name>."."""

    def handle(request):
        system = request.system or ""
        for name, handler in handlers.items():
            if f"You are {name}." in system:
                return handler(request)
        raise AssertionError(f"no handler for system prompt {system!r}")

    return handle


async def child_ids(client, workflow_id: str) -> list[str]:
    """The child workflows a run started, in order, from its history."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return [
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id
        for e in history.events
        if e.HasField("start_child_workflow_execution_initiated_event_attributes")
    ]


class HostMember:
    """A host AgentLike (not an Agent): answers ``host did: <prompt>`` after ``delay``."""

    def __init__(self, delay: float = 0.05) -> None:
        self.prompts: list[str] = []
        self.cancelled = asyncio.Event()
        self.delay = delay

    def query(self, prompt, **options):
        raise NotImplementedError

    async def prompt(self, prompt, **options) -> ResultMessage:
        self.prompts.append(prompt)
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return ResultMessage(subtype="success", result=f"host did: {prompt}", session_id="h")

    def interrupt(self) -> bool:
        return False


class StreamingHostMember(HostMember):
    """A host AgentLike whose ``query()`` streams: a token event, its turn, then its result."""

    def query(self, prompt, **options):
        return self._messages(prompt)

    async def _messages(self, prompt):
        self.prompts.append(prompt)
        answer = f"host did: {prompt}"
        yield StreamEventMessage(event={"type": "message_start"}, session_id="h")
        yield AssistantMessage(
            message=ModelMessage(role="assistant", content=[{"type": "text", "text": answer}]),
            session_id="h",
        )
        yield ResultMessage(subtype="success", result=answer, session_id="h")

    async def prompt(self, prompt, **options) -> ResultMessage:
        result = None
        async for message in self.query(prompt):
            result = message
        return result


class _Nothing(BaseModel):
    pass


def waiting_tool(check):
    """A tool that returns once ``check()`` holds (a team lead waiting for its team's mail);
    a ``check(ctx)`` gets the tool's context."""
    import inspect

    from agent_lattice.testing import assert_eventually

    takes_ctx = bool(inspect.signature(check).parameters)

    async def wait(_: _Nothing, ctx) -> str:
        await assert_eventually(lambda: check(ctx) if takes_ctx else check(), within=40)
        return "settled"

    return tool("wait_for_mail", "Wait until the team's mail is settled.", _Nothing, wait)


def named_agent(fake: FakeAnthropicServer, name: str, **options: object):
    """A bare agent answered by ``fake``, its system prompt "You are <name>." (see by_agent)."""
    return create_bare_agent(
        api_key=API_KEY,
        base_url=fake.base_url,
        model="claude-test",
        name=name,
        system_prompt=f"You are {name}.",
        **options,
    )


# -- commands in fresh interpreters, their output in files ----------------------------------


class LoggedProcess:
    """``python ARGS`` in a fresh interpreter (a session of its own), run from the repository
    root; its stdout and stderr go to files in ``logs`` the test reads as they grow."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], logs: Path) -> None:
        self.out_path, self.err_path = logs / f"{name}.out", logs / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, *args],
                env={**env, "PYTHONUNBUFFERED": "1"},
                cwd=Path(__file__).parent.parent,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.pid = self.proc.pid

    @property
    def out(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def err(self) -> str:
        return self.err_path.read_text(errors="replace")

    def finish(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"still running after {timeout} s; {self!r}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __repr__(self) -> str:
        return f"stdout:\n{self.out}\nstderr:\n{self.err}"


# -- processes seen through /proc (Linux) ----------------------------------------------------


def running(pid: int) -> bool:
    """The process runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def running_children(parent: int, matches: Callable[[list[str]], bool]) -> list[int]:
    """The running children of ``parent`` whose command line (``argv``) ``matches``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().decode().split("\0")[:-1]
        except OSError:  # it ended meanwhile
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        if ppid == parent and matches(argv) and running(int(entry.name)):
            found.append(int(entry.name))
    return found


def wait_until(check: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# -- crash_app.py worker processes (killed with SIGKILL by the crash tests) -----------------


class WorkerProcess:
    """A ``crash_app.py`` worker process (its agents served until it is killed)."""

    def __init__(self, address: str, base_url: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).parent / "crash_app.py"), address, base_url],
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
        )

    async def ready(self) -> None:
        line = await asyncio.wait_for(asyncio.to_thread(self.proc.stdout.readline), 30)
        assert line.strip() == b"ready", line

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc.stdout.close()


@pytest.fixture
def workers(lattice_server, fake_anthropic):
    started: list[WorkerProcess] = []

    async def start() -> WorkerProcess:
        worker = WorkerProcess(lattice_server, fake_anthropic.base_url)
        started.append(worker)
        await worker.ready()
        return worker

    yield start
    for worker in started:
        worker.stop()
