"""OpenTelemetry traces and Prometheus metrics of queries run by `lattice worker` processes.

The worker and the query's client are separate processes (so the test process sets no
tracer provider); their spans reach an OTLP/HTTP receiver in this test, which decodes them
with opentelemetry-proto, and the worker's metrics are scraped from its Prometheus endpoint.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from agent_lattice import ConfigurationError, create_runtime
from agent_lattice.client import Runtime
from agent_lattice.testing import (
    FakeAnthropicServer,
    RecordedRequest,
    Reply,
    error,
    message,
    slow,
    text,
    tool_use_block,
)

from conftest import by_agent

ROOT = Path(__file__).parent.parent
APP = Path(__file__).parent / "telemetry_app.py"


class OtlpReceiver:
    """An OTLP/HTTP trace endpoint: keeps every span it is sent, as plain dicts."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        spans, lock = self.spans, threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
                with lock:
                    spans.extend(_spans(request))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def _spans(request: ExportTraceServiceRequest) -> Iterator[dict[str, Any]]:
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield {
                    "name": span.name,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_id": span.parent_span_id.hex() or None,
                    "service": resource.get("service.name"),
                    "attributes": {a.key: _value(a.value) for a in span.attributes},
                }


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def env(lattice_server, task_queue_prefix, fake_anthropic, tmp_path) -> dict[str, str]:
    """What the CLI processes share: the test's server, queue namespace and fake model."""
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": lattice_server,
        "LATTICE_HOME": str(tmp_path / "home"),
        "LATTICE_TASK_QUEUE_PREFIX": task_queue_prefix,
        "ANTHROPIC_BASE_URL": fake_anthropic.base_url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # export spans soon after they end
    }


class Worker:
    """A `lattice worker` process serving the telemetry app."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agent_lattice.cli", "worker", str(APP), *args],
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.output: list[str] = []
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.output.append(line)
            if "ready" in line:
                return
        raise AssertionError(f"the worker exited: {''.join(self.output)}")

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rest, _ = self.proc.communicate(timeout=30)
        return "".join(self.output) + rest


@pytest.fixture
def start_worker(env: dict[str, str]) -> Iterator[Any]:
    started: list[Worker] = []

    def start(*args: str, **extra_env: str) -> Worker:
        started.append(worker := Worker({**env, **extra_env}, *args))
        return worker

    yield start
    for worker in started:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.communicate(timeout=10)


def lattice(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """A `lattice` command, run to its end."""
    return subprocess.run(
        [sys.executable, "-m", "agent_lattice.cli", *args],
        env=env,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
    )


def lattice_run(env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    """`lattice run ... --json --no-worker` (the worker process serves the query)."""
    done = lattice(env, "run", *args, "--json", "--no-worker")
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def listed(env: dict[str, str], agent: str, workflow_id: str) -> dict[str, Any]:
    """A run as `lattice runs --json` lists it, once its search attributes have its outcome
    (visibility lags a little behind the run)."""

    def indexed() -> dict[str, Any]:
        done = lattice(env, "runs", "--agent", agent, "--limit", "100", "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        rows = [json.loads(line) for line in done.stdout.splitlines()]
        row = next((r for r in rows if r["workflow_id"] == workflow_id), None)
        assert row is not None and row["outcome"] is not None, rows
        return row

    return wait_for(indexed, within=30)


def team_script(fake: FakeAnthropicServer) -> None:
    """The lead calls the calculator, delegates to the explorer and hands off to the writer
    in one batch, then answers; every reply has cache tokens."""

    def lead(request: RecordedRequest) -> Reply:
        if len(request.messages) == 1:
            return message(
                [
                    tool_use_block("calculator", {"expr": "2+2"}),
                    tool_use_block("explore", {"mode": "ask", "task": "Find the runner."}),
                    tool_use_block("writer", {"mode": "handoff", "task": "Draft the notes."}),
                ],
                stop_reason="tool_use",
                usage=USAGE,
            )
        return text("All done.", usage=USAGE)

    fake.set_handler(
        by_agent(
            lead=lead,
            explorer=lambda r: text("runner.py", usage=USAGE),
            writer=lambda r: text("notes drafted", usage=USAGE),
        )
    )


USAGE = {
    "input_tokens": 11,
    "output_tokens": 7,
    "cache_read_input_tokens": 5,
    "cache_creation_input_tokens": 3,
}


def wait_for(check: Any, within: float = 60.0) -> Any:
    deadline = time.monotonic() + within
    while True:
        try:
            value = check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        else:
            return value
        time.sleep(0.1)


def ancestors(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    chain = []
    while span["parent_id"] is not None:
        span = by_id[span["parent_id"]]
        chain.append(span)
    return chain


def test_one_query_is_one_trace_across_processes(otlp, env, start_worker, fake_anthropic):
    team_script(fake_anthropic)
    traced = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint}
    worker = start_worker("--otel", **traced, OTEL_SERVICE_NAME="lattice-worker")
    # the client turns tracing on by the environment alone
    client_env = {**env, **traced, "LATTICE_OTEL": "1", "OTEL_SERVICE_NAME": "lattice-client"}
    messages = lattice_run(client_env, f"{APP}:crew", "Plan the release.")
    assert messages[-1]["subtype"] == "success" and messages[-1]["result"] == "All done."

    def complete() -> list[dict[str, Any]]:
        spans = list(otlp.spans)
        chats = [s for s in spans if s["name"] == "chat claude-test"]
        agents = sorted(s["attributes"]["gen_ai.agent.name"] for s in chats)
        assert agents == ["explorer", "lead", "lead", "writer"], agents
        names = {s["name"] for s in spans}
        assert {"RunWorkflow:TeamWorkflow", "execute_tool calculator"} <= names, names
        return spans

    spans = wait_for(complete)
    worker.stop()
    by_id = {s["span_id"]: s for s in spans}
    # one trace: every span in it, each linked to a parent that was exported too
    assert {s["trace_id"] for s in spans} == {spans[0]["trace_id"]}
    roots = [s for s in spans if s["parent_id"] is None]
    assert [r["service"] for r in roots] == ["lattice-client"], roots
    assert all(s["parent_id"] in by_id for s in spans if s["parent_id"] is not None)
    assert {s["service"] for s in spans} == {"lattice-client", "lattice-worker"}

    # the anthropic SDK's own span of each model request, inside its chat span, and the
    # request carries the trace on to the provider
    calls = [s for s in spans if s["name"] == "anthropic.messages.create"]
    assert len(calls) == 4 and all(
        by_id[c["parent_id"]]["name"] == "chat claude-test" for c in calls
    )
    assert all("traceparent" in r.headers for r in fake_anthropic.requests)
    chats = {s["attributes"]["gen_ai.agent.name"]: s for s in spans if s["name"].startswith("chat")}
    runs = {
        agent: next(a for a in ancestors(chat, by_id) if a["name"].startswith("RunWorkflow"))
        for agent, chat in chats.items()
    }
    team_run = next(s for s in spans if s["name"] == "RunWorkflow:TeamWorkflow")
    # the team runs the lead and its members; the lead's delegate runs inside the lead's run
    assert team_run in ancestors(runs["lead"], by_id)
    assert team_run in ancestors(runs["writer"], by_id)
    assert runs["lead"] in ancestors(runs["explorer"], by_id)
    # the lead's handoff reaches the team in the same trace
    handoff = next(s for s in spans if s["name"] == "HandleSignal:handoff")
    assert runs["lead"] in ancestors(handoff, by_id) and handoff["service"] == "lattice-worker"
    # one invoke_agent span per query (the lead's, its delegate's, the member's work), each
    # query's chat spans beneath its own
    invocations = [s for s in spans if s["name"].startswith("invoke_agent")]
    assert sorted(s["name"] for s in invocations) == [
        "invoke_agent explorer",
        "invoke_agent lead",
        "invoke_agent writer",
    ]
    for agent, chat in chats.items():
        mine = next(s for s in ancestors(chat, by_id) if s["name"].startswith("invoke_agent"))
        assert mine["name"] == f"invoke_agent {agent}"
        assert mine["attributes"]["gen_ai.operation.name"] == "invoke_agent"
    writer = next(s for s in invocations if s["name"] == "invoke_agent writer")["attributes"]
    assert writer["gen_ai.usage.input_tokens"] == 19  # 11 fresh, 5 cache-read, 3 cache-written
    assert writer["gen_ai.usage.output_tokens"] == 7
    assert writer["lattice.result.subtype"] == "success"
    # the same figure in the writer's search attributes (what `lattice runs` shows)
    writer_id = runs["writer"]["attributes"]["temporalWorkflowID"]
    assert listed(env, "writer", writer_id)["input_tokens"] == 19
    model = chats["writer"]["attributes"]
    assert model["gen_ai.system"] == "anthropic"
    assert model["gen_ai.operation.name"] == "chat"
    assert model["gen_ai.request.model"] == "claude-test"
    # the conventions count cache reads and writes in the input tokens
    assert model["gen_ai.usage.input_tokens"] == 19
    assert model["gen_ai.usage.output_tokens"] == 7
    assert model["gen_ai.usage.cache_read.input_tokens"] == 5
    assert model["gen_ai.usage.cache_creation.input_tokens"] == 3
    assert model["gen_ai.response.finish_reasons"] == ["end_turn"]
    calculator = next(s for s in spans if s["name"] == "execute_tool calculator")
    assert calculator["attributes"]["gen_ai.tool.name"] == "calculator"
    assert runs["lead"] in ancestors(calculator, by_id)


def scrape(port: int) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a Prometheus text endpoint: (name, labels, value)."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    samples = []
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        pairs = {}
        for pair in labels.rstrip("}").split(","):
            if pair:
                key, _, quoted = pair.partition("=")
                pairs[key] = quoted.strip('"')
        samples.append((name, pairs, float(value)))
    return samples


def sample(samples, name: str, **labels: str) -> float:
    found = [v for n, ls, v in samples if n == name and labels.items() <= ls.items()]
    assert found, f"no {name} {labels}; names: {sorted({n for n, _, _ in samples})}"
    return sum(found)


def test_worker_metrics_count_requests_tokens_tools_and_outcomes(env, start_worker, fake_anthropic):
    calls = iter(range(100))

    def lead(request: RecordedRequest) -> Reply:
        if next(calls) == 0:
            return error(500, "try again")  # the first attempt fails: one retry
        if len(request.messages) == 1:
            return message(
                [
                    tool_use_block("calculator", {"expr": "2+2"}, id="toolu_1"),
                    tool_use_block("calculator", {"expr": "two"}, id="toolu_2"),
                ],
                stop_reason="tool_use",
                usage=USAGE,
            )
        return text("4, and two is no number.", usage=USAGE)

    fake_anthropic.set_handler(by_agent(lead=lead))
    port = _free_port()
    worker = start_worker("--metrics-port", str(port), OTEL_SERVICE_NAME="billing-agents")
    messages = lattice_run(env, f"{APP}:crew", "Add things.")
    result = messages[-1]
    assert result["subtype"] == "success"

    def counted() -> list[tuple[str, dict[str, str], float]]:
        samples = scrape(port)
        assert sample(samples, "lattice_queries", agent="lead", subtype="success") == 1
        return samples

    samples = wait_for(counted)
    worker.stop()
    lead_model = {"agent": "lead", "model": "claude-test"}
    assert sample(samples, "lattice_model_requests", **lead_model) == 3
    assert sample(samples, "lattice_model_request_retries", **lead_model) == 1
    assert sample(samples, "lattice_model_request_errors", **lead_model) == 1
    # input tokens as the GenAI conventions count them, cache reads and writes included: the
    # result's figure; the cache's part of them apart
    assert sample(samples, "lattice_tokens", **lead_model, type="input") == 2 * 19
    assert sample(samples, "lattice_tokens", **lead_model, type="output") == 2 * 7
    assert result["total_input_tokens"] == 2 * 19 and result["usage"]["input_tokens"] == 2 * 11
    # its search attribute
    assert listed(env, "lead", result["workflow_id"])["input_tokens"] == 2 * 19
    assert sample(samples, "lattice_cache_tokens", **lead_model, type="cache_read") == 2 * 5
    assert sample(samples, "lattice_cache_tokens", **lead_model, type="cache_creation") == 2 * 3
    assert sample(samples, "lattice_tool_calls", agent="lead", tool="calculator") == 2
    assert sample(samples, "lattice_tool_errors", agent="lead", tool="calculator") == 1
    # the query's duration in seconds, in buckets from half a second to hours
    took = {"agent": "lead", "subtype": "success"}
    assert sample(samples, "lattice_query_duration_seconds_count", **took) == 1
    assert 0 < sample(samples, "lattice_query_duration_seconds_sum", **took) < 60
    duration_buckets = buckets(samples, "lattice_query_duration_seconds", **took)
    assert duration_buckets[0] == 0.5 and 3600 in duration_buckets
    # each reply's cost (11 input, 7 output, 3 cache-write, 5 cache-read tokens at the lead's
    # prices): the failed attempt had none; in buckets from a hundredth of a cent to $100
    assert sample(samples, "lattice_cost_usd_count", **lead_model) == 2
    assert sample(samples, "lattice_cost_usd_sum", **lead_model) == pytest.approx(2 * 54e-6)
    cost_buckets = buckets(samples, "lattice_cost_usd", **lead_model)
    assert cost_buckets[0] == 0.0001 and cost_buckets[-1] == 100
    assert sample(samples, "lattice_cost_usd_bucket", **lead_model, le="0.0001") == 2
    # Temporal Core's own metrics on the same endpoint, its durations in seconds too
    assert sample(samples, "temporal_workflow_completed", workflow_type="AgentWorkflow") >= 1
    assert sample(samples, "temporal_activity_execution_failed") >= 1
    assert sample(samples, "temporal_activity_execution_latency_seconds_count") >= 1
    assert not [n for n, _, _ in samples if n.startswith("lattice_query_duration_bucket")]
    # every series names the worker's service, as its spans do
    assert {ls.get("service_name") for _, ls, _ in samples} == {"billing-agents"}


def test_an_interrupted_request_counts_the_tokens_it_streamed(env, start_worker, fake_anthropic):
    # a reply streamed slowly: its message_start (1234 input tokens, 100 of them read from
    # the cache) comes at once, its text long after
    story = "Once upon a time, " * 20
    usage = {"input_tokens": 1134, "cache_read_input_tokens": 100, "output_tokens": 500}
    fake_anthropic.set_handler(by_agent(explorer=lambda r: slow(text(story, usage=usage), delay=3)))
    port = _free_port()
    start_worker("--metrics-port", str(port))
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent_lattice.cli",
            "run",
            f"{APP}:explorer",
            "Tell a story.",
            "--json",
            "--no-worker",
        ],
        env=env,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        workflow_id = None
        for line in run.stdout:  # type: ignore[union-attr]
            said = json.loads(line)
            workflow_id = workflow_id or said.get("workflow_id")
            if said["type"] == "stream_event" and said["event"]["type"] == "message_start":
                break
        assert workflow_id is not None
        done = lattice(env, "interrupt", workflow_id)
        assert done.returncode == 0, done.stdout + done.stderr
        out, _ = run.communicate(timeout=60)
    finally:
        run.kill()
    result = json.loads(out.splitlines()[-1])
    assert result["subtype"] == "interrupted"
    # the result counts them too: one usage figure in the result and the metrics
    assert result["usage"]["input_tokens"] == 1134
    assert result["usage"]["cache_read_input_tokens"] == 100
    assert result["usage"]["output_tokens"] == 1

    def counted() -> list[tuple[str, dict[str, str], float]]:
        samples = scrape(port)
        assert sample(samples, "lattice_tokens", agent="explorer", type="input") == 1234
        return samples

    # the request learns it was cut off at its next heartbeat (10 s), then counts
    samples = wait_for(counted, within=45)
    assert sample(samples, "lattice_cache_tokens", agent="explorer", type="cache_read") == 100
    assert sample(samples, "lattice_tokens", agent="explorer", type="output") == 1


def buckets(samples, name: str, **labels: str) -> list[float]:
    """The upper bounds of a histogram's buckets (without +Inf), in order."""
    bounds = {
        float(ls["le"])
        for n, ls, _ in samples
        if n == f"{name}_bucket" and labels.items() <= ls.items() and ls["le"] != "+Inf"
    }
    assert bounds, f"no {name} buckets {labels}"
    return sorted(bounds)


@pytest.mark.parametrize("connect", [Runtime.connect, create_runtime], ids=["connect", "create"])
async def test_otel_without_the_extra_names_it(lattice_server, monkeypatch, connect):
    # what an install without the `otel` extra lacks
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace.export", None)
    with pytest.raises(ConfigurationError, match=r"agent-lattice\[otel\]"):
        await connect(lattice_server, otel=True)


async def test_create_runtime_connects_like_runtime_connect(lattice_server, task_queue_prefix):
    runtime = await create_runtime(lattice_server, inline_workers=False)
    try:
        assert isinstance(runtime, Runtime) and not runtime.inline_workers
        await runtime.client.count_workflows()  # connected
    finally:
        await runtime.close()


async def test_metrics_port_is_decided_by_the_first_connect(lattice_runtime, lattice_server):
    # the session's runtimes share this process's Temporal runtime, made without metrics
    with pytest.raises(ConfigurationError, match=r"metrics_port=9464: .* without metrics"):
        await Runtime.connect(lattice_server, metrics_port=9464)


def test_a_metrics_port_that_is_no_number_is_refused(env):
    done = lattice({**env, "LATTICE_METRICS_PORT": "nine"}, "worker", str(APP))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "LATTICE_METRICS_PORT='nine' is not a port number" in done.stderr
