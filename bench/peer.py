"""Side by side on one server and one fake model: a bare 2-activity turn, agent-lattice's
``prompt()`` and ``query()``, and pydantic-ai's ``TemporalAgent``.

Run: ``python bench/peer.py`` (``--help`` for options; ``pip install -e ".[bench]"`` for
pydantic-ai). One embedded dev server (``DevServer.ensure``, as a script gets it) serves every
variant; the fake model (``_fake_model.py``) is served over HTTP from its own process, so its
CPU is not counted. Every variant's workers run in this process (one worker process).

A query of T tool turns is T + 1 model requests and T tool calls (the last request answers
``done``); the bare workflow runs the same 2T + 1 trivial activities. Per-turn figures divide
by T. Figures:

* **P1** latency per tool turn at zero model latency (queries one after the other).
* **P2** CPU per turn under load (C concurrent queries, model latency 200 ms): this process
  (client + workers) and the server, from ``/proc`` (utime + stime).
* **P3** wall time of C concurrent queries (C = 200 by default; ``--heavy-repeat`` runs).
* **P4** history per tool turn: events, workflow tasks, activities, updates, bytes.
* **P6** RSS of this process per concurrent query waiting on the model.

P5 (first token across processes) is ``attach_latency.py``'s: the side channel's first token.
Variants run interleaved (repeat r of every variant, then r + 1) after a warm-up run each, so
other load on the machine spreads over all of them alike; medians with min and max.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from _common import (
    CpuMeter,
    HistoryFigures,
    Server,
    emit,
    history_figures,
    lattice_home,
    median,
    note,
    start_library_server,
    status_kb,
    table,
)
from _workflows import BareActivities, noop
from pydantic import BaseModel
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from agent_lattice import ResultMessage, create_agent, tool
from agent_lattice.client import Runtime
from agent_lattice.workflows._refs import workflow_id_for

HERE = Path(__file__).resolve().parent
BARE_QUEUE = "peer-bare"
PYDANTIC_QUEUE = "peer-pydantic-ai"


# -- the systems -------------------------------------------------------------------------


class Step(BaseModel):
    i: int


async def step(input: Step) -> str:
    return f"step {input.i} ok"


@dataclass
class Done:
    """One finished query: where its history is."""

    client: Client
    workflow_id: str


Once = Callable[[int, int], Awaitable[Done]]  # (tool turns, model latency ms) -> done


def prompt_of(turns: int, latency_ms: int) -> str:
    return f"turns={turns + 1} latency={latency_ms} run={uuid.uuid4().hex[:8]}"


def lattice_variant(runtime: Runtime, base_url: str, *, streaming: bool) -> Once:
    name = "peer-query" if streaming else "peer-prompt"

    async def once(turns: int, latency_ms: int) -> Done:
        agent = create_agent(
            model="claude-bench",
            name=name,
            api_key="test",
            base_url=base_url,
            tools=[tool("step", "One step of work", Step, step)],
            max_turns=10_000,
            task_queue=name,
        )
        prompt = prompt_of(turns, latency_ms)
        if streaming:
            result = None
            async for message in agent.query(prompt, runtime=runtime):
                if isinstance(message, ResultMessage):
                    result = message
        else:
            result = await agent.prompt(prompt, runtime=runtime)
        assert result is not None and result.subtype == "success", result
        assert result.num_turns == turns + 1, (result.num_turns, turns)
        return Done(runtime.client, workflow_id_for(agent, 1))

    return once


def bare_variant(client: Client) -> Once:
    async def once(turns: int, latency_ms: int) -> Done:
        wid = f"peer-bare-{uuid.uuid4().hex[:12]}"
        await client.execute_workflow(
            BareActivities.run, 2 * turns + 1, id=wid, task_queue=BARE_QUEUE
        )
        return Done(client, wid)

    return once


def pydantic_variant(client: Client) -> Once:
    async def once(turns: int, latency_ms: int) -> Done:
        wid = f"peer-pydantic-{uuid.uuid4().hex[:12]}"
        output = await client.execute_workflow(
            "PeerPydanticAI", prompt_of(turns, latency_ms), id=wid, task_queue=PYDANTIC_QUEUE
        )
        assert output == "done", output
        return Done(client, wid)

    return once


# -- measuring ---------------------------------------------------------------------------


@dataclass
class Sample:
    wall_s: float
    py_ms: float  # per tool turn
    server_ms: float  # per tool turn


def spread(values: Sequence[float], digits: int = 1) -> str:
    """``median [min–max]``."""
    if not values:
        return "-"
    return f"{median(values):.{digits}f} [{min(values):.{digits}f}–{max(values):.{digits}f}]"


async def run_batch(once: Once, c: int, turns: int, latency_ms: int, server_pid: int) -> Sample:
    with CpuMeter(server_pid) as cpu:
        t0 = time.perf_counter()
        await asyncio.gather(*(once(turns, latency_ms) for _ in range(c)))
        wall = time.perf_counter() - t0
    n = c * turns
    return Sample(wall, cpu.py_s * 1000 / n, cpu.server_s * 1000 / n)


async def interleaved(
    variants: dict[str, Once], c: int, turns: int, latency_ms: int, repeat: int, pid: int
) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {label: [] for label in variants}
    for r in range(repeat):
        for label, once in variants.items():
            sample = await run_batch(once, c, turns, latency_ms, pid)
            out[label].append(sample)
            note(f"  C={c} repeat {r + 1}/{repeat} {label}: {sample.wall_s:.2f} s")
    return out


async def idle_rss(once: Once, c: int, wait_s: float) -> float:
    """KB of RSS per query while ``c`` queries wait on a model that answers in ``wait_s``."""
    gc.collect()
    before = status_kb("self")
    tasks = [asyncio.ensure_future(once(0, int(wait_s * 1000))) for _ in range(c)]
    await asyncio.sleep(wait_s * 0.75)
    during = status_kb("self")
    await asyncio.gather(*tasks)
    return (during - before) / c


def history_row(label: str, figures: Sequence[HistoryFigures], turns: int) -> list[object]:
    f = figures[0]
    per = float(turns)
    return [
        label,
        f"{f.events / per:.1f}",
        f"{f.count('WORKFLOW_TASK_COMPLETED') / per:.2f}",
        f"{f.count('ACTIVITY_TASK_SCHEDULED') / per:.2f}",
        f"{f.count('WORKFLOW_EXECUTION_UPDATE_ACCEPTED') / per:.2f}",
        f"{f.bytes / per / 1024:.2f}",
        f.events,
    ]


# -- setup -------------------------------------------------------------------------------


def start_fake_model() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "_fake_model.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def pydantic_worker(client: Client) -> Worker:
    from _peer_pydantic import PeerPydanticAI  # reads PEER_MODEL_URL

    runner = SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("_peer_pydantic")
    )
    return Worker(
        client, task_queue=PYDANTIC_QUEUE, workflows=[PeerPydanticAI], workflow_runner=runner
    )


@contextlib.contextmanager
def parties() -> Iterator[tuple[Server, str]]:
    """One embedded dev server and the fake model's process (its base URL), stopped after."""
    with lattice_home() as home:
        server = start_library_server(home)
        model, base_url = start_fake_model()
        os.environ["PEER_MODEL_URL"] = base_url
        try:
            yield server, base_url
        finally:
            assert model.stdin is not None
            model.stdin.close()
            model.wait(10)
            server.stop()


async def main(args: argparse.Namespace) -> None:
    with parties() as (server, base_url):
        assert server.pid is not None
        await bench(args, server.address, server.pid, base_url)


async def bench(args: argparse.Namespace, address: str, pid: int, base_url: str) -> None:
    runtime = await Runtime.connect(address, inline_workers=True, quiet=True)
    variants: dict[str, Once] = {
        "bare 2 activities": bare_variant(runtime.client),
        "agent-lattice prompt()": lattice_variant(runtime, base_url, streaming=False),
        "agent-lattice query()": lattice_variant(runtime, base_url, streaming=True),
    }
    workers = [Worker(runtime.client, task_queue=BARE_QUEUE, workflows=[BareActivities],
                      activities=[noop])]  # fmt: skip
    try:
        from pydantic_ai.durable_exec.temporal import PydanticAIPlugin

        peer = await Client.connect(address, plugins=[PydanticAIPlugin()])
        workers.append(pydantic_worker(peer))
        variants["pydantic-ai TemporalAgent"] = pydantic_variant(peer)
    except ImportError:
        note("pydantic-ai is not installed (pip install -e '.[bench]'): its rows are missing")
    tasks = [asyncio.create_task(w.run()) for w in workers]
    sections = set(args.sections.split(","))
    emit(f"cores: {os.cpu_count()} · load average at start: {os.getloadavg()[0]:.2f}")
    emit()
    try:
        for once in variants.values():  # warm-up: workers, sandboxes, connections
            await once(2, 0)
        if "p1" in sections:
            await p1_p4(variants, args, pid)
        loaded = {k: v for k, v in variants.items() if not k.startswith("bare")}
        if "p2" in sections:  # the bare workflow's CPU is the floor (it waits on no model)
            await load_table(
                variants, args.c, args.load_turns, args.latency, args.repeat, pid, "P2"
            )
        if "p3" in sections:
            await load_table(
                loaded, args.heavy_c, args.load_turns, args.latency, args.heavy_repeat, pid, "P3"
            )
        if "p6" in sections:
            rows = [[label, f"{await idle_rss(once, args.idle, args.idle_wait):.1f}"]
                    for label, once in loaded.items()]  # fmt: skip
            emit(table(["variant", "RSS KB per waiting query"], rows,
                       title=f"P6 memory: {args.idle} queries waiting {args.idle_wait} s on the "
                       "model (this process: client + workers; order-dependent, rough)"))  # fmt: skip
            emit()
        emit(f"load average at end: {os.getloadavg()[0]:.2f}")
    finally:
        for w in workers:
            await w.shutdown()
        for t in tasks:
            await t
        await runtime.close()


async def p1_p4(variants: dict[str, Once], args: argparse.Namespace, pid: int) -> None:
    turns = args.turns
    walls: dict[str, list[float]] = {label: [] for label in variants}
    cpu: dict[str, list[Sample]] = {label: [] for label in variants}
    figures: dict[str, list[HistoryFigures]] = {label: [] for label in variants}
    for r in range(args.repeat):
        for label, once in variants.items():
            with CpuMeter(pid) as meter:
                t0 = time.perf_counter()
                done = await once(turns, 0)
                wall = time.perf_counter() - t0
            walls[label].append(wall * 1000 / turns)
            cpu[label].append(
                Sample(wall, meter.py_s * 1000 / turns, meter.server_s * 1000 / turns)
            )
            figures[label].append(await history_figures(done.client, done.workflow_id))
        note(f"  P1 repeat {r + 1}/{args.repeat} done")
    floor = median(walls["bare 2 activities"])
    rows = []
    for label in variants:
        rows.append([
            label,
            spread(walls[label]),
            f"{median(walls[label]) - floor:+.1f}",
            f"{median(walls[label]) / floor:.2f}",
            spread([s.py_ms for s in cpu[label]]),
            spread([s.server_ms for s in cpu[label]]),
        ])  # fmt: skip
    emit(table(
        ["variant", "ms per tool turn", "vs bare ms", "× bare", "py CPU ms/turn",
         "server CPU ms/turn"],
        rows,
        title=f"P1 latency per tool turn: {turns} tool turns per query, zero model latency, "
        f"{args.repeat} runs (median [min–max])",
    ))  # fmt: skip
    emit()
    emit(table(
        ["variant", "events/turn", "WFTs/turn", "activities/turn", "updates/turn",
         "KiB/turn", "events"],
        [history_row(label, figures[label], turns) for label in variants],
        title=f"P4 history per tool turn ({turns} tool turns)",
    ))  # fmt: skip
    emit()


async def load_table(
    variants: dict[str, Once], c: int, turns: int, latency: int, repeat: int, pid: int, name: str
) -> None:
    if repeat <= 0:
        return
    samples = await interleaved(variants, c, turns, latency, repeat, pid)
    peer = samples.get("pydantic-ai TemporalAgent")
    rows = []
    for label, runs in samples.items():
        total = [s.py_ms + s.server_ms for s in runs]
        ratio_cpu = ratio_wall = "-"
        if peer:
            ratio_cpu = f"{median(total) / median([s.py_ms + s.server_ms for s in peer]):.2f}"
            ratio_wall = (
                f"{median([s.wall_s for s in runs]) / median([s.wall_s for s in peer]):.2f}"
            )
        rows.append([
            label,
            spread([s.wall_s for s in runs], 2),
            ratio_wall,
            spread([s.py_ms for s in runs]),
            spread([s.server_ms for s in runs]),
            spread(total),
            ratio_cpu,
        ])  # fmt: skip
    emit(table(
        ["variant", "wall s", "wall / pydantic-ai", "py CPU ms/turn", "server CPU ms/turn",
         "CPU ms/turn", "CPU / pydantic-ai"],
        rows,
        title=f"{name}: {c} concurrent queries × {turns} tool turns, model latency {latency} ms, "
        f"{repeat} run(s) (median [min–max]; ideal wall {(turns + 1) * latency / 1000:.1f} s)",
    ))  # fmt: skip
    emit()


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sections", default="p1,p2,p3,p6", help="which of p1 (with p4), p2, p3, p6")
    p.add_argument("--turns", type=int, default=10, help="P1: tool turns per query")
    p.add_argument("--repeat", type=int, default=5, help="P1 and P2 runs")
    p.add_argument("--c", type=int, default=50, help="P2: concurrent queries")
    p.add_argument("--load-turns", type=int, default=5, help="P2/P3: tool turns per query")
    p.add_argument("--latency", type=int, default=200, help="P2/P3: model latency ms")
    p.add_argument("--heavy-c", type=int, default=200, help="P3: concurrent queries")
    p.add_argument("--heavy-repeat", type=int, default=1, help="P3 runs (5 for a report)")
    p.add_argument("--idle", type=int, default=200, help="P6: concurrent waiting queries")
    p.add_argument("--idle-wait", type=float, default=4.0, help="P6: model latency s")
    return p.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
