"""Per-turn overhead of the durable agent loop against a zero-latency model.

Run: ``python bench/turn_overhead.py`` (``--help`` for options). Every section starts its own
dev servers in a temporary ``LATTICE_HOME`` and stops them at the end.

A "turn" is one model request plus (except on the last turn) one call of a trivial tool. The
model is a :class:`ModelClient` answering instantly in process (no HTTP): ``tool_use`` for
turns < N, final text at turn N. Per-turn durations come from the workflow history: the gaps
between the ``ActivityTaskScheduled`` events of successive model requests. The baselines are
bare workflows (``_workflows.py``) running N sequential trivial activities or local
activities; per-activity durations are the gaps between successive activity starts, taken in
the worker (local activity markers all share one workflow task's timestamp).

Variants of one table run interleaved (repeat r of every variant, then repeat r+1), so load
from other processes on the machine spreads over all of them alike.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import (
    CpuMeter,
    HistoryFigures,
    Server,
    diffs_ms,
    emit,
    history_figures,
    lattice_home,
    median,
    note,
    pct,
    start_custom_server,
    start_library_server,
    table,
)
from _workflows import BareActivities, BareActivitiesStartWait, BareLocalActivities
from pydantic import BaseModel
from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.runtime import LogForwardingConfig, LoggingConfig, TelemetryConfig, TelemetryFilter
from temporalio.runtime import Runtime as TemporalRuntime
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

import agent_lattice.client._runtime as runtime_module
from agent_lattice import ResultMessage, create_agent, tool
from agent_lattice._messages import ModelMessage, TextBlock, ToolUseBlock, Usage
from agent_lattice.activities import AgentActivities
from agent_lattice.activities._registry import AgentRegistry
from agent_lattice.client import Runtime
from agent_lattice.providers import ModelRequest
from agent_lattice.worker._plugin import LatticePlugin
from agent_lattice.workflows import AgentWorkflow
from agent_lattice.workflows._contract import ActivityName
from agent_lattice.workflows._refs import agent_ref, workflow_id_for
from agent_lattice.workflows._types import ActivitySettings, AgentRunInput

MODEL_ACTIVITY = ActivityName.MODEL_REQUEST.value
TOOL_ACTIVITY = ActivityName.TOOL_CALL.value
RPS_1000 = "history.transferProcessorMaxPollRPS=1000"
EAGER = "system.enableActivityEagerExecution=true"
WAL = ("journal_mode=WAL", "synchronous=NORMAL")

# -- the zero-latency model and the trivial tool -----------------------------------------


# Wall-clock times at which the worker started each model request / tool call, by run id.
MODEL_STARTS: dict[str, list[float]] = {}
TOOL_STARTS: dict[str, list[float]] = {}


class ZeroLatencyModel:
    """Answers at once: ``tool_use`` for turns < N, text at turn N.

    The prompt is ``turns=N run=ID``; the run id tags the tool inputs too, so the benchmark
    knows when the worker started each model request and tool call of a run.
    """

    async def create(self, request: ModelRequest, *, on_event: Any = None) -> ModelMessage:
        spec = dict(part.split("=", 1) for part in request.messages[0].text.split())
        turns, run = int(spec["turns"]), spec["run"]
        MODEL_STARTS.setdefault(run, []).append(time.time())
        turn = 1 + sum(1 for m in request.messages if m.role == "assistant")
        usage = Usage(input_tokens=10, output_tokens=5)
        if turn < turns:
            use = ToolUseBlock(id=f"toolu_{turn:04d}", name="step", input={"i": turn, "run": run})
            return ModelMessage(
                role="assistant", content=[use], stop_reason="tool_use", usage=usage
            )
        return ModelMessage(
            role="assistant", content=[TextBlock(text="done")], stop_reason="end_turn", usage=usage
        )


class Step(BaseModel):
    i: int
    run: str = ""


async def step(input: Step) -> str:
    TOOL_STARTS.setdefault(input.run, []).append(time.time())
    return f"step {input.i} ok"


MODEL = ZeroLatencyModel()


def make_agent(task_queue: str, *, cheap: bool) -> Any:
    return create_agent(
        model="zero-latency",
        name="bench-cheap" if cheap else "bench",
        tools=[tool("step", "One step of work", Step, step, cheap=cheap)],
        model_client=MODEL,
        max_turns=100_000,
        task_queue=task_queue,
    )


# -- one run and its figures -------------------------------------------------------------


@dataclass
class Run:
    label: str
    n: int
    wall_ms: float
    figures: HistoryFigures | None
    steps: list[float]  # per-turn (agent) or per-activity (bare) durations, in order
    py_cpu_ms: float = float("nan")  # per step
    server_cpu_ms: float = float("nan")  # per step


HEADERS = [
    "variant",
    "N",
    "wall ms",
    "per-step med ms",
    "p90",
    "max",
    "first 10 med",
    "last 10 med",
    "py CPU ms/step",
    "server CPU ms/step",
    "events",
    "history KiB",
]


def summarize(runs: Sequence[Run]) -> list[object]:
    """One table row from the repeats of one configuration."""
    first = runs[0]
    steps = [d for r in runs for d in r.steps]
    head = [d for r in runs for d in r.steps[:10]]
    tail = [d for r in runs for d in r.steps[-10:]]
    figures = [r.figures for r in runs if r.figures is not None]
    return [
        first.label,
        first.n,
        median([r.wall_ms for r in runs]),
        median(steps),
        pct(steps, 0.9),
        max(steps) if steps else float("nan"),
        median(head),
        median(tail),
        median([r.py_cpu_ms for r in runs]),
        median([r.server_cpu_ms for r in runs]),
        figures[0].events if figures else "-",
        f"{figures[0].bytes / 1024:.1f}" if figures else "-",
    ]


SEG_HEADERS = [
    "variant",
    "activity",
    "scheduled→runs",
    "runs→completed",
    "completed→WFT started",
    "WFT started→completed",
    "sum",
    "WFTs",
    "updates",
]


def breakdown(runs: Sequence[Run]) -> list[list[object]]:
    """Median history segments of each activity type over the repeats of one configuration."""
    rows: list[list[object]] = []
    figures = [r.figures for r in runs if r.figures is not None]
    if not figures:
        return rows
    kinds = sorted({k for f in figures for k in f.segments})
    for kind in kinds:
        segs = [s for f in figures for s in f.segments.get(kind, [])]
        parts = [
            median([s.dispatch for s in segs]),
            median([s.run for s in segs]),
            median([s.wft_dispatch for s in segs]),
            median([s.wft for s in segs]),
        ]
        rows.append(
            [
                runs[0].label,
                kind,
                *parts,
                sum(parts),
                figures[0].count("WORKFLOW_TASK_COMPLETED"),
                figures[0].count("WORKFLOW_EXECUTION_UPDATE_ACCEPTED"),
            ]
        )
    return rows


# -- variants ----------------------------------------------------------------------------


@dataclass
class Variant:
    label: str
    once: Callable[[int], Awaitable[Run]]


Results = dict[tuple[str, int], list[Run]]


async def measure(variants: Sequence[Variant], ns: Sequence[int], repeat: int) -> Results:
    """Warm every variant up, then run repeat r of all variants before repeat r+1."""
    results: Results = {}
    for v in variants:
        await v.once(3)
    for n in ns:
        for _ in range(repeat):
            for v in variants:
                run = await v.once(n)
                results.setdefault((v.label, n), []).append(run)
        for v in variants:
            steps = [d for r in results[(v.label, n)] for d in r.steps]
            note(f"  {v.label} N={n}: per-step median {median(steps):.1f} ms")
    return results


def rows_of(results: Results, variants: Sequence[Variant], ns: Sequence[int]) -> list[list[object]]:
    return [summarize(results[(v.label, n)]) for n in ns for v in variants]


@contextlib.contextmanager
def patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def agent_variant(
    label: str,
    runtime: Runtime,
    server: Server,
    *,
    cheap: bool = False,
    direct: bool = False,
    patches: Sequence[tuple[Any, str, Any]] = (),
    task_queue: str | None = None,
    **query_options: Any,
) -> Variant:
    """Queries of a fresh agent per run (``direct``: start + result, no subscriber)."""
    queue = task_queue or f"bench-{uuid.uuid4().hex[:10]}"

    async def once(n: int) -> Run:
        agent = make_agent(queue, cheap=cheap)
        rid = uuid.uuid4().hex[:12]
        prompt = f"turns={n} run={rid}"
        with contextlib.ExitStack() as stack:
            for obj, name, value in patches:
                stack.enter_context(patched(obj, name, value))
            if direct:
                workflow_id, wall, cpu = await _direct(runtime, server, agent, prompt)
            else:
                workflow_id, wall, cpu = await _query(
                    runtime, server, agent, prompt, n, query_options
                )
        starts = {
            MODEL_ACTIVITY: MODEL_STARTS.pop(rid, []),
            TOOL_ACTIVITY: TOOL_STARTS.pop(rid, []),
        }
        figures = await history_figures(runtime.client, workflow_id, starts)
        steps = diffs_ms(figures.scheduled.get(MODEL_ACTIVITY, []))
        return Run(label, n, wall, figures, steps, cpu.py_s * 1000 / n, cpu.server_s * 1000 / n)

    return Variant(label, once)


async def _query(
    runtime: Runtime, server: Server, agent: Any, prompt: str, n: int, options: dict[str, Any]
) -> tuple[str, float, CpuMeter]:
    result = None
    with CpuMeter(server.pid) as cpu:
        t0 = time.perf_counter()
        async for message in agent.query(prompt, runtime=runtime, **options):
            if isinstance(message, ResultMessage):
                result = message
        wall = (time.perf_counter() - t0) * 1000
    assert result is not None and result.subtype == "success", result
    assert result.num_turns == n, (result.num_turns, n)
    return workflow_id_for(agent, 1), wall, cpu


async def _direct(
    runtime: Runtime, server: Server, agent: Any, prompt: str
) -> tuple[str, float, CpuMeter]:
    """AgentWorkflow started and awaited: no durable-message subscriber, no live stream."""
    run_input = AgentRunInput(
        agent=agent_ref(agent),
        session_id=agent.session_id,
        prompt=prompt,
        stream=False,
        settings=runtime.settings,
    )
    workflow_id = f"direct-{uuid.uuid4().hex[:12]}"
    await runtime.ensure_worker(agent)
    with CpuMeter(server.pid) as cpu:
        t0 = time.perf_counter()
        handle = await runtime.client.start_workflow(
            "AgentWorkflow",
            run_input,
            id=workflow_id,
            task_queue=agent.task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
        await handle.result()
        wall = (time.perf_counter() - t0) * 1000
    return workflow_id, wall, cpu


def agent_worker(
    client: Client, task_queue: str, *, unsandboxed: bool = False, **options: Any
) -> Worker:
    """A worker of our own for an agent queue (to vary worker options)."""
    registry = AgentRegistry([make_agent(task_queue, cheap=False)])
    if unsandboxed:
        acts = AgentActivities(registry)
        return Worker(
            client,
            task_queue=task_queue,
            workflows=[AgentWorkflow],
            activities=[acts.model_request, acts.tool_call],
            workflow_runner=UnsandboxedWorkflowRunner(),
            **options,
        )
    return Worker(client, task_queue=task_queue, plugins=[LatticePlugin(registry)], **options)


STARTS: list[float] = []  # perf_counter at each bare activity start
WALL_STARTS: list[float] = []  # the same, wall clock (for the history segments)


@activity.defn(name="bench.noop")
async def noop(value: str) -> str:
    STARTS.append(time.perf_counter())
    WALL_STARTS.append(time.time())
    return value


BARE_WORKFLOWS = [BareActivities, BareActivitiesStartWait, BareLocalActivities]


def bare_worker(client: Client, task_queue: str, **options: Any) -> Worker:
    return Worker(
        client, task_queue=task_queue, workflows=BARE_WORKFLOWS, activities=[noop], **options
    )


def bare_variant(
    label: str, client: Client, server: Server, task_queue: str, workflow: Any = BareActivities
) -> Variant:
    """N sequential trivial (local) activities in a bare workflow served on ``task_queue``."""

    async def once(n: int) -> Run:
        STARTS.clear()
        WALL_STARTS.clear()
        wid = f"bare-{uuid.uuid4().hex[:12]}"
        with CpuMeter(server.pid) as cpu:
            t0 = time.perf_counter()
            await client.execute_workflow(workflow.run, n, id=wid, task_queue=task_queue)
            wall = (time.perf_counter() - t0) * 1000
        figures = await history_figures(client, wid, {"bench.noop": list(WALL_STARTS)})
        return Run(
            label, n, wall, figures, diffs_ms(STARTS), cpu.py_s * 1000 / n, cpu.server_s * 1000 / n
        )

    return Variant(label, once)


def by_position(runs: Sequence[Run], cuts: Sequence[int] = (20, 40)) -> str:
    """Median step time by position in the run (pooled over repeats)."""
    out, lo = [], 0
    longest = max(len(r.steps) for r in runs)
    for hi in [*cuts, longest]:
        part = [d for r in runs for d in r.steps[lo:hi]]
        if part:
            out.append(f"{lo + 1}-{min(hi, longest)}: {median(part):.1f}")
        lo = hi
    return " · ".join(out)


# -- servers -----------------------------------------------------------------------------


async def start_servers(home: Path, specs: dict[str, dict[str, Any]]) -> dict[str, Server]:
    """Start the named servers concurrently; spec ``{"library": True}`` is DevServer.ensure."""

    def start(name: str, spec: dict[str, Any]) -> Server:
        where = home / name.replace(" ", "_").replace("/", "_")
        if spec.get("library"):
            return start_library_server(where)
        return start_custom_server(where, label=name, **spec)

    servers = await asyncio.gather(
        *(asyncio.to_thread(start, name, spec) for name, spec in specs.items())
    )
    return dict(zip(specs, servers, strict=True))


async def connect(server: Server, settings: ActivitySettings | None = None) -> Runtime:
    return await Runtime.connect(server.address, settings=settings, inline_workers=True, quiet=True)


@contextlib.asynccontextmanager
async def servers_and_runtimes(
    home: Path, specs: dict[str, dict[str, Any]]
) -> AsyncIterator[dict[str, tuple[Server, Runtime]]]:
    servers = await start_servers(home, specs)
    for name, server in servers.items():
        emit(f"server {name}: {' '.join(server.args[2:]) or server.label}")
    emit()
    runtimes: dict[str, tuple[Server, Runtime]] = {}
    try:
        for name, server in servers.items():
            runtimes[name] = (server, await connect(server))
        yield runtimes
    finally:
        for _server, runtime in runtimes.values():
            await runtime.close()
        for server in servers.values():
            server.stop()


def print_tables(title: str, results: Results, variants: Sequence[Variant], ns: Sequence[int]):
    emit(table(HEADERS, rows_of(results, variants, ns), title=title))
    emit()
    n = max(ns)
    seg_rows = [row for v in variants for row in breakdown(results[(v.label, n)])]
    if seg_rows:
        emit(table(SEG_HEADERS, seg_rows, title=f"{title}: round-trip segments at N={n} (ms)"))
        emit()


# -- sections ----------------------------------------------------------------------------


async def section_main(home: Path, ns: Sequence[int], repeat: int) -> None:
    async with servers_and_runtimes(home, {"library": {"library": True}}) as env:
        server, runtime = env["library"]
        tq = f"bench-bare-{uuid.uuid4().hex[:8]}"
        async with bare_worker(runtime.client, tq):
            variants = [
                agent_variant("agent, tool activity", runtime, server),
                agent_variant("agent, cheap tool (local activity)", runtime, server, cheap=True),
                bare_variant("bare activities", runtime.client, server, tq),
                bare_variant(
                    "bare local activities", runtime.client, server, tq, BareLocalActivities
                ),
            ]
            results = await measure(variants, ns, repeat)
    print_tables("Per-turn overhead vs bare activities (library dev server)", results, variants, ns)
    med = {key: median([d for r in runs for d in r.steps]) for key, runs in results.items()}
    rows = []
    for n in ns:
        act = med[("bare activities", n)]
        local = med[("bare local activities", n)]
        for v in variants[:2]:
            turn = med[(v.label, n)]
            rows.append([v.label, n, turn, act, local, turn / act, turn - act])
    emit(
        table(
            [
                "variant",
                "N",
                "per-turn med ms",
                "bare activity ms",
                "bare local act. ms",
                "turn / bare act.",
                "turn - bare act. ms",
            ],
            rows,
            title="Ratios to the bare activity round trip",
        )
    )
    emit()


async def section_a(home: Path, n: int, repeat: int) -> None:
    """(a) transferProcessorMaxPollRPS 20 (the default) vs 1000, with SQLite defaults and WAL."""
    specs = {
        "no dynamic config (RPS 20)": {},
        "RPS 1000": {"dynamic": [RPS_1000]},
        "WAL, RPS 20": {"pragmas": WAL},
        "WAL, RPS 1000": {"dynamic": [RPS_1000], "pragmas": WAL},
    }
    async with servers_and_runtimes(home, specs) as env, contextlib.AsyncExitStack() as stack:
        variants = []
        for name, (server, runtime) in env.items():
            tq = f"bench-a-{uuid.uuid4().hex[:8]}"
            await stack.enter_async_context(bare_worker(runtime.client, tq))
            variants.append(bare_variant(f"bare activities [{name}]", runtime.client, server, tq))
        results = await measure(variants, [n], repeat)
    print_tables("(a) transfer-queue poll rate", results, variants, [n])
    rows = [[v.label, n, by_position(results[(v.label, n)], (10, 20, 30, 50))] for v in variants]
    emit(table(["variant", "N", "median ms by position"], rows, title="(a) by position in the run"))
    emit()


async def eager_evidence(server: Server, label: str, **options: Any) -> list[object]:
    """How many of 5 bare activities came back in the workflow-task completion response (Core
    logs this at DEBUG: "Adding N activity tasks received from WFT complete")."""
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger(f"bench.core.{uuid.uuid4().hex[:6]}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(Collect())
    core = TemporalRuntime(
        telemetry=TelemetryConfig(
            logging=LoggingConfig(
                filter=TelemetryFilter(core_level="DEBUG", other_level="WARN"),
                forwarding=LogForwardingConfig(logger=logger),
            )
        )
    )
    client = await Client.connect(server.address, runtime=core)
    tq = f"bench-ev-{uuid.uuid4().hex[:8]}"
    async with bare_worker(client, tq, **options):
        await client.execute_workflow(BareActivities.run, 5, id=uuid.uuid4().hex, task_queue=tq)
    eager = 0
    for message in records:
        match = re.search(r"Adding (\d+) activity tasks received from WFT complete", message)
        if match:
            eager += int(match.group(1))
    return [label, ", ".join(f"{k}={v}" for k, v in options.items()) or "defaults", 5, eager]


async def section_b(home: Path, n: int, repeat: int) -> None:
    """(b) eager activity dispatch: the server flag, and the worker option turning it off."""
    specs = {
        "library": {"library": True},
        "library + eager flag": {"dynamic": [RPS_1000, EAGER]},
        "WAL": {"dynamic": [RPS_1000], "pragmas": WAL},
    }
    off = {"disable_eager_activity_execution": True}
    async with servers_and_runtimes(home, specs) as env, contextlib.AsyncExitStack() as stack:
        variants = []
        for name, (server, runtime) in env.items():
            tq = f"bench-b-{uuid.uuid4().hex[:8]}"
            await stack.enter_async_context(bare_worker(runtime.client, tq))
            variants.append(bare_variant(f"bare activities [{name}]", runtime.client, server, tq))
            if name == "library + eager flag":
                continue
            tq = f"bench-b-{uuid.uuid4().hex[:8]}"
            await stack.enter_async_context(bare_worker(runtime.client, tq, **off))
            variants.append(
                bare_variant(
                    f"bare activities [{name}], worker disable_eager_activity_execution",
                    runtime.client,
                    server,
                    tq,
                )
            )
        server, runtime = env["WAL"]
        custom = await connect(server)
        custom.inline_workers = False
        stack.push_async_callback(custom.close)
        tq = f"bench-b-{uuid.uuid4().hex[:8]}"
        await stack.enter_async_context(agent_worker(runtime.client, tq))
        variants.append(agent_variant("agent, tool activity [WAL]", custom, server, task_queue=tq))
        tq = f"bench-b-{uuid.uuid4().hex[:8]}"
        await stack.enter_async_context(agent_worker(runtime.client, tq, **off))
        variants.append(
            agent_variant(
                "agent, tool activity [WAL], worker disable_eager_activity_execution",
                custom,
                server,
                task_queue=tq,
            )
        )
        results = await measure(variants, [n], repeat)
        evidence = [await eager_evidence(env[name][0], name) for name in specs]
        evidence.append(await eager_evidence(env["library"][0], "library", **off))
    print_tables("(b) eager activity dispatch", results, variants, [n])
    emit(
        table(
            ["server", "worker", "activities", "returned with the WFT completion"],
            evidence,
            title="(b) eager dispatch evidence (Core debug log, bare run of 5)",
        )
    )
    emit()


async def section_c(home: Path, n: int, repeat: int) -> None:
    """(c) cheap knobs: query path, settings, worker options, storage; the proposed set."""
    specs = {
        "library": {"library": True},
        "WAL only": {"dynamic": [RPS_1000], "pragmas": ["journal_mode=WAL"]},
        "WAL + NORMAL": {"dynamic": [RPS_1000], "pragmas": WAL},
        "in-memory": {"dynamic": [RPS_1000], "persistent": False},
        "proposed: WAL + NORMAL + eager": {"dynamic": [RPS_1000, EAGER], "pragmas": WAL},
    }
    async with servers_and_runtimes(home, specs) as env, contextlib.AsyncExitStack() as stack:
        server, runtime = env["library"]
        client = runtime.client
        custom = await connect(server)
        custom.inline_workers = False
        stack.push_async_callback(custom.close)
        cooldown = (runtime_module, "POLL_COOLDOWN_S", 0.1)
        agent_variants = [
            agent_variant("agent (library defaults)", runtime, server),
            agent_variant("agent, no subscriber (start + result)", runtime, server, direct=True),
            agent_variant(
                "agent, subscriber poll_cooldown 100 ms", runtime, server, patches=[cooldown]
            ),
        ]
        tq = f"bench-c-{uuid.uuid4().hex[:8]}"
        await stack.enter_async_context(agent_worker(client, tq, unsandboxed=True))
        agent_variants.append(
            agent_variant("agent, worker: UnsandboxedWorkflowRunner", custom, server, task_queue=tq)
        )
        bare_variants = []
        for label, options, workflow in [
            ("bare activities (execute_activity)", {}, BareActivities),
            ("bare start_activity + await", {}, BareActivitiesStartWait),
            (
                "bare, worker: disable_eager_activity_execution",
                {"disable_eager_activity_execution": True},
                BareActivities,
            ),
            (
                "bare, worker: max_concurrent_workflow_task_polls=10",
                {"max_concurrent_workflow_task_polls": 10},
                BareActivities,
            ),
            (
                "bare, worker: nonsticky_to_sticky_poll_ratio=1.0",
                {"nonsticky_to_sticky_poll_ratio": 1.0},
                BareActivities,
            ),
        ]:
            tq = f"bench-c-{uuid.uuid4().hex[:8]}"
            await stack.enter_async_context(bare_worker(client, tq, **options))
            bare_variants.append(bare_variant(label, client, server, tq, workflow))
        storage_variants = [bare_variants[0]]
        for name in list(specs)[1:-1]:
            server_s, runtime_s = env[name]
            tq = f"bench-c-{uuid.uuid4().hex[:8]}"
            await stack.enter_async_context(bare_worker(runtime_s.client, tq))
            storage_variants.append(
                bare_variant(f"bare activities [{name}]", runtime_s.client, server_s, tq)
            )
        server_p, runtime_p = env["proposed: WAL + NORMAL + eager"]
        proposed = [
            agent_variant("agent, tool activity [proposed]", runtime_p, server_p),
            agent_variant("agent, cheap tool [proposed]", runtime_p, server_p, cheap=True),
            agent_variant(
                "agent, cheap tool [proposed], no subscriber",
                runtime_p,
                server_p,
                cheap=True,
                direct=True,
            ),
        ]
        tq = f"bench-c-{uuid.uuid4().hex[:8]}"
        await stack.enter_async_context(bare_worker(runtime_p.client, tq))
        proposed.append(bare_variant("bare activities [proposed]", runtime_p.client, server_p, tq))
        groups = [
            ("(c) query path, settings, sandbox (library server)", agent_variants),
            ("(c) bare workflow: API and worker options (library server)", bare_variants),
            ("(c) storage (bare activities; all RPS 1000)", storage_variants),
            (
                "(c) proposed: server WAL + synchronous=NORMAL + eager, first heartbeat after "
                "one interval",
                proposed,
            ),
        ]
        unique = list({id(v): v for _, group in groups for v in group}.values())
        results = await measure(unique, [n], repeat)
    for title, group in groups:
        print_tables(title, results, group, [n])


async def section_knobs(home: Path, n: int, repeat: int) -> None:
    """The query-path knobs of (c) again, on a WAL server (less storage noise), for more
    repeats: ``--sections knobs --variant-turns 40 --repeat 4``. Not in the default run."""
    specs = {"WAL": {"dynamic": [RPS_1000], "pragmas": WAL}}
    async with servers_and_runtimes(home, specs) as env, contextlib.AsyncExitStack() as stack:
        server, runtime = env["WAL"]
        no_hb = await connect(server, ActivitySettings(model_heartbeat_s=0, tool_heartbeat_s=0))
        stack.push_async_callback(no_hb.close)
        custom = await connect(server)
        custom.inline_workers = False
        stack.push_async_callback(custom.close)
        tq = f"bench-k-{uuid.uuid4().hex[:8]}"
        await stack.enter_async_context(agent_worker(runtime.client, tq, unsandboxed=True))
        variants = [
            agent_variant("agent (library defaults) [WAL]", runtime, server),
            agent_variant("agent, no subscriber (start + result)", runtime, server, direct=True),
            agent_variant(
                "agent, subscriber poll_cooldown 100 ms",
                runtime,
                server,
                patches=[(runtime_module, "POLL_COOLDOWN_S", 0.1)],
            ),
            agent_variant("agent, heartbeat_timeout unset", no_hb, server),
            agent_variant(
                "agent, worker: UnsandboxedWorkflowRunner", custom, server, task_queue=tq
            ),
        ]
        results = await measure(variants, [n], repeat)
    print_tables("(c) query-path knobs on a WAL server", results, variants, [n])


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--turns", default="10,50,100", help="N of the main table (default 10,50,100)"
    )
    parser.add_argument("--repeat", type=int, default=2, help="runs per configuration (default 2)")
    parser.add_argument(
        "--sections",
        default="main,a,b,c",
        help="main (agent vs baselines), a (poll rate), b (eager dispatch), c (other knobs); "
        "knobs (c's query-path knobs on a WAL server; not in the default run)",
    )
    parser.add_argument("--a-turns", type=int, default=70, help="N of section a (default 70)")
    parser.add_argument(
        "--variant-turns", type=int, default=20, help="N of sections b, c (default 20)"
    )
    args = parser.parse_args()
    ns = [int(x) for x in args.turns.split(",") if x]
    emit(
        f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs\n"
    )
    t0 = time.perf_counter()
    with lattice_home() as home:
        for name in args.sections.split(","):
            t1 = time.perf_counter()
            if name == "main":
                await section_main(home, ns, args.repeat)
            elif name == "a":
                await section_a(home, args.a_turns, max(1, args.repeat - 1))
            elif name == "b":
                await section_b(home, args.variant_turns, args.repeat)
            elif name == "c":
                await section_c(home, args.variant_turns, args.repeat)
            elif name == "knobs":
                await section_knobs(home, args.variant_turns, args.repeat)
            else:
                parser.error(f"unknown section {name!r}")
            emit(f"(section {name}: {time.perf_counter() - t1:.0f} s)\n")
    emit(
        f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
        f"total {time.perf_counter() - t0:.0f} s"
    )


if __name__ == "__main__":
    asyncio.run(main())
