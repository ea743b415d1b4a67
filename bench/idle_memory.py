"""P6: the memory a worker process holds per query that waits on the model.

Run: ``python bench/idle_memory.py`` (``--help``; ``--queries 200,1000 --wait 20`` is the
default). It starts its own dev server in a temporary ``LATTICE_HOME``, a fake model that
answers each request after ``--wait`` s (``scale_out.py``'s, its own process), and one
``lattice worker bench/_scale_app.py`` process; this process is the client and starts the
queries with ``agent.prompt()`` (a fresh session each).

For each N: the worker's RSS (``VmRSS`` of ``/proc/<pid>/status``) after a warm-up round, then
while all N queries wait (every model request has reached the model: ``--wait`` is long
enough to start them all), and after they ended. Figures: KB per waiting query (during −
before) / N, the worker's peak RSS (``VmHWM``), whether every query succeeded, and the
client's KB per query for comparison (it is not the target's). Rounds run in order of N and
the allocator keeps freed memory, so a round after a bigger one reads low: the default order
is smallest first.

Then the same rounds on the **floor** (``--no-floor`` skips it): a worker process of plain
Temporal (``_idle_floor.py``, sized like a lattice worker) whose workflow awaits one activity
that streams one model request with the Anthropic SDK (``_workflows.BareModelCall``): the
least a durable query waiting on the model can hold with this SDK.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from _common import (
    emit,
    lattice_home,
    note,
    process_cpu_s,
    start_library_server,
    status_kb,
    table,
)
from scale_out import Workers, model_process, round_of
from temporalio.client import Client

HERE = Path(__file__).resolve().parent


async def measure(
    system: str, pid: int, n: int, wait_s: float, start: Callable[[int], Awaitable[object]]
) -> list[object]:
    """One row: the worker ``pid``'s RSS before, while ``n`` queries wait and after."""
    note(f"idle_memory: {system}, {n} queries waiting {wait_s:g} s…")
    gc.collect()
    before, client_before = status_kb(pid, "VmRSS"), status_kb("self", "VmRSS")
    cpu_before = process_cpu_s(pid)
    started = time.monotonic()
    run = asyncio.ensure_future(start(n))
    # every request reaches the model well before it answers; read at 3/4 of it
    await asyncio.sleep(wait_s * 0.75)
    during, client_during = status_kb(pid, "VmRSS"), status_kb("self", "VmRSS")
    ok = True
    try:
        await run
    except Exception as err:  # a query that failed (a result, or the workflow's failure)
        ok = False
        note(f"idle_memory: {err}")
    after = status_kb(pid, "VmRSS")
    note(f"idle_memory: {system}, {n}: {(during - before) / n:.1f} KB per waiting query")
    return [
        system,
        n,
        (during - before) / n,
        before / 1024,
        during / 1024,
        after / 1024,
        status_kb(pid, "VmHWM") / 1024,
        "yes" if ok else "no",
        time.monotonic() - started,
        (client_during - client_before) / n,
        (process_cpu_s(pid) - cpu_before) * 1000 / n,
    ]


async def bench(args: argparse.Namespace) -> None:
    from agent_lattice.client import Runtime

    rows = []
    wait_ms = args.wait * 1000
    with lattice_home() as home, model_process(wait_ms, 0) as (base_url, _):
        server = start_library_server(home)
        prefix = f"idle{uuid.uuid4().hex[:6]}."
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": server.address,
            "ANTHROPIC_BASE_URL": base_url,
            "LATTICE_TASK_QUEUE_PREFIX": prefix,
        }
        os.environ.update({k: env[k] for k in ("ANTHROPIC_BASE_URL", "LATTICE_TASK_QUEUE_PREFIX")})
        workers: Workers | None = None
        floor = None
        runtime = None
        try:
            import _scale_app

            runtime = await Runtime.connect(server.address, inline_workers=False, quiet=True)

            async def queries(n: int) -> object:
                return await round_of(runtime, _scale_app.agent, n)

            for park in args.park:
                label = "agent-lattice" + ("" if park == "default" else f" (park after {park})")
                park_env = {} if park == "default" else {"LATTICE_PARK_AFTER": park}
                workers = Workers(1, {**env, **park_env}, home)
                await workers.ready()
                await queries(4)  # warm-up
                for n in args.queries:
                    rows.append(await measure(label, workers.procs[0].pid, n, args.wait, queries))
                workers.stop()
            if args.floor:
                floor = floor_worker(env)
                await polling(floor)

                async def bare(n: int) -> object:
                    return await bare_calls(runtime.client, n)

                await bare(4)
                for n in args.queries:
                    rows.append(await measure("floor", floor.pid, n, args.wait, bare))
        finally:
            if runtime is not None:
                await runtime.close()
            if workers is not None:
                workers.stop()
            if floor is not None:
                floor.terminate()
                floor.wait(30)
            server.stop()
    emit(
        table(
            [
                "worker",
                "queries",
                "worker KB per waiting query",
                "worker RSS before MB",
                "during MB",
                "after MB",
                "peak MB",
                "all succeeded",
                "round s",
                "client KB per query",
                "worker CPU ms per query",
            ],
            rows,
            title=f"P6: queries waiting {args.wait:g} s on the model, one worker process, "
            f"{os.cpu_count()} cores",
        )
    )


def floor_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The floor's worker process (``_idle_floor.py``): it prints ``ready`` once it polls."""
    return subprocess.Popen(
        [sys.executable, str(HERE / "_idle_floor.py")],
        env=env,
        cwd=HERE,
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )


async def polling(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
    if line.strip() != b"ready":
        raise RuntimeError(f"the floor's worker did not start (exit {proc.poll()})")


async def bare_calls(client: Client, n: int) -> None:
    """``n`` BareModelCall workflows at once, to their results."""
    from _idle_floor import QUEUE

    run = uuid.uuid4().hex[:6]
    await asyncio.gather(
        *(
            client.execute_workflow(
                "BareModelCall", f"query {i}", id=f"floor-{run}-{i}", task_queue=QUEUE
            )
            for i in range(n)
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--queries",
        type=lambda s: [int(p) for p in s.split(",") if p],
        default=[200, 1000],
        help="N concurrent queries per round, e.g. 200,1000 (smallest first)",
    )
    parser.add_argument("--wait", type=float, default=20.0, help="the model's latency, s")
    parser.add_argument(
        "--park",
        type=lambda s: [p for p in s.split(",") if p],
        default=["off", "default"],
        help="the worker's LATTICE_PARK_AFTER per series, e.g. off,default,5 "
        "(default: off, then the default of 10 s)",
    )
    parser.add_argument(
        "--no-floor",
        dest="floor",
        action="store_false",
        help="skip the floor (plain Temporal: a workflow awaiting one model-call activity)",
    )
    asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
