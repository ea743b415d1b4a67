"""Run agent-lattice queries back to back for a profiler (py-spy): ``python bench/_profile_turns.py
[prompt|query] [queries] [turns]``; prints each query's ms per turn."""

from __future__ import annotations

import asyncio
import sys
import time

from peer import lattice_variant, parties

from agent_lattice.client import Runtime


async def main(kind: str, queries: int, turns: int) -> None:
    with parties() as (server, base_url):
        runtime = await Runtime.connect(server.address, inline_workers=True, quiet=True)
        once = lattice_variant(runtime, base_url, streaming=kind == "query")
        await once(2, 0)
        for _ in range(queries):
            started, cpu = time.perf_counter(), time.process_time()
            await once(turns, 0)
            wall = (time.perf_counter() - started) * 1000 / turns
            used = (time.process_time() - cpu) * 1000 / turns
            print(f"{wall:.1f} ms/turn, {used:.1f} ms CPU/turn", flush=True)
        await runtime.close()


if __name__ == "__main__":
    kind, queries, turns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    asyncio.run(main(kind, queries, turns))
