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
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import time
import uuid

from _common import emit, lattice_home, note, start_library_server, status_kb, table
from scale_out import Workers, model_process, round_of


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
        workers = Workers(1, env, home)
        runtime = None
        try:
            await workers.ready()
            import _scale_app

            pid = workers.procs[0].pid
            runtime = await Runtime.connect(server.address, inline_workers=False, quiet=True)
            await round_of(runtime, _scale_app.agent, 4)  # warm-up
            for n in args.queries:
                note(f"idle_memory: {n} queries waiting {args.wait:g} s…")
                gc.collect()
                before, client_before = status_kb(pid, "VmRSS"), status_kb("self", "VmRSS")
                started = time.monotonic()
                run = asyncio.ensure_future(round_of(runtime, _scale_app.agent, n))
                # every request reaches the model well before it answers; read at 3/4 of it
                await asyncio.sleep(args.wait * 0.75)
                during, client_during = status_kb(pid, "VmRSS"), status_kb("self", "VmRSS")
                ok = True
                try:
                    await run
                except RuntimeError as err:
                    ok = False
                    note(f"idle_memory: {err}")
                after = status_kb(pid, "VmRSS")
                rows.append(
                    [
                        n,
                        (during - before) / n,
                        before / 1024,
                        during / 1024,
                        after / 1024,
                        status_kb(pid, "VmHWM") / 1024,
                        "yes" if ok else "no",
                        time.monotonic() - started,
                        (client_during - client_before) / n,
                    ]
                )
        finally:
            if runtime is not None:
                await runtime.close()
            workers.stop()
            server.stop()
    emit(
        table(
            [
                "queries",
                "worker KB per waiting query",
                "worker RSS before MB",
                "during MB",
                "after MB",
                "peak MB",
                "all succeeded",
                "round s",
                "client KB per query",
            ],
            rows,
            title=f"P6: queries waiting {args.wait:g} s on the model, one worker process, "
            f"{os.cpu_count()} cores",
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
    asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
