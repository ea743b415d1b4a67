"""Where one tool turn's time goes, side by side: the bare 2-activity workflow, agent-lattice
``prompt()`` and pydantic-ai's ``TemporalAgent``, from their histories (medians of each span:
an activity's ``STARTED -> COMPLETED`` is the worker's time on it, a workflow task's its
activation).

Run: ``python bench/activity_spans.py [--turns 20] [--repeat 3]``: one embedded dev server,
``peer.py``'s fake model in its own process (zero latency), runs interleaved.
"""

from __future__ import annotations

import argparse
import asyncio
import collections

from _common import emit, median, table
from _workflows import BareActivities, noop
from peer import (
    BARE_QUEUE,
    Once,
    bare_variant,
    lattice_variant,
    parties,
    pydantic_variant,
    pydantic_worker,
)
from temporalio.client import Client
from temporalio.worker import Worker
from where_time_goes import spans

from agent_lattice.client import Runtime


async def bench(turns: int, repeat: int) -> None:
    with parties() as (server, base_url):
        runtime = await Runtime.connect(server.address, inline_workers=True, quiet=True)
        bare = Worker(
            runtime.client, task_queue=BARE_QUEUE, workflows=[BareActivities], activities=[noop]
        )
        workers = [bare]
        variants: dict[str, Once] = {
            "bare 2 activities": bare_variant(runtime.client),
            "prompt()": lattice_variant(runtime, base_url, streaming=False),
            "query()": lattice_variant(runtime, base_url, streaming=True),
        }
        try:
            from pydantic_ai.durable_exec.temporal import PydanticAIPlugin

            peer = await Client.connect(server.address, plugins=[PydanticAIPlugin()])
            workers.append(pydantic_worker(peer))
            variants["pydantic-ai"] = pydantic_variant(peer)
        except ImportError:
            emit("pydantic-ai is not installed (pip install -e '.[bench]'): its column is missing")
        running = [asyncio.create_task(w.run()) for w in workers]
        found = {name: collections.defaultdict(list) for name in variants}
        for r in range(repeat + 1):  # the first round warms up
            for name, once in variants.items():
                done = await once(turns, 0)
                if r:
                    handle = runtime.client.get_workflow_handle(done.workflow_id)
                    spans(await handle.fetch_history(), found[name])
        for worker in workers:
            await worker.shutdown()
        await asyncio.gather(*running, return_exceptions=True)
        await runtime.close()
    ours = found["prompt()"]
    names = sorted({s for f in found.values() for s in f}, key=lambda s: -sum(ours.get(s, [0])))
    rows = [
        [span]
        + [
            f"{median(found[v][span]):.2f} ({len(found[v][span]) / repeat:.0f})"
            if found[v].get(span)
            else "–"
            for v in variants
        ]
        for span in names[:12]
    ]
    emit(
        table(
            ["span", *(f"{v}: median ms (per query)" for v in variants)],
            rows,
            title=f"{turns} tool turns per query, zero model latency, {repeat} runs each",
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20, help="tool turns per query")
    parser.add_argument("--repeat", type=int, default=3, help="runs per variant")
    args = parser.parse_args()
    asyncio.run(bench(args.turns, args.repeat))


if __name__ == "__main__":
    main()
