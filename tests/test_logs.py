"""Logs an operator can ship: `--log-level`/`--log-format` (and LATTICE_LOG_LEVEL/FORMAT) on
the long-running commands, `create_worker`/`Runtime.connect`'s log options, one line per
record (text or one JSON object) naming the run, and a worker's start at INFO.

The worker tests run real `lattice worker` processes (the telemetry app) against the session's
Temporal server and the fake model, reading their stderr line by line.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import test_telemetry
from test_telemetry import APP, ROOT, lattice

from agent_lattice.testing import RecordedRequest, Reply, error, text
from agent_lattice.tracing import _logs
from agent_lattice.worker import create_worker

from conftest import by_agent

env = test_telemetry.env  # the fixture: the CLI processes' server, queues and fake model

# enough tokens for a cost of cents at the lead's prices (USD per million: input 1, output 2)
BIG_USAGE = {"input_tokens": 2300, "output_tokens": 5000}
REJECTED = "prompt is too long: 210000 tokens > 200000 maximum"


class LoggingWorker:
    """A `lattice worker` process whose stdout and stderr are read apart."""

    def __init__(self, env: dict[str, str], *args: str, ready_on: str | None = "stderr") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agent_lattice.cli", "worker", str(APP), *args],
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.err: list[str] = []
        self.out: list[str] = []
        # "ready" is said on stdout by a text worker, logged on stderr by a JSON one
        if ready_on is None:  # it says nothing at its level: the first query waits for it
            return
        said = self.proc.stderr if ready_on == "stderr" else self.proc.stdout
        kept = self.err if ready_on == "stderr" else self.out
        for line in said:  # type: ignore[union-attr]
            kept.append(line)
            if "ready" in line:
                return
        raise AssertionError(f"the worker exited: {''.join(kept)}")

    def stop(self) -> tuple[str, list[str]]:
        """Its stdout, and every stderr line."""
        self.proc.send_signal(signal.SIGTERM)
        out, rest = self.proc.communicate(timeout=30)
        return "".join(self.out) + out, [*self.err, *rest.splitlines(keepends=True)]


@pytest.fixture
def workers() -> Iterator[list[LoggingWorker]]:
    started: list[LoggingWorker] = []
    yield started
    for worker in started:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.communicate(timeout=10)


def script(fake: Any) -> None:
    """The lead answers "Add things." with a reply that costs cents; any other prompt is
    refused by the provider (a 400)."""

    def lead(request: RecordedRequest) -> Reply:
        prompt = request.messages[0]["content"]
        prompt = prompt if isinstance(prompt, str) else prompt[0]["text"]
        if "Add things" in prompt:
            return text("4", usage=BIG_USAGE)
        return error(400, REJECTED)

    fake.set_handler(by_agent(lead=lead))


def test_a_worker_logs_json_lines_naming_the_run(env, workers, fake_anthropic):
    script(fake_anthropic)
    workers.append(worker := LoggingWorker(env, "--log-format", "json"))
    # the footer of a query that cost something says what: 2300 input, 5000 output tokens
    done = lattice(env, "run", f"{APP}:crew", "Add things.", "--no-worker")
    assert done.returncode == 0, done.stdout + done.stderr
    footer = done.stdout.splitlines()[-1]
    assert footer.startswith("✓ success · 1 turn · 2300 in / 5000 out tokens · $0.0123 · "), footer
    refused = lattice(env, "run", f"{APP}:crew", "Read the whole repository.", "--no-worker")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    out, lines = worker.stop()
    assert out == ""  # what a text worker prints on stdout is logged instead
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    for record in records:
        assert {"time", "level", "logger", "message"} <= record.keys(), record
        assert record["time"].endswith("Z")
    # the worker's start, at INFO: server, namespace, task queue, build
    starts = [r for r in records if r["message"].startswith("worker started")]
    assert starts and all(r["level"] == "info" for r in starts)
    lead = next(r for r in starts if r["serves"] == "lead")
    assert lead["task_queue"].endswith(".lattice.lead." + lead["task_queue"].rsplit(".", 1)[1])
    assert lead["server"] == env["TEMPORAL_ADDRESS"] and lead["namespace"] == "default"
    assert lead["build_id"].startswith("agent-lattice-")
    assert any(r["message"].startswith("ready") for r in records)
    # the provider's refusal: one record, its run named, the error a field
    (failed,) = [r for r in records if r["message"] == "Completing activity as failed"]
    assert failed["level"] == "warning" and failed["logger"] == "temporalio.activity"
    assert failed["workflow_id"].startswith("lead-") and failed["run_id"]
    assert failed["activity"] == "lattice.model_request" and failed["attempt"] == 1
    assert failed["agent"] == "lead"
    assert failed["error"] == f"ApplicationError: ProviderRejected: {REJECTED}"
    assert "Traceback" in failed["exc_info"]  # the traceback is a field, not lines


def test_a_text_worker_says_its_start_and_a_failure_on_one_line(env, workers, fake_anthropic):
    script(fake_anthropic)
    # text, INFO: the defaults of `worker`
    workers.append(worker := LoggingWorker(env, ready_on="stdout"))
    refused = lattice(env, "run", f"{APP}:crew", "Read the whole repository.", "--no-worker")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    out, lines = worker.stop()
    assert "ready · Ctrl-C to stop" in out
    assert any(
        " INFO agent_lattice.worker: worker started: lead on task queue " in x for x in lines
    )
    (failed,) = [x for x in lines if "Completing activity as failed" in x]
    assert (
        " WARNING temporalio.activity: Completing activity as failed: ApplicationError: " in failed
    )
    assert "activity=lattice.model_request" in failed and "agent=lead" in failed
    assert "workflow_id=lead-" in failed
    assert not any("Traceback" in x for x in lines)


def test_log_options_come_from_the_environment_too(env, workers, fake_anthropic):
    script(fake_anthropic)
    quiet = {**env, "LATTICE_LOG_LEVEL": "warning", "LATTICE_LOG_FORMAT": "json"}
    workers.append(worker := LoggingWorker(quiet, ready_on=None))
    refused = lattice(env, "run", f"{APP}:crew", "Read the whole repository.", "--no-worker")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    out, lines = worker.stop()
    assert out == ""
    records = [json.loads(line) for line in lines]
    assert [r["message"] for r in records] == ["Completing activity as failed"]


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--log-level", "loud", "log level 'loud': not one of debug, info, warning"),
        ("--log-format", "xml", "log format 'xml': not one of text, json"),
    ],
)
def test_a_bad_log_option_is_a_usage_error(env, flag, value, said):
    done = lattice(env, "run", f"{APP}:crew", "Hi", flag, value)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr


@pytest.fixture
def root_logging() -> Iterator[None]:
    """Whatever the test sets up is undone: the root logger's handlers and level, Temporal's
    loggers, and what `_logs` remembers."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    _logs._CONFIGURED[0] = None


def _record(**extra: Any) -> logging.LogRecord:
    try:
        raise ValueError("bad\ninput")
    except ValueError:
        exc_info = sys.exc_info()
    record = logging.LogRecord("x.y", logging.WARNING, __file__, 1, "it %s", ("failed",), exc_info)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_a_json_record_is_one_line_with_the_run_and_the_error_as_fields():
    details = {
        "activity_id": "3",
        "activity_type": "lattice.tool_call",
        "attempt": 2,
        "namespace": "default",
        "task_queue": "q",
        "workflow_id": "wf",
        "workflow_run_id": "run",
        "workflow_type": "AgentWorkflow",
    }
    record = _record(temporal_activity=details, tool="Bash")
    record.msg = f"it %s ({details})"  # as Temporal's activity.logger appends them
    line = _logs.JsonFormatter().format(record)
    assert "\n" not in line
    record = json.loads(line)
    assert record["message"] == "it failed" and record["level"] == "warning"
    assert record["logger"] == "x.y"
    assert (record["workflow_id"], record["run_id"], record["activity"]) == (
        "wf",
        "run",
        "lattice.tool_call",
    )
    assert record["attempt"] == 2 and record["tool"] == "Bash"
    assert record["error"] == "ValueError: bad input"
    assert (
        record["exc_info"].startswith("Traceback")
        and "ValueError: bad\ninput" in record["exc_info"]
    )
    assert "temporal_activity" not in record


def test_a_text_record_is_one_line_unless_tracebacks_are_asked_for():
    run = {
        "workflow_id": "wf",
        "run_id": "run",
        "workflow_type": "AgentWorkflow",
        "task_queue": "q",
    }
    line = _logs.TextFormatter().format(_record(temporal_workflow=run))
    assert "\n" not in line
    assert line.endswith(
        "WARNING x.y: it failed: ValueError: bad input "
        "[workflow_id=wf run_id=run workflow_type=AgentWorkflow task_queue=q]"
    )
    assert "Traceback" in _logs.TextFormatter(tracebacks=True).format(_record())


async def test_create_worker_and_connect_set_logging_up_when_asked(
    lattice_runtime, root_logging, monkeypatch
):
    monkeypatch.delenv("LATTICE_LOG_LEVEL", raising=False)
    monkeypatch.delenv("LATTICE_LOG_FORMAT", raising=False)
    before = list(logging.getLogger().handlers)
    create_worker(lattice_runtime.client, [], task_queue="logs-untouched")
    assert logging.getLogger().handlers == before  # not asked: the host's logging stays
    create_worker(lattice_runtime.client, [], task_queue="logs-json", log_format="json")
    (ours,) = [h for h in logging.getLogger().handlers if getattr(h, "lattice_logs", False)]
    assert isinstance(ours.formatter, _logs.JsonFormatter)
    assert logging.getLogger().level == logging.INFO
    # a level given later keeps the format; the variables do not override what was set up
    monkeypatch.setenv("LATTICE_LOG_FORMAT", "text")
    _logs.configure_if_asked("debug", None)
    (ours,) = [h for h in logging.getLogger().handlers if getattr(h, "lattice_logs", False)]
    assert isinstance(ours.formatter, _logs.JsonFormatter)
    assert logging.getLogger().level == logging.DEBUG
