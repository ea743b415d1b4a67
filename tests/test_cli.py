"""The ``lattice`` CLI, end to end: real CLI processes against the session's Temporal dev server
and a fake Anthropic server (``tests/cli_app.py`` is the app).

Starting a CLI process costs seconds of imports (anthropic, temporalio), so most commands run
in processes forked from a fork server that has imported the CLI once: each is a separate
process calling the real ``main(argv)`` with its own environment, stdout and stderr. One test
starts a fresh ``python -m agent_lattice.cli``.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import multiprocessing
import multiprocessing.forkserver
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from temporalio.client import Client
from typer.testing import CliRunner

from agent_lattice import (
    AssistantMessage,
    ModelMessage,
    ResultMessage,
    StreamEventMessage,
    SystemMessage,
    TextBlock,
    Usage,
)
from agent_lattice.cli import Renderer, app
from agent_lattice.client._server import DevServer, temporal_binary
from agent_lattice.testing import (
    FakeAnthropicServer,
    RecordedRequest,
    Reply,
    Script,
    assert_eventually,
    error,
    slow,
    stream_error,
    text,
    tool_use,
)
from agent_lattice.worker._pollers import queue_served

ROOT = Path(__file__).resolve().parent.parent
APP = Path(__file__).with_name("cli_app.py")
TARGET = f"{APP}:agent"
WAIT_PROMPT = "please wait"  # the fake model hangs on this prompt
TIMEOUT = 45.0

FORKS = multiprocessing.get_context("forkserver")
FORKS.set_forkserver_preload(["agent_lattice.cli", __name__])
_numbers = itertools.count()


def model(request: RecordedRequest) -> Reply:
    """Calls the calculator first, then answers with its result; hangs on WAIT_PROMPT."""
    if request.tool_results:
        return text(f"The sum is {request.tool_results[0]['content']}.")
    if WAIT_PROMPT in (request.last_user_text or ""):
        return slow(text("too late"), delay=60)
    return tool_use("calculator", {"expr": "2+2"})


def _forked_main(argv: list[str], env: dict[str, str], out: str, err: str) -> None:
    """In a process forked from the fork server: ``main(argv)`` with its own env and output."""
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    os.environ.clear()
    os.environ.update(env)
    os.chdir(ROOT)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the fork server ignores it
    from agent_lattice.cli import main

    main(argv)


class Cli:
    """One CLI process; the test reads its stdout and stderr files as they grow."""

    def __init__(self, argv: list[str], env: dict[str, str], *, command: list[str] | None) -> None:
        number = next(_numbers)
        workdir = Path(env["LATTICE_TEST_OUTPUT"])
        self.out_path, self.err_path = workdir / f"cli{number}.out", workdir / f"cli{number}.err"
        self._seen = 0
        self._popen: subprocess.Popen[bytes] | None = None
        self._process: Any = None
        if command is None:
            self._process = FORKS.Process(
                target=_forked_main, args=(argv, env, str(self.out_path), str(self.err_path))
            )
            self._process.start()
            self.pid: int = self._process.pid
        else:
            with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
                self._popen = subprocess.Popen(
                    [*command, *argv],
                    env={**env, "PYTHONUNBUFFERED": "1"},
                    cwd=ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            self.pid = self._popen.pid

    @classmethod
    def run(cls, *argv: str, env: dict[str, str]) -> Cli:
        """``main(argv)`` in a process forked from the preloaded fork server."""
        return cls(list(argv), env, command=None)

    @classmethod
    def exec(cls, *argv: str, env: dict[str, str]) -> Cli:
        """A fresh interpreter: ``python -m agent_lattice.cli``."""
        return cls(list(argv), env, command=[sys.executable, "-m", "agent_lattice.cli"])

    def poll(self) -> int | None:
        if self._popen is not None:
            return self._popen.poll()
        return self._process.exitcode

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def wait_for(
        self, pattern: str, timeout: float = TIMEOUT, *, stderr: bool = False
    ) -> re.Match[str]:
        """The first complete stdout line from the last match on that matches ``pattern``
        (``stderr``: the first complete stderr line that does)."""
        deadline = time.monotonic() + timeout
        while True:
            exited = self.poll() is not None
            lines = _read(self.err_path if stderr else self.out_path).split("\n")[:-1]
            for index in range(0 if stderr else self._seen, len(lines)):
                if match := re.search(pattern, lines[index]):
                    if not stderr:
                        self._seen = index + 1
                    return match
            if exited or time.monotonic() > deadline:
                raise AssertionError(f"no line matching {pattern!r}; {self!r}")
            time.sleep(0.02)

    def finish(self, timeout: float = TIMEOUT) -> int:
        if self._popen is not None:
            try:
                return self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        else:
            self._process.join(timeout)
            if self._process.exitcode is not None:
                return int(self._process.exitcode)
        self.kill()
        raise AssertionError(f"still running after {timeout}s; {self!r}")

    def kill(self) -> None:
        if self.poll() is None:
            with_signal = self._popen or self._process
            with_signal.kill()
            if self._popen is not None:
                self._popen.wait(5)
            else:
                self._process.join(5)

    @property
    def stdout(self) -> list[str]:
        return _read(self.out_path).splitlines()

    @property
    def stderr(self) -> list[str]:
        return _read(self.err_path).splitlines()

    @property
    def out(self) -> str:
        return _read(self.out_path).rstrip("\n")

    @property
    def err(self) -> str:
        return _read(self.err_path).rstrip("\n")

    def __repr__(self) -> str:
        return f"pid {self.pid}\nstdout:\n{self.out}\nstderr:\n{self.err}"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""


@pytest.fixture(scope="module", autouse=True)
def fork_server() -> None:
    """Start the fork server's imports now, while the first tests run."""
    multiprocessing.forkserver.ensure_running()  # type: ignore[attr-defined]


@pytest.fixture
def procs() -> Iterator[list[Cli]]:
    """Processes of a test, killed at its end if still running."""
    started: list[Cli] = []
    yield started
    for proc in started:
        proc.kill()


@pytest.fixture
def env(
    lattice_server: str,
    task_queue_prefix: str,
    fake_anthropic: FakeAnthropicServer,
    tmp_path: Path,
) -> dict[str, str]:
    """Environment for CLI processes: the session server, this test's queues, the fake model."""
    fake_anthropic.set_handler(model)
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": lattice_server,
        "LATTICE_TASK_QUEUE_PREFIX": task_queue_prefix,
        "ANTHROPIC_BASE_URL": fake_anthropic.base_url,
        "ANTHROPIC_API_KEY": "test-key",
        "LATTICE_HOME": str(tmp_path / "home"),
        "COLUMNS": "200",
        "LATTICE_TEST_OUTPUT": str(tmp_path),
    }


def json_lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines()]


def squeeze(kinds: list[str]) -> list[str]:
    """Consecutive repeats collapsed: many stream events count as one step."""
    return [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]


STATUSES = ("pending", "processing", "done", "failed", "cancelled")

# ---------------------------------------------------------------------------- arguments


runner = CliRunner()


def test_help_lists_every_command() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("dev", "worker", "run", "interrupt", "attach", "runs", "server", "team"):
        assert command in result.output
    result = runner.invoke(app, ["run", "--help"])
    assert result.exit_code == 0
    assert "--no-worker" in result.output and "--json" in result.output


@pytest.mark.parametrize(
    "command",
    [[], ["run"], ["attach"], ["team"], ["team", "drain"], ["server"], ["server", "status"]],
)
def test_dash_h_is_help_everywhere(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "-h"])
    assert result.exit_code == 0, result.output
    assert "Usage: lattice" in result.output and "--help" in result.output


def test_version_and_exit_codes_in_help() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"lattice (agent-lattice) {version('agent-lattice')}\n"
    help_text = " ".join(runner.invoke(app, ["-h"]).output.split())
    for code in ("0 success", "1 the command failed", "2 usage", "3 the Temporal server"):
        assert code in help_text, help_text


COMMANDS = [
    [],
    *([name] for name in ("dev", "worker", "run", "interrupt", "attach", "runs", "setup")),
    *([name] for name in ("approvals", "approve", "deny", "steer", "codec-server")),
    ["server", "status"],
    ["server", "stop"],
    *(["team", name] for name in ("send", "drain", "status", "inbox")),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "lattice")
def test_help_shows_no_bool_type_and_wraps_whole_paragraphs(command: list[str]) -> None:
    width = 100
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output  # a flag takes no value
    # the prose (outside the option panels) is wrapped by the terminal, never by the source:
    # a line ends early only where its paragraph ends
    prose = [
        line.strip()
        for line in result.output.splitlines()
        if not line.lstrip().startswith(("╭", "│", "╰", "Usage:"))
    ]
    for line, following in itertools.pairwise(prose):
        if line and following:
            next_word = following.split()[0]
            assert len(line) + 1 + len(next_word) > width - 2, (line, following)


@pytest.mark.parametrize(
    ("command", "values"),
    [
        (["runs", "--outcome", "bogus"], ["success", "interrupted", "error_max_budget"]),
        (["team", "inbox", "x:crew", "lead", "--status", "nope"], ["pending", "cancelled"]),
    ],
)
def test_an_option_of_fixed_values_refuses_another_naming_them(
    command: list[str], values: list[str]
) -> None:
    result = runner.invoke(app, command, env={"COLUMNS": "100"})
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.replace("│", " ").split())
    assert "is not one of" in said and all(f"'{v}'" in said for v in values), said


def test_missing_arguments_are_usage_errors() -> None:
    result = runner.invoke(app, ["run", TARGET])
    assert result.exit_code == 2
    assert "Missing argument" in result.output


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["run", "no_such_module_xyz:agent", "hi"], "could not import app 'no_such_module_xyz'"),
        (["run", "missing/app.py:agent", "hi"], "app file not found: missing/app.py"),
        (["run", "no-colon-here", "hi"], "expected APP:AGENT"),
        (["run", f"{APP}:nope", "hi"], "has no agent named 'nope'"),
        (["worker", "no_such_module_xyz"], "could not import app"),
    ],
)
def test_bad_app_is_one_red_line(command: list[str], message: str) -> None:
    # These fail before any connection or event loop, so they run in-process.
    result = runner.invoke(app, command)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


# ---------------------------------------------------------------------------- queries


def test_run_json_emits_every_message_in_order(env: dict[str, str], procs: list[Cli]) -> None:
    procs.append(run := Cli.exec("run", TARGET, "What is 2+2?", "--json", env=env))
    assert run.finish() == 0, run
    messages = json_lines(run.out)  # every stdout line is one JSON object
    kinds = [m["type"] for m in messages]
    assert squeeze(kinds) == [
        "system",
        "stream_event",
        "assistant",
        "user",
        "stream_event",
        "assistant",
        "result",
    ]
    assistant = [m for m in messages if m["type"] == "assistant"]
    assert assistant[0]["message"]["content"][0]["name"] == "calculator"
    user = next(m for m in messages if m["type"] == "user")
    assert user["message"]["content"][0]["content"] == "4"
    streamed = "".join(
        m["event"]["delta"]["text"]
        for m in messages
        if m["type"] == "stream_event"
        and m["turn"] == 2
        and m["event"].get("delta", {}).get("type") == "text_delta"
    )
    assert streamed == "The sum is 4."
    result = messages[-1]
    assert result["subtype"] == "success" and result["is_error"] is False
    assert result["result"] == "The sum is 4." and result["num_turns"] == 2
    assert result["usage"]["input_tokens"] > 0
    assert re.search(r"workflow clitest-[0-9a-f]+-1 · run \S+", run.err), run.err


def test_run_prints_a_human_transcript_then_runs_and_attach_find_it(
    env: dict[str, str], procs: list[Cli]
) -> None:
    procs.append(run := Cli.run("run", TARGET, "What is 2+2?", env=env))
    assert run.finish() == 0, run
    assert "serving clitest in this process" in run.err  # nobody else polls this queue
    assert "waiting for" not in run.err  # no spinner: stderr is not a terminal
    header = run.stdout[0]
    assert header.startswith(
        "● clitest · claude-test · tools calculator, Read, Write, Edit, LS, Glob, Grep, Bash"
        " · workflow clitest-"
    )
    workflow_id = re.search(r"workflow (\S+)", header)[1]  # type: ignore[index]
    assert run.stdout[1:4] == ['→ calculator {"expr":"2+2"}', "← 4", "The sum is 4."]
    session = workflow_id.split("-")[1]  # what continues the conversation, said
    assert f"`lattice run {TARGET} PROMPT --session {session}` continues it" in run.err, run
    assert re.fullmatch(
        rf"✓ success · 2 turns · \d+ in / \d+ out tokens · stop end_turn · "
        rf"workflow {workflow_id} · run \S+",
        run.stdout[-1],
    ), run.stdout[-1]

    procs.append(runs := Cli.run("runs", "--limit", "100", env=env))
    procs.append(attach := Cli.run("attach", workflow_id, "--json", env=env))
    assert runs.finish() == 0, runs
    listed = next(line for line in runs.stdout if workflow_id in line)
    assert "completed" in listed and "clitest · claude-test" in listed
    assert attach.finish() == 0, attach
    messages = json_lines(attach.out)
    assert [m["type"] for m in messages] == ["system", "assistant", "user", "assistant", "result"]
    assert messages[0]["agent"] == "clitest"
    assert messages[-1]["result"] == "The sum is 4."


def test_a_spinner_on_a_terminal_says_what_the_run_waits_for(
    env: dict[str, str], fake_anthropic: FakeAnthropicServer, tmp_path: Path
) -> None:
    # each reply's events come slowly: the run waits for the model, then for the tool
    fake_anthropic.set_handler(lambda request: slow(model(request), delay=0.3))
    leader, follower = pty.openpty()  # stderr is a terminal, stdout a file
    out_path = tmp_path / "spinner.out"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent_lattice.cli", "run", TARGET, "What is 2+2?"],
            env={**env, "TERM": "xterm", "PYTHONUNBUFFERED": "1"},
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=follower,
        )
    os.close(follower)
    screen = b""
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], TIMEOUT)
            if not ready:
                raise AssertionError(f"no output for {TIMEOUT}s: {screen!r}")
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the process closed its end
                break
            if not chunk:
                break
            screen += chunk
        assert proc.wait(TIMEOUT) == 0
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
    terminal = screen.decode(errors="replace")
    assert "waiting for claude-test…" in terminal, terminal
    assert "running calculator…" in terminal, terminal
    stdout = out_path.read_text()
    assert "waiting for" not in stdout and "\x1b" not in stdout  # stdout: the transcript only
    assert stdout.splitlines()[1:4] == ['→ calculator {"expr":"2+2"}', "← 4", "The sum is 4."]


def test_worker_process_serves_runs_started_elsewhere(
    env: dict[str, str], procs: list[Cli], fake_anthropic: FakeAnthropicServer
) -> None:
    procs.append(worker := Cli.run("worker", str(APP), env=env))
    procs.append(forbidden := Cli.run("run", TARGET, "What is 2+2?", "--no-worker", env=env))
    queue_name = worker.wait_for(r"task queue (\S+)")[1]
    assert queue_name.startswith(env["LATTICE_TASK_QUEUE_PREFIX"])
    worker.wait_for("ready")
    # --no-worker: only the worker process can have run this query.
    assert forbidden.finish() == 0, forbidden
    assert forbidden.stdout[-1].startswith("✓ success · 2 turns")
    assert "in this process" not in forbidden.err
    # By default, run notices the worker polling the queue and leaves the query to it.
    procs.append(detected := Cli.run("run", TARGET, "What is 2+2?", "--json", env=env))
    assert detected.finish() == 0, detected
    assert "in this process" not in detected.err
    assert json_lines(detected.out)[-1]["result"] == "The sum is 4."
    assert len(fake_anthropic.requests) == 4

    worker.signal(signal.SIGTERM)
    assert worker.finish() == 0, worker
    assert "workers stopped" in worker.err


def test_attach_from_a_third_process_shows_the_live_tokens(
    env: dict[str, str], procs: list[Cli], fake_anthropic: FakeAnthropicServer
) -> None:
    story = "Once upon a time a workflow streamed its story to everyone who attached."
    fake_anthropic.set_handler(lambda request: slow(text(story), delay=0.1))
    procs.append(worker := Cli.run("worker", str(APP), env=env))  # runs the model request
    worker.wait_for("ready")
    procs.append(run := Cli.run("run", TARGET, "Tell a story", "--no-worker", env=env))
    workflow_id = run.wait_for(r"workflow (\S+)")[1]
    procs.append(attach := Cli.run("attach", workflow_id, "--json", env=env))
    assert attach.finish() == 0, attach
    messages = json_lines(attach.out)
    assert squeeze([m["type"] for m in messages]) == [
        "system",
        "stream_event",
        "assistant",
        "result",
    ]
    streamed = "".join(
        m["event"]["delta"]["text"]
        for m in messages
        if m["type"] == "stream_event" and m["event"].get("delta", {}).get("type") == "text_delta"
    )
    assert streamed == story  # every token, once, from the worker's feed
    assert run.finish() == 0, run
    assert story in run.out
    procs.append(plain := Cli.run("attach", workflow_id, "--json", "--no-stream", env=env))
    assert plain.finish() == 0, plain
    assert [m["type"] for m in json_lines(plain.out)] == ["system", "assistant", "result"]
    worker.signal(signal.SIGTERM)
    assert worker.finish() == 0, worker


def test_interrupt_command_and_ctrl_c_end_a_hanging_run(
    env: dict[str, str], procs: list[Cli]
) -> None:
    procs.append(hanging := Cli.run("run", TARGET, WAIT_PROMPT, env=env))
    procs.append(ctrl_c := Cli.run("run", TARGET, WAIT_PROMPT, env=env))
    procs.append(sigterm := Cli.run("run", TARGET, WAIT_PROMPT, env=env))
    workflow_id = hanging.wait_for(r"workflow (\S+)")[1]
    ctrl_c.wait_for(r"workflow (\S+)")
    sigterm.wait_for(r"workflow (\S+)")
    procs.append(attach := Cli.run("attach", workflow_id, env=env))  # a run in progress
    attach.wait_for(f"workflow {workflow_id}")

    procs.append(interrupt := Cli.run("interrupt", workflow_id, env=env))
    ctrl_c.signal(signal.SIGINT)
    sigterm.signal(signal.SIGTERM)  # what systemd, Kubernetes and `timeout` send
    assert interrupt.finish() == 0, interrupt
    assert interrupt.out == f"interrupt sent to {workflow_id} (it was running)"
    assert hanging.finish() == 0, hanging
    assert hanging.stdout[-1].startswith("■ interrupted · 1 turn"), hanging
    assert ctrl_c.finish() == 130, ctrl_c
    assert ctrl_c.stdout[-1].startswith("■ interrupted · 1 turn"), ctrl_c
    assert "Ctrl-C: interrupting" in ctrl_c.err
    assert sigterm.finish() == 143, sigterm  # the interrupted result came within --grace
    assert sigterm.stdout[-1].startswith("■ interrupted · 1 turn"), sigterm
    assert "SIGTERM: interrupting… (waiting up to 10 s" in sigterm.err
    assert "left " not in sigterm.err
    assert attach.finish() == 0, attach
    assert attach.stdout[-1].startswith("■ interrupted · 1 turn"), attach

    procs.append(again := Cli.run("interrupt", workflow_id, env=env))
    assert again.finish() == 0, again
    assert again.out == f"{workflow_id} is not running; nothing to interrupt"


def sleeper(seconds: float) -> Any:
    """A model that has the calculator sleep ``seconds`` (a tool that ignores cancellation:
    an interrupt takes effect once it returns), then answers."""

    def handle(request: RecordedRequest) -> Reply:
        if request.tool_results:
            return text(f"Awake: {request.tool_results[0]['content']}.")
        return tool_use("calculator", {"expr": f"sleep {seconds:g}"})

    return handle


def test_sigterm_leaves_within_the_grace_and_the_run_ends_on_its_worker(
    env: dict[str, str], procs: list[Cli], fake_anthropic: FakeAnthropicServer
) -> None:
    # the finding: a tool in flight holds the interrupt until it returns, and `lattice run`
    # waited with it (for the Bash tool's 10 minutes)
    fake_anthropic.set_handler(sleeper(8))
    procs.append(worker := Cli.run("worker", str(APP), env=env))
    worker.wait_for("ready")
    procs.append(run := Cli.run("run", TARGET, "Sleep a while", "--grace", "2", env=env))
    workflow_id = run.wait_for(r"workflow (\S+)")[1]
    run.wait_for("→ calculator")
    signalled = time.monotonic()
    run.signal(signal.SIGTERM)
    assert run.finish() == 143, run
    assert 2 <= time.monotonic() - signalled < 6, run
    assert "SIGTERM: interrupting… (waiting up to 2 s for the interrupted result" in run.err
    assert f"left {workflow_id} without its interrupted result" in run.err, run
    assert f"Follow it with `lattice attach {workflow_id}`" in run.err, run
    # the run went on on the worker: its tool returned, then the interrupt took effect
    procs.append(attach := Cli.run("attach", workflow_id, env=env))
    assert attach.finish() == 0, attach
    assert "← slept 8 s" in attach.stdout, attach
    assert attach.stdout[-1].startswith("■ interrupted · 1 turn"), attach
    worker.signal(signal.SIGTERM)
    assert worker.finish() == 0, worker


def test_ctrl_c_leaves_a_run_served_here_orphaned_saying_what_adopts_it(
    env: dict[str, str], procs: list[Cli], fake_anthropic: FakeAnthropicServer, lattice_server: str
) -> None:
    fake_anthropic.set_handler(sleeper(30))
    procs.append(run := Cli.run("run", TARGET, "Sleep a while", "--grace", "1", env=env))
    workflow_id = run.wait_for(r"workflow (\S+)")[1]
    run.wait_for("→ calculator")
    signalled = time.monotonic()
    run.signal(signal.SIGINT)
    try:
        assert run.finish() == 130, run
        assert time.monotonic() - signalled < 5, run
        said = " ".join(run.err.split())
        assert "Ctrl-C: interrupting… (waiting up to 1 s" in said
        assert "this process served it, so it is orphaned now" in said, said
        assert "`lattice worker APP` for its app adopts it" in said, said
        assert f"`lattice interrupt --force {workflow_id}`" in said, said
    finally:
        asyncio.run(_terminate(lattice_server, workflow_id))


async def _until_polled(address: str, queue: str) -> None:
    client = await Client.connect(address)
    await assert_eventually(lambda: queue_served(client, queue), within=30)


async def _terminate(address: str, workflow_id: str) -> None:
    client = await Client.connect(address)
    await client.get_workflow_handle(workflow_id).terminate(reason="test over")


def test_detach_starts_the_run_for_the_workers_and_attach_gives_its_result(
    env: dict[str, str], procs: list[Cli]
) -> None:
    procs.append(detached := Cli.run("run", "--detach", TARGET, "What is 2+2?", "--json", env=env))
    assert detached.finish() == 0, detached  # at once: nobody serves the run yet
    (started,) = json_lines(detached.out)
    assert set(started) == {"workflow_id", "run_id"}, started
    workflow_id = started["workflow_id"]
    assert re.fullmatch(r"clitest-[0-9a-f]+-1", workflow_id), workflow_id
    assert "no worker polls task queue" in detached.err, detached  # never served here
    assert "in this process" not in detached.err
    assert f"`lattice attach {workflow_id}`" in detached.err

    procs.append(worker := Cli.run("worker", str(APP), env=env))
    procs.append(attach := Cli.run("attach", workflow_id, "--json", env=env))
    assert attach.finish() == 0, attach
    messages = json_lines(attach.out)
    assert messages[-1]["result"] == "The sum is 4.", attach
    assert messages[-1]["workflow_id"] == workflow_id

    # without --json: the workflow id alone on stdout; a worker polls, so no warning
    procs.append(plain := Cli.run("run", "--detach", TARGET, "What is 2+2?", env=env))
    assert plain.finish() == 0, plain
    assert re.fullmatch(r"clitest-[0-9a-f]+-1", plain.out), plain
    assert "no worker polls" not in plain.err
    procs.append(attach := Cli.run("attach", plain.out, "--json", env=env))
    assert attach.finish() == 0, attach
    assert json_lines(attach.out)[-1]["result"] == "The sum is 4."
    worker.signal(signal.SIGTERM)
    assert worker.finish() == 0, worker


def test_detach_is_never_served_here() -> None:
    result = runner.invoke(app, ["run", "--detach", "--worker", TARGET, "What is 2+2?"])
    assert result.exit_code == 2, result.output
    assert "--detach leaves the run to the app's workers" in " ".join(result.stderr.split())


def test_session_continues_the_conversation(
    env: dict[str, str], procs: list[Cli], fake_anthropic: FakeAnthropicServer
) -> None:
    session = f"cli-{uuid.uuid4().hex[:8]}"
    first_prompt, second_prompt = "What is 2+2?", "And what did I ask before?"
    procs.append(
        first := Cli.run("run", TARGET, first_prompt, "--session", session, "--json", env=env)
    )
    assert first.finish() == 0, first
    assert json_lines(first.out)[-1]["workflow_id"] == f"clitest-{session}-1"
    asked = len(fake_anthropic.requests)
    procs.append(
        second := Cli.run("run", TARGET, second_prompt, "--session", session, "--json", env=env)
    )
    assert second.finish() == 0, second
    assert json_lines(second.out)[-1]["workflow_id"] == f"clitest-{session}-2"
    # the second run's model request carries the first exchange, then the new prompt
    request = fake_anthropic.requests[asked]
    carried = json.dumps(request.messages)
    assert request.messages[0] == {"role": "user", "content": first_prompt}, request.messages[0]
    assert '"expr": "2+2"' in carried and "The sum is 4." in carried
    assert request.last_user_text == second_prompt
    # a session id is a name: anything else is a usage error
    procs.append(bad := Cli.run("run", TARGET, "hi", "--session", "no spaces", env=env))
    assert bad.finish() == 2, bad
    assert "session_id must contain only letters" in bad.err


def test_a_versioned_worker_without_a_current_version_is_the_hint_s_cause(
    env: dict[str, str], procs: list[Cli], lattice_server: str
) -> None:
    deployment = f"clitest-{uuid.uuid4().hex[:8]}"
    procs.append(
        worker := Cli.run(
            "worker", str(APP), "--deployment", deployment, "--build-id", "v1", env=env
        )
    )
    queue = worker.wait_for(r"task queue (\S+)")[1]
    worker.wait_for("ready")
    asyncio.run(_until_polled(lattice_server, queue))
    # the worker polls (so the run is not served here), but new queries go to the
    # deployment's current version, which it does not have yet
    procs.append(run := Cli.run("run", TARGET, "What is 2+2?", env=env))
    command = (
        f"temporal worker deployment set-current-version --deployment-name {deployment} "
        "--build-id v1"
    )
    run.wait_for("set-current-version", stderr=True)
    said = " ".join(run.err.split())
    assert "current version, and it has none" in said and f"`{command}`" in said, run
    assert "is a worker running" not in said and "in this process" not in said
    # what the hint says to do lets the waiting query run
    for _ in range(60):
        done = subprocess.run(
            [
                temporal_binary(),
                *("worker", "deployment", "set-current-version", "--yes"),
                *("--address", lattice_server, "--deployment-name", deployment),
                *("--build-id", "v1"),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode == 0:
            break
        time.sleep(0.5)
    assert done.returncode == 0, done.stderr
    assert run.finish() == 0, run
    assert run.stdout[-1].startswith("✓ success · 2 turns"), run
    worker.signal(signal.SIGTERM)
    assert worker.finish() == 0, worker


def test_an_error_result_exits_1_and_its_run_is_failed(
    env: dict[str, str], procs: list[Cli], fake_anthropic: FakeAnthropicServer
) -> None:
    fake_anthropic.set_handler(Script(error(400, "bad request body")))
    procs.append(run := Cli.run("run", TARGET, "Fail.", "--json", env=env))
    assert run.finish() == 1, run
    result = json_lines(run.out)[-1]
    assert result["subtype"] == "error_during_execution" and "bad request body" in result["result"]
    workflow_id = result["workflow_id"]

    row, code, attached = _listed_and_attached(workflow_id, env, procs)
    assert (row["status"], row["outcome"]) == ("failed", "error_during_execution")
    assert code == 1 and attached[-1] == result


def test_a_temporal_cancel_request_interrupts_a_run_which_ends_canceled(
    env: dict[str, str], procs: list[Cli], lattice_server: str
) -> None:
    """The UI's "Request Cancellation" (here `temporal workflow cancel`) is the interrupt: the
    `lattice run` following it prints the interrupted result, and the run ends Canceled."""
    procs.append(hanging := Cli.run("run", TARGET, WAIT_PROMPT, env=env))
    workflow_id = hanging.wait_for(r"workflow (\S+)")[1]
    argv = ["workflow", "cancel", "--workflow-id", workflow_id, "--address", lattice_server]
    cancel = subprocess.run(
        [temporal_binary(), *argv],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert cancel.returncode == 0, cancel.stderr
    assert hanging.finish() == 0, hanging
    assert hanging.stdout[-1].startswith("■ interrupted · 1 turn"), hanging

    row, code, attached = _listed_and_attached(workflow_id, env, procs)
    assert (row["status"], row["outcome"]) == ("canceled", "interrupted")
    assert code == 0 and attached[-1]["subtype"] == "interrupted"


def _listed_and_attached(
    workflow_id: str, env: dict[str, str], procs: list[Cli]
) -> tuple[dict[str, Any], int, list[dict[str, Any]]]:
    """A closed run as `lattice runs --json` lists it, and `lattice attach --json`'s exit code
    and messages."""
    procs.append(runs := Cli.run("runs", "--limit", "100", "--json", env=env))
    procs.append(attach := Cli.run("attach", workflow_id, "--json", env=env))
    assert runs.finish() == 0, runs
    (row,) = [r for r in json_lines(runs.out) if r["workflow_id"] == workflow_id]
    code = attach.finish()
    return row, code, json_lines(attach.out)


def test_retried_model_request_restarts_its_text(
    env: dict[str, str], procs: list[Cli], fake_anthropic: FakeAnthropicServer
) -> None:
    fake_anthropic.set_handler(
        Script(stream_error(text("Hello wor"), after_events=5), text("Hello world, again."))
    )
    procs.append(run := Cli.run("run", TARGET, "Say hello", env=env))
    assert run.finish() == 0, run
    assert run.stdout[1:4] == [
        "Hello wo",  # attempt 1 broke off here
        "↻ retrying model request (attempt 2)",
        "Hello world, again.",
    ], run
    assert run.stdout[4].startswith("✓ success · 1 turn ·")


def test_renderer_never_continues_a_failed_attempt() -> None:
    console = Console(file=io.StringIO(), width=200, soft_wrap=True)
    renderer = Renderer(console, workflow_id="wf-1")

    def delta(chunk: str, attempt: int) -> StreamEventMessage:
        event = {"type": "content_block_delta", "delta": {"type": "text_delta", "text": chunk}}
        return StreamEventMessage(event=event, session_id="s", turn=1, attempt=attempt)

    lost = SystemMessage(
        subtype="live_feed_lost", session_id="s", turn=1, attempt=1, message="feed 1 cut"
    )
    for message in [
        delta("Hel", 1),
        delta("lo th", 1),
        lost,  # the feed of attempt 1 stopped: said on a line of its own
        delta("Hello", 2),
        delta("stale", 1),  # late event of the failed attempt: dropped
        delta(" world", 2),
        AssistantMessage(
            message=ModelMessage(role="assistant", content=[TextBlock(text="Hello world")]),
            session_id="s",
            turn=1,
        ),
        lost,  # late, its turn shown whole: not said again
        ResultMessage(subtype="success", session_id="s", num_turns=1, run_id="r-1"),
    ]:
        renderer.show(message)
    assert console.file.getvalue().splitlines() == [  # type: ignore[attr-defined]
        "Hello th",
        "⚠ feed 1 cut",
        "↻ retrying model request (attempt 2)",
        "Hello world",
        "✓ success · 1 turn · 0 in / 0 out tokens · stop - · workflow wf-1 · run r-1",
    ]


def test_the_result_line_counts_every_input_token_and_shows_the_cost() -> None:
    console = Console(file=io.StringIO(), width=200, soft_wrap=True)
    usage = Usage(
        input_tokens=100,
        output_tokens=40,
        cache_read_input_tokens=5000,
        cache_creation_input_tokens=200,
    )
    for cost in (0.0123, 0.000054, None):
        Renderer(console).show(
            ResultMessage(
                subtype="success",
                session_id="s",
                num_turns=1,
                stop_reason="end_turn",
                usage=usage,
                total_cost_usd=cost,
            )
        )
    assert console.file.getvalue().splitlines() == [  # type: ignore[attr-defined]
        "✓ success · 1 turn · 5300 in / 40 out tokens · $0.0123 · stop end_turn",
        "✓ success · 1 turn · 5300 in / 40 out tokens · $0.000054 · stop end_turn",
        "✓ success · 1 turn · 5300 in / 40 out tokens · stop end_turn",  # a price unknown
    ]


def test_quickstart_example_runs_without_an_api_key(env: dict[str, str], procs: list[Cli]) -> None:
    env = {k: v for k, v in env.items() if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")}
    target = f"{ROOT / 'examples' / 'quickstart.py'}:agent"
    procs.append(run := Cli.run("run", target, "What is (3 + 4) * 6?", "--json", env=env))
    assert run.finish() == 0, run
    assert "scripted fake model" in run.err
    messages = json_lines(run.out)
    call = next(m for m in messages if m["type"] == "assistant")["message"]["content"][0]
    assert call["input"] == {"expr": "(3 + 4) * 6"}
    assert messages[-1]["result"] == "The calculator says (3 + 4) * 6 = 42."


def test_the_example_app_runs_its_agent_and_its_team(env: dict[str, str], procs: list[Cli]) -> None:
    env = {k: v for k, v in env.items() if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")}
    app_file = "examples/app.py"
    procs.append(agent := Cli.run("run", f"{app_file}:assistant", "What is 6 * 7?", env=env))
    procs.append(team := Cli.run("run", f"{app_file}:team", "Plan the launch", env=env))
    assert agent.finish() == 0, agent
    assert agent.stdout[1:4] == ['→ calculator {"a":6,"op":"*","b":7}', "← 42", "Done: 42."]
    assert team.finish() == 0, team
    out = "\n".join(team.stdout)
    assert "✉ sent launch::lead → launch::writer: Draft the announcement." in out, team
    assert "launch::writer: Announcement drafted" in out
    assert "Launch plan: the writer drafts, we ship on Monday." in out
    procs.append(status := Cli.run("team", "status", f"{app_file}:team", "--json", env=env))
    assert status.finish() == 0, status
    assert [row["mailbox"] for row in json_lines(status.out)] == ["launch::lead", "launch::writer"]


# ---------------------------------------------------------------------------- dev server


def test_dev_ensures_a_server_that_server_commands_report_and_stop(
    tmp_path: Path, procs: list[Cli]
) -> None:
    home = tmp_path / "dev-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    env.update(LATTICE_HOME=str(home), LATTICE_TEST_OUTPUT=str(tmp_path))
    try:
        procs.append(dev := Cli.run("dev", "--port", "0", "--headless", env=env))
        assert dev.finish(60) == 0, dev
        assert dev.stdout[0].startswith("Temporal dev server started (pid ")
        server = DevServer.running(home)
        assert server is not None and f"gRPC  {server.address}" in dev.out
        # The synchronous server commands run in-process.
        status = runner.invoke(app, ["server", "status"], env={"LATTICE_HOME": str(home)})
        assert status.exit_code == 0 and server.address in status.output
        status = runner.invoke(app, ["server", "status", "--json"], env={"LATTICE_HOME": str(home)})
        assert status.exit_code == 0 and json.loads(status.stdout) == {
            "running": True,
            "home": str(home),
            "pid": server.pid,
            "address": server.address,
            "ui_url": None,  # --headless
        }
        stop = runner.invoke(app, ["server", "stop"], env={"LATTICE_HOME": str(home)})
        assert stop.exit_code == 0 and "stopped" in stop.output
        status = runner.invoke(app, ["server", "status"], env={"LATTICE_HOME": str(home)})
        assert status.exit_code == 1 and "no embedded Temporal server" in status.output
        status = runner.invoke(app, ["server", "status", "--json"], env={"LATTICE_HOME": str(home)})
        assert status.exit_code == 1
        assert json.loads(status.stdout) == {"running": False, "home": str(home)}
    finally:
        if (left := DevServer.running(home)) is not None:
            left.stop()


@pytest.mark.parametrize("backend", ["workflow", "sqlite"])
def test_team_commands_send_drain_status_inbox(
    env: dict[str, str],
    procs: list[Cli],
    fake_anthropic: FakeAnthropicServer,
    tmp_path: Path,
    backend: str,
) -> None:
    # each command is its own process: the mailbox outlives them (a workflow, or a file)
    db = "workflow" if backend == "workflow" else str(tmp_path / "team.db")
    env = {**env, "LATTICE_TEST_TEAM_DB": db}
    team = "tests/cli_app.py:crew"

    def helper(request: RecordedRequest) -> Reply:
        prompt = request.messages[-1]["content"]
        if isinstance(prompt, str):
            message_id = prompt.split("message_id: ")[1].split("\n")[0]
            return tool_use("team_reply", {"message_id": message_id, "body": "all set"})
        return text("done")

    fake_anthropic.set_handler(helper)
    procs.append(
        send := Cli.run("team", "send", team, "helper", "set things up", "--from", "lead", env=env)
    )
    assert send.finish() == 0, send
    assert re.match(r"sent msg_\w+ to crew::helper", send.stdout[0])
    if backend == "sqlite":  # as a person reads them
        procs.append(drain := Cli.run("team", "drain", team, env=env))
        assert drain.finish() == 0, drain
        assert re.match(r"handled msg_\w+ in crew::helper: set things up", drain.stdout[0])
        assert "1 message(s) in" in drain.stdout[-1]
        procs.append(status := Cli.run("team", "status", team, env=env))
        assert status.finish() == 0, status
        rows = {line.split()[0]: line.split()[1:] for line in status.stdout if "crew::" in line}
        assert rows["crew::helper"] == ["0", "0", "1", "0", "0"]
        assert rows["crew::lead"] == ["1", "0", "0", "0", "0"]  # the reply waits in the lead's box
        procs.append(inbox := Cli.run("team", "inbox", team, "lead", env=env))
        assert inbox.finish() == 0, inbox
        assert "reply" in inbox.stdout[0] and "from crew::helper: all set" in inbox.stdout[0]
    else:  # as a script reads them: --json, stdout nothing but JSON
        procs.append(drain := Cli.run("team", "drain", team, "--json", env=env))
        assert drain.finish() == 0, drain
        (drained,) = json_lines(drain.out)
        assert drained["failed"] == [] and drained["rounds"] >= 1
        assert [(m["to_mailbox"], m["body"]) for m in drained["processed"]] == [
            ("crew::helper", "set things up")
        ]
        procs.append(status := Cli.run("team", "status", team, "--json", env=env))
        assert status.finish() == 0, status
        assert json_lines(status.out) == [
            {"mailbox": "crew::lead", **dict.fromkeys(STATUSES, 0), "pending": 1},
            {"mailbox": "crew::helper", **dict.fromkeys(STATUSES, 0), "done": 1},
        ]
        procs.append(inbox := Cli.run("team", "inbox", team, "lead", "--json", env=env))
        assert inbox.finish() == 0, inbox
        (reply,) = json_lines(inbox.out)
        assert (reply["kind"], reply["from_mailbox"], reply["body"]) == (
            "reply",
            "crew::helper",
            "all set",
        )
    procs.append(bad := Cli.run("team", "status", "tests/cli_app.py:agent", env=env))
    assert bad.finish() == 2 and "is not a team" in bad.err
    procs.append(nobody := Cli.run("team", "inbox", team, "nobody", env=env))
    assert nobody.finish() == 2, nobody  # a usage error, not an empty mailbox
    assert nobody.err == "error: team 'crew' has no member 'nobody'; its mailboxes: lead, helper"


def test_run_a_team_from_the_shell(
    env: dict[str, str], procs: list[Cli], fake_anthropic: FakeAnthropicServer
) -> None:
    env = {**env, "LATTICE_TEST_TEAM_DB": "workflow"}

    def handle(request: RecordedRequest) -> Reply:
        if "You are boss." in (request.system or ""):
            if len(request.messages) == 1:
                return tool_use("helper", {"mode": "handoff", "task": "count the chairs"})
            return text("Boss: the helper reported")
        return text("12 chairs")

    fake_anthropic.set_handler(handle)
    procs.append(run := Cli.exec("run", "tests/cli_app.py:crew", "How many chairs?", env=env))
    assert run.finish() == 0, run
    out = "\n".join(run.stdout)
    assert "✉ sent crew::lead → crew::helper: count the chairs" in out
    assert "crew::helper: 12 chairs" in out  # the member's own message, nested
    assert "Boss: the helper reported" in out
    (last,) = [r for r in fake_anthropic.requests if len(r.messages) == 3]
    assert "12 chairs" in last.messages[-1]["content"][-1]["text"]  # the report reached the lead


# ---------------------------------------------------------------------------- exit codes


def test_an_unreachable_server_is_exit_code_3_and_one_line_naming_it(
    env: dict[str, str], procs: list[Cli]
) -> None:
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{closed.getsockname()[1]}"
        env = {**env, "TEMPORAL_ADDRESS": address, "LATTICE_RECONNECT_S": "2"}
        procs.append(run := Cli.run("run", TARGET, "What is 2+2?", env=env))
        procs.append(runs := Cli.run("runs", env=env))
        for command in (run, runs):
            assert command.finish() == 3, command  # neither a usage error (2) nor a result (1)
            assert command.stdout == []
            retrying, error = command.stderr
            assert retrying == (
                f"agent-lattice: Temporal server at {address} unreachable, retrying… "
                "(for up to 2 s, LATTICE_RECONNECT_S)"
            )
            # what failed, in words: not Core's nested transport error
            assert error == (
                f"error: could not reach the Temporal server at {address} within 2 s "
                "(LATTICE_RECONNECT_S): connection refused"
            ), command
