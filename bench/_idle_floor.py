"""``idle_memory.py``'s floor: a worker process of plain Temporal (no agent_lattice) serving
``BareModelCall``, sized like a lattice worker. Prints ``ready`` once it polls."""

from __future__ import annotations

import asyncio
import os

from _workflows import BareModelCall, model_call
from temporalio.client import Client
from temporalio.worker import Worker

QUEUE = "idle-floor"


async def main() -> None:
    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"])
    worker = Worker(
        client,
        task_queue=QUEUE,
        workflows=[BareModelCall],
        activities=[model_call],
        max_concurrent_activities=1000,
        max_cached_workflows=2000,
        build_id="idle-floor",
    )
    async with worker:
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
