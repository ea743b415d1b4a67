"""What ``query()``'s reader of durable messages costs per tool turn, with commit notices,
without them, and without its batching, interleaved in one run.

Run: ``python bench/reader_reads.py`` (``--help``). One dev server and ``peer.py``'s fake
model; the workers run in this process. "notices" is the reader as shipped: the worker tells
it what each workflow task published once the server took the task (``worker/_commits``),
and it long-polls only the run's close. "batched" is the reader without notices (``_follow``:
a workflow task followed within ``COALESCE_S`` is read with the same stream query, and no
long poll is reissued right after a page that ends inside a workflow task); "unbatched" sets
both waits to zero (a query after every workflow task, a long poll after every page). Per tool
turn: stream queries and history pages the reader made (counted on this process's client),
CPU of this process (client and workers) and of the server, and the round's wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

from _common import emit, median, process_cpu_s, table
from peer import lattice_variant, parties
from temporalio.client import WorkflowHandle, WorkflowHistoryEventAsyncIterator

from agent_lattice.client import Runtime, _follow
from agent_lattice.worker import _commits

COUNTS = {"query": 0, "page": 0}
MODES = {  # batching waits, commit notices
    "notices": (_follow.COALESCE_S, _follow.PAGE_GAP_S, True),
    "batched": (_follow.COALESCE_S, _follow.PAGE_GAP_S, False),
    "unbatched": (0.0, 0.0, False),
}
CHANNELS = getattr(_commits, "_Channels")  # noqa: B009 (the worker's sender of notices)
SEND = CHANNELS.send


def _not_sent(*args: Any, **kwargs: Any) -> None:
    return None


def count_reads() -> None:
    """Count the client's stream queries and history pages (a wrapper, nothing replaced)."""
    query, page = WorkflowHandle.query, WorkflowHistoryEventAsyncIterator.fetch_next_page

    async def counted_query(self: Any, *args: Any, **kwargs: Any) -> Any:
        COUNTS["query"] += 1
        return await query(self, *args, **kwargs)

    async def counted_page(self: Any, *args: Any, **kwargs: Any) -> None:
        COUNTS["page"] += 1
        await page(self, *args, **kwargs)

    WorkflowHandle.query = counted_query  # type: ignore[method-assign]
    WorkflowHistoryEventAsyncIterator.fetch_next_page = counted_page  # type: ignore[method-assign]


async def bench(args: argparse.Namespace) -> None:
    count_reads()
    samples: dict[str, list[tuple[float, ...]]] = {mode: [] for mode in MODES}
    with parties() as (server, base_url):
        assert server.pid is not None
        runtime = await Runtime.connect(server.address, inline_workers=True, quiet=True)
        once = lattice_variant(runtime, base_url, streaming=True)
        await once(2, 0)  # warm-up
        for _ in range(args.repeat):
            for mode, (coalesce, gap, notices) in MODES.items():
                _follow.COALESCE_S, _follow.PAGE_GAP_S = coalesce, gap
                CHANNELS.send = SEND if notices else _not_sent
                COUNTS.update(query=0, page=0)
                srv, py, wall = process_cpu_s(server.pid), time.process_time(), time.perf_counter()
                await asyncio.gather(*(once(args.turns, args.latency) for _ in range(args.c)))
                n = args.c * args.turns
                samples[mode].append((
                    COUNTS["query"] / n,
                    COUNTS["page"] / n,
                    (time.process_time() - py) * 1000 / n,
                    (process_cpu_s(server.pid) - srv) * 1000 / n,
                    time.perf_counter() - wall,
                ))  # fmt: skip
        await runtime.close()
    rows = [[mode, *(f"{median(list(column)):.2f}" for column in zip(*runs, strict=True))]
            for mode, runs in samples.items()]  # fmt: skip
    emit(table(
        ["reader", "queries/turn", "history pages/turn", "py CPU ms/turn", "server CPU ms/turn",
         "wall s"],
        rows,
        title=f"query()'s reader: {args.c} concurrent queries × {args.turns} tool turns, model "
        f"latency {args.latency} ms, {args.repeat} interleaved runs (medians), "
        f"{os.cpu_count()} cores",
    ))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--c", type=int, default=1, help="concurrent queries")
    parser.add_argument("--turns", type=int, default=10, help="tool turns per query")
    parser.add_argument("--latency", type=int, default=0, help="model latency ms")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved runs per reader")
    asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
