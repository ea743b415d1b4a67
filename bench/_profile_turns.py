"""Run agent-lattice queries back to back for a profiler (py-spy): ``python bench/_profile_turns.py
[prompt|query] [queries] [turns]``; prints each query's ms per turn."""

from __future__ import annotations

import asyncio
import os
import sys
import time

from _common import lattice_home, start_library_server
from peer import lattice_variant, start_fake_model

from agent_lattice.client import Runtime


async def main(kind: str, queries: int, turns: int) -> None:
    with lattice_home() as home:
        server = start_library_server(home)
        model, base_url = start_fake_model()
        os.environ["PEER_MODEL_URL"] = base_url
        try:
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
        finally:
            assert model.stdin is not None
            model.stdin.close()
            model.wait(10)
            server.stop()


if __name__ == "__main__":
    kind, queries, turns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    asyncio.run(main(kind, queries, turns))
