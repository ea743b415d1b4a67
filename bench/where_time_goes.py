"""Where a query's time goes under load: C concurrent agent-lattice queries, then, from their
histories, how long each kind of activity took (scheduled → completed) and the time between
consecutive history events, summed per query.

Run: ``python bench/where_time_goes.py`` (``--help``; ``--c 50 --turns 5 --latency 200
--kind prompt`` by default). One embedded dev server, ``peer.py``'s fake model in its own
process (``--latency`` ms before each reply starts), workers in this process. A model
request that takes far longer than the model's latency waits in the worker (an event loop,
a thread pool, a lock); a long ``WORKFLOW_TASK_SCHEDULED -> WORKFLOW_TASK_STARTED`` waits
for a workflow-task slot or poller; a long ``ACTIVITY_TASK_SCHEDULED -> STARTED`` for an
activity slot.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import time

from _common import emit, median, table
from peer import lattice_variant, parties
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History

from agent_lattice.client import Runtime

_SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
_COMPLETED = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED


def spans(history: History, into: dict[str, list[float]]) -> None:
    """Add one history's activity durations and event-to-event gaps (ms) to ``into``."""
    scheduled: dict[int, tuple[str, float]] = {}
    previous: tuple[str, float] | None = None
    for event in history.events:
        at = event.event_time.ToDatetime().timestamp()
        name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
        if event.event_type == _SCHEDULED:
            kind = event.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[event.event_id] = (kind, at)
        elif event.event_type == _COMPLETED:
            kind, since = scheduled[
                event.activity_task_completed_event_attributes.scheduled_event_id
            ]
            into[f"activity {kind}"].append((at - since) * 1000)
        if previous is not None:
            into[f"{previous[0]} -> {name}"].append((at - previous[1]) * 1000)
        previous = (name, at)


async def bench(args: argparse.Namespace) -> None:
    with parties() as (server, base_url):
        runtime = await Runtime.connect(server.address, inline_workers=True, quiet=True)
        once = lattice_variant(runtime, base_url, streaming=args.kind == "query")
        await once(2, 0)  # warm-up
        cpu, started = time.process_time(), time.perf_counter()
        done = await asyncio.gather(*(once(args.turns, args.latency) for _ in range(args.c)))
        wall = time.perf_counter() - started
        cpu_ms = (time.process_time() - cpu) * 1000 / (args.c * args.turns)
        found: dict[str, list[float]] = collections.defaultdict(list)
        for d in done:
            spans(await runtime.client.get_workflow_handle(d.workflow_id).fetch_history(), found)
        await runtime.close()
    rows = [
        [what, sum(ms) / args.c, len(ms) / args.c, median(ms)]
        for what, ms in sorted(found.items(), key=lambda kv: -sum(kv[1]))[: args.rows]
    ]
    emit(
        table(
            ["span", "ms per query", "per query", "median ms"],
            rows,
            title=f"{args.c} concurrent {args.kind}() queries × {args.turns} tool turns, model "
            f"{args.latency} ms: wall {wall:.2f} s, this process {cpu_ms:.1f} ms CPU per turn",
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--c", type=int, default=50, help="concurrent queries")
    parser.add_argument("--turns", type=int, default=5, help="tool turns per query")
    parser.add_argument("--latency", type=int, default=200, help="model latency, ms")
    parser.add_argument("--kind", choices=["prompt", "query"], default="prompt")
    parser.add_argument("--rows", type=int, default=12, help="spans shown, longest first")
    asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
