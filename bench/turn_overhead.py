"""Per-turn overhead of the durable agent loop against a zero-latency model.

Run: ``python bench/turn_overhead.py`` (options: ``--turns 10,50,100 --repeat 3
--sections main,a,b,c``). Every section starts its own dev server in a temporary
``LATTICE_HOME`` and stops it at the end.

A "turn" is one model request plus (except on the last turn) one call of a trivial tool. The
model is a :class:`ModelClient` that answers instantly in process (no HTTP): ``tool_use`` for
turns < N, final text at turn N. Per-turn durations come from the workflow history: the
time between the ``ActivityTaskScheduled`` events of successive model requests. The baselines
are bare workflows (``_workflows.py``) running N sequential trivial activities or local
activities: per-activity durations are the gaps between successive activity starts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from _common import (
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
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from agent_lattice import ResultMessage, create_agent, tool
from agent_lattice._messages import ModelMessage, TextBlock, ToolUseBlock, Usage
from agent_lattice.activities import AgentActivities
from agent_lattice.client import Runtime
from agent_lattice.client._query import workflow_id_for
from agent_lattice.providers import ModelRequest
from agent_lattice.worker._plugin import LatticePlugin
from agent_lattice.worker._registry import AgentRegistry
from agent_lattice.workflows import AgentWorkflow
from agent_lattice.workflows._types import ActivitySettings, AgentRef, AgentRunInput

MODEL_ACTIVITY = "lattice.model_request"

# -- the zero-latency model and the trivial tool -----------------------------------------


class ZeroLatencyModel:
    """Answers at once: ``tool_use`` for turns < N, text at turn N (N from the prompt)."""

    async def create(self, request: ModelRequest, *, on_event: Any = None) -> ModelMessage:
        turns = int(request.messages[0].text.removeprefix("turns="))
        turn = 1 + sum(1 for m in request.messages if m.role == "assistant")
        usage = Usage(input_tokens=10, output_tokens=5)
        if turn < turns:
            use = ToolUseBlock(id=f"toolu_{turn:04d}", name="step", input={"i": turn})
            return ModelMessage(
                role="assistant", content=[use], stop_reason="tool_use", usage=usage
            )
        return ModelMessage(
            role="assistant", content=[TextBlock(text="done")], stop_reason="end_turn", usage=usage
        )


class Step(BaseModel):
    i: int


async def step(input: Step) -> str:
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


# -- results -----------------------------------------------------------------------------


@dataclass
class Run:
    label: str
    n: int
    wall_ms: float
    figures: HistoryFigures | None
    step_ms: list[float]  # per-turn (agent) or per-activity (bare) durations

    @property
    def per_step_median(self) -> float:
        return median(self.step_ms)


def summarize(runs: Sequence[Run]) -> list[object]:
    """One row of the results table from the repeats of one configuration."""
    first = runs[0]
    steps = [d for r in runs for d in r.step_ms]
    figures = [r.figures for r in runs if r.figures is not None]
    return [
        first.label,
        first.n,
        median([r.wall_ms for r in runs]),
        median([f.duration_ms for f in figures]) if figures else float("nan"),
        median(steps),
        pct(steps, 0.9),
        max(steps) if steps else float("nan"),
        figures[0].events if figures else "-",
        f"{figures[0].bytes / 1024:.1f}" if figures else "-",
    ]


HEADERS = [
    "variant",
    "N",
    "wall ms",
    "wf ms",
    "per-step med ms",
    "p90 ms",
    "max ms",
    "events",
    "history KiB",
]

# -- agent runs --------------------------------------------------------------------------


async def run_query(runtime: Runtime, agent: Any, n: int, label: str, **options: Any) -> Run:
    """One ``agent.query()`` of N turns, timed from the call to the ResultMessage."""
    t0 = time.perf_counter()
    result = None
    async for message in agent.query(f"turns={n}", runtime=runtime, **options):
        if isinstance(message, ResultMessage):
            result = message
    wall = (time.perf_counter() - t0) * 1000
    assert result is not None and result.subtype == "success", result
    assert result.num_turns == n, (result.num_turns, n)
    figures = await history_figures(runtime.client, workflow_id_for(agent, 1))
    steps = diffs_ms(figures.scheduled.get(MODEL_ACTIVITY, []))
    return Run(label, n, wall, figures, steps)


async def run_direct(runtime: Runtime, agent: Any, n: int, label: str) -> Run:
    """AgentWorkflow started and awaited directly: no durable-message subscriber, no stream."""
    config = agent.config
    run_input = AgentRunInput(
        agent=AgentRef(
            key=agent.key,
            name=agent.name,
            model=config.model,
            max_turns=config.max_turns,
            tools=[t.name for t in config.tools],
            cheap_tools=[t.name for t in config.tools if t.cheap],
        ),
        session_id=agent.session_id,
        prompt=f"turns={n}",
        stream=False,
        settings=runtime.settings,
    )
    workflow_id = f"direct-{uuid.uuid4().hex[:12]}"
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
    figures = await history_figures(runtime.client, workflow_id)
    steps = diffs_ms(figures.scheduled.get(MODEL_ACTIVITY, []))
    return Run(label, n, wall, figures, steps)


@contextlib.asynccontextmanager
async def agent_worker(
    client: Client,
    task_queue: str,
    agent: Any,
    *,
    unsandboxed: bool = False,
    **options: Any,
) -> AsyncIterator[None]:
    """A worker of our own for ``agent``'s queue (to vary worker options)."""
    registry = AgentRegistry([agent])
    if unsandboxed:
        acts = AgentActivities(registry)
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[AgentWorkflow],
            activities=[acts.model_request, acts.tool_call],
            workflow_runner=UnsandboxedWorkflowRunner(),
            **options,
        )
    else:
        worker = Worker(
            client, task_queue=task_queue, plugins=[LatticePlugin(registry)], **options
        )
    async with worker:
        yield


async def agent_series(
    runtime: Runtime,
    ns: Sequence[int],
    *,
    cheap: bool,
    repeat: int,
    label: str,
    task_queue: str,
    runner: Callable[..., Any] = run_query,
    **options: Any,
) -> list[list[object]]:
    rows = []
    # Warm-up: worker start, sandbox import, first workflow task.
    await runner(runtime, make_agent(task_queue, cheap=cheap), 3, label, **options)
    for n in ns:
        runs = []
        for _ in range(repeat):
            agent = make_agent(task_queue, cheap=cheap)
            runs.append(await runner(runtime, agent, n, label, **options))
        rows.append(summarize(runs))
        note(f"  {label} N={n}: per-turn median {rows[-1][4]:.1f} ms")
    return rows


# -- bare baselines ----------------------------------------------------------------------

STARTS: list[float] = []


@activity.defn(name="bench.noop")
async def noop(value: str) -> str:
    STARTS.append(time.perf_counter())
    return value


BARE = {
    "bare activities": BareActivities,
    "bare start_activity + await": BareActivitiesStartWait,
    "bare local activities": BareLocalActivities,
}


async def bare_series(
    client: Client,
    ns: Sequence[int],
    kinds: Sequence[str],
    *,
    repeat: int,
    suffix: str = "",
    **options: Any,
) -> list[list[object]]:
    task_queue = f"bench-bare-{uuid.uuid4().hex[:8]}"
    rows = []
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=list(BARE.values()),
        activities=[noop],
        **options,
    ):
        for kind in kinds:
            wf = BARE[kind]
            await client.execute_workflow(wf.run, 3, id=uuid.uuid4().hex, task_queue=task_queue)
            for n in ns:
                runs = []
                for _ in range(repeat):
                    STARTS.clear()
                    wid = f"bare-{uuid.uuid4().hex[:12]}"
                    t0 = time.perf_counter()
                    await client.execute_workflow(wf.run, n, id=wid, task_queue=task_queue)
                    wall = (time.perf_counter() - t0) * 1000
                    figures = await history_figures(client, wid)
                    # Gaps between successive activity starts, measured in the worker: the
                    # full round trip of one activity (for local activities too, whose
                    # markers all land in one workflow task and share a timestamp).
                    runs.append(Run(kind + suffix, n, wall, figures, diffs_ms(STARTS)))
                rows.append(summarize(runs))
                note(f"  {kind}{suffix} N={n}: per-activity median {rows[-1][4]:.1f} ms")
    return rows


def profile(steps: Sequence[float], cuts: Sequence[int] = (20, 40)) -> list[str]:
    """Median per-step time before/after the given step indexes."""
    out, lo = [], 0
    for hi in [*cuts, len(steps)]:
        part = steps[lo:hi]
        if part:
            out.append(f"{lo + 1}-{lo + len(part)}: {median(part):.1f}")
        lo = hi
    return out


async def bare_profile(client: Client, n: int, label: str) -> list[object]:
    """Per-activity gaps by position in one run of N bare activities."""
    task_queue = f"bench-prof-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=task_queue, workflows=[BareActivities], activities=[noop]):
        await client.execute_workflow(
            BareActivities.run, 3, id=uuid.uuid4().hex, task_queue=task_queue
        )
        # Let the rate limiter's bucket refill, as after any idle period.
        await asyncio.sleep(2)
        STARTS.clear()
        await client.execute_workflow(
            BareActivities.run, n, id=uuid.uuid4().hex, task_queue=task_queue
        )
    steps = diffs_ms(STARTS)
    return [label, n, median(steps), " · ".join(profile(steps))]


# -- sections ----------------------------------------------------------------------------


async def connect(server: Server, settings: ActivitySettings | None = None) -> Runtime:
    return await Runtime.connect(
        server.address, settings=settings, inline_workers=True, quiet=True
    )


async def section_main(home: Path, ns: Sequence[int], repeat: int) -> dict[str, float]:
    server = await asyncio.to_thread(start_library_server, home / "main")
    emit(f"server: {server.label}\n")
    refs: dict[str, float] = {}
    try:
        runtime = await connect(server)
        try:
            tq = f"bench-main-{uuid.uuid4().hex[:8]}"
            rows = await agent_series(
                runtime, ns, cheap=False, repeat=repeat, label="agent, tool activity", task_queue=tq
            )
            rows += await agent_series(
                runtime,
                ns,
                cheap=True,
                repeat=repeat,
                label="agent, cheap tool (local act.)",
                task_queue=tq + "-cheap",
            )
            bare = await bare_series(
                runtime.client,
                ns,
                ["bare activities", "bare local activities"],
                repeat=repeat,
            )
        finally:
            await runtime.close()
    finally:
        server.stop()
    emit(table(HEADERS, rows + bare, title="Turn overhead vs bare activities (library server)"))
    emit()
    # Ratios at each N.
    by = {(r[0], r[1]): r[4] for r in rows + bare}
    ratio_rows = []
    for n in ns:
        act, local = by[("bare activities", n)], by[("bare local activities", n)]
        for label in ("agent, tool activity", "agent, cheap tool (local act.)"):
            turn = by[(label, n)]
            ratio_rows.append([label, n, turn, act, turn / act, turn / (act + local)])
        refs[f"act{n}"] = act
    emit(
        table(
            [
                "variant",
                "N",
                "per-turn med ms",
                "bare act. med ms",
                "turn / bare act.",
                "turn / (act. + local act.)",
            ],
            ratio_rows,
            title="Ratios",
        )
    )
    emit()
    return refs


async def section_a(home: Path, n: int, repeat: int) -> None:
    """(a) transferProcessorMaxPollRPS: the default 20, a middle value, and ours (1000)."""
    rows, prof = [], []
    for rps in (None, 50, 1000):
        dynamic = [] if rps is None else [f"history.transferProcessorMaxPollRPS={rps}"]
        label = "no dynamic config (RPS 20)" if rps is None else f"transferProcessorMaxPollRPS={rps}"
        server = await asyncio.to_thread(
            start_custom_server, home / f"a-{rps}", dynamic=dynamic, label=label
        )
        try:
            runtime = await connect(server)
            try:
                prof.append(await bare_profile(runtime.client, n, label))
                rows += await bare_series(
                    runtime.client,
                    [n],
                    ["bare activities"],
                    repeat=repeat,
                    suffix=f" [{label}]",
                )
                rows += await agent_series(
                    runtime,
                    [n],
                    cheap=False,
                    repeat=1,
                    label=f"agent, tool activity [{label}]",
                    task_queue=f"bench-a-{uuid.uuid4().hex[:8]}",
                )
            finally:
                await runtime.close()
        finally:
            server.stop()
    emit(
        table(
            ["server", "N", "median ms", "median per-activity ms by position"],
            prof,
            title="(a) bare activity gaps by position, after 2 s idle",
        )
    )
    emit()
    emit(table(HEADERS, rows, title="(a) transfer-queue poll rate"))
    emit()


async def section_b(home: Path, n: int, repeat: int) -> None:
    """(b) eager activity execution enabled on the server (and RPS 1000)."""
    dynamic = [
        "history.transferProcessorMaxPollRPS=1000",
        "system.enableActivityEagerExecution=true",
    ]
    server = await asyncio.to_thread(
        start_custom_server, home / "b", dynamic=dynamic, label="RPS 1000 + eager activities"
    )
    rows = []
    try:
        runtime = await connect(server)
        try:
            tag = " [eager on]"
            rows += await bare_series(
                runtime.client,
                [n],
                ["bare activities", "bare local activities"],
                repeat=repeat,
                suffix=tag,
            )
            rows += await bare_series(
                runtime.client,
                [n],
                ["bare activities"],
                repeat=repeat,
                suffix=tag + " disable_eager_activity_execution",
                disable_eager_activity_execution=True,
            )
            for cheap in (False, True):
                kind = "cheap tool" if cheap else "tool activity"
                rows += await agent_series(
                    runtime,
                    [n],
                    cheap=cheap,
                    repeat=repeat,
                    label=f"agent, {kind}{tag}",
                    task_queue=f"bench-b-{uuid.uuid4().hex[:8]}",
                )
            figures = await eager_evidence(runtime.client)
        finally:
            await runtime.close()
    finally:
        server.stop()
    emit(table(HEADERS, rows, title="(b) eager activity execution"))
    emit()
    emit(f"eager evidence (bare run of 5): {figures}\n")


async def eager_evidence(client: Client) -> str:
    """Schedule-to-start of activities in a small bare run (eager starts are ~0 ms)."""
    task_queue = f"bench-ev-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=task_queue, workflows=[BareActivities], activities=[noop]):
        wid = uuid.uuid4().hex
        await client.execute_workflow(BareActivities.run, 5, id=wid, task_queue=task_queue)
    history = await client.get_workflow_handle(wid).fetch_history()
    scheduled: dict[int, float] = {}
    gaps = []
    for event in history.events:
        ts = event.event_time.ToDatetime().timestamp()
        if event.HasField("activity_task_scheduled_event_attributes"):
            scheduled[event.event_id] = ts
        elif event.HasField("activity_task_started_event_attributes"):
            sched = event.activity_task_started_event_attributes.scheduled_event_id
            gaps.append((ts - scheduled[sched]) * 1000)
    return "schedule-to-start ms " + ", ".join(f"{g:.1f}" for g in gaps)


async def section_c(home: Path, n: int, repeat: int) -> None:
    """(c) cheap knobs: client, settings and worker options; SQLite and storage options."""
    rows = []
    server = await asyncio.to_thread(start_library_server, home / "c")
    try:
        runtime = await connect(server)
        no_hb = await connect(
            server,
            ActivitySettings(model_heartbeat_s=0, tool_heartbeat_s=0),
        )
        try:

            def tq() -> str:
                return f"bench-c-{uuid.uuid4().hex[:8]}"

            rows += await agent_series(
                runtime, [n], cheap=False, repeat=repeat, label="agent (library defaults)",
                task_queue=tq(),
            )  # fmt: skip
            rows += await agent_series(
                runtime, [n], cheap=False, repeat=repeat, label="agent, stream=False",
                task_queue=tq(), stream=False,
            )  # fmt: skip
            rows += await agent_series(
                runtime, [n], cheap=False, repeat=repeat,
                label="agent, no subscriber (start + result)", task_queue=tq(), runner=run_direct,
            )  # fmt: skip
            rows += await agent_series(
                no_hb, [n], cheap=False, repeat=repeat,
                label="agent, heartbeat_timeout unset", task_queue=tq(),
            )  # fmt: skip
            rows += await agent_series(
                no_hb, [n], cheap=False, repeat=repeat,
                label="agent, no hb + no subscriber", task_queue=tq(), runner=run_direct,
            )  # fmt: skip
            custom = await connect(server)
            custom.inline_workers = False
            try:
                worker_variants: list[tuple[str, dict[str, Any]]] = [
                    ("worker: disable_eager_activity_execution", {"disable_eager_activity_execution": True}),
                    ("worker: max_concurrent_workflow_task_polls=2", {"max_concurrent_workflow_task_polls": 2}),
                    ("worker: max_concurrent_workflow_task_polls=10", {"max_concurrent_workflow_task_polls": 10}),
                    ("worker: nonsticky_to_sticky_poll_ratio=1.0", {"nonsticky_to_sticky_poll_ratio": 1.0}),
                    ("worker: UnsandboxedWorkflowRunner", {"unsandboxed": True}),
                ]  # fmt: skip
                for label, options in worker_variants:
                    queue = tq()
                    async with agent_worker(
                        custom.client, queue, make_agent(queue, cheap=False), **options
                    ):
                        rows += await agent_series(
                            custom, [n], cheap=False, repeat=repeat, label=label, task_queue=queue
                        )
            finally:
                await custom.close()
            rows += await bare_series(
                runtime.client,
                [n],
                ["bare activities", "bare start_activity + await"],
                repeat=repeat,
            )
        finally:
            await runtime.close()
            await no_hb.close()
    finally:
        server.stop()
    emit(table(HEADERS, rows, title="(c) client, settings and worker options (library server)"))
    emit()

    # Storage: the same server flags with SQLite pragmas or in memory.
    rows = []
    storage = [
        ("sqlite synchronous=OFF", {"pragmas": ["synchronous=OFF"]}),
        ("sqlite journal_mode=WAL", {"pragmas": ["journal_mode=WAL"]}),
        ("in-memory SQLite (no --db-filename)", {"persistent": False}),
    ]
    for label, options in storage:
        server = await asyncio.to_thread(
            start_custom_server,
            home / f"c-{len(rows)}",
            dynamic=["history.transferProcessorMaxPollRPS=1000"],
            label=label,
            **options,
        )
        try:
            runtime = await connect(server)
            try:
                rows += await agent_series(
                    runtime, [n], cheap=False, repeat=repeat, label=f"agent [{label}]",
                    task_queue=f"bench-s-{uuid.uuid4().hex[:8]}",
                )  # fmt: skip
                rows += await bare_series(
                    runtime.client, [n], ["bare activities"], repeat=repeat, suffix=f" [{label}]"
                )
            except Exception as err:  # a pragma the server rejects: report, go on
                rows.append([f"{label}: {type(err).__name__}: {err}", n, *["-"] * 7])
            finally:
                await runtime.close()
        finally:
            server.stop()
    emit(table(HEADERS, rows, title="(c) storage (RPS 1000)"))
    emit()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", default="10,50,100", help="comma-separated N (default 10,50,100)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per configuration")
    parser.add_argument(
        "--sections",
        default="main,a,b,c",
        help="which parts to run: main (agent vs baselines), a (poll rate), b (eager), c (knobs)",
    )
    parser.add_argument("--variant-turns", type=int, default=100, help="N of sections a, b, c")
    args = parser.parse_args()
    ns = [int(x) for x in args.turns.split(",") if x]
    sections = set(args.sections.split(","))
    t0 = time.perf_counter()
    with lattice_home() as home:
        if "main" in sections:
            await section_main(home, ns, args.repeat)
        if "a" in sections:
            await section_a(home, args.variant_turns, args.repeat)
        if "b" in sections:
            await section_b(home, args.variant_turns, args.repeat)
        if "c" in sections:
            await section_c(home, args.variant_turns, args.repeat)
    emit(f"total benchmark time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    asyncio.run(main())
