"""The client host of the multi-host test: runs the queries of ``multi_host_app`` and reports.

Started by ``tests/test_multi_host.py`` in a network namespace of its own, with
``TEMPORAL_ADDRESS`` naming the server's host and ``LATTICE_STREAM_HOST`` its own address (the
workers, on other hosts, connect there to push live tokens). Prints one JSON line per query:
its result and the text its live tokens spelled for the final turn. Then one query more from
a runtime that advertises 127.0.0.1, which no worker can reach from its host: it must still
finish, with the durable messages and no live tokens.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from agent_lattice import Agent, ResultMessage, StreamEventMessage
from agent_lattice.client import Runtime
from agent_lattice.testing import FAST_SETTINGS

import multi_host_app as app  # beside this script, on sys.path when it runs

# q01..q16 use tools, q17..q19 delegate, q20 runs the team
PLAN = [(f"q{i:02d}", "scribe" if i <= 16 else "boss" if i <= 19 else "crew") for i in range(1, 21)]


async def run(runtime: Runtime, q: str, kind: str) -> dict[str, Any]:
    if kind == "crew":
        target: Any = app.crew
        app.crew.lead.bind_runtime(runtime)  # its mailbox too: the workers host it
    else:
        target = Agent(getattr(app, kind).config)  # a fresh session per query
    tokens: list[StreamEventMessage] = []
    result: ResultMessage | None = None
    async for message in target.query(f"task {q}", runtime=runtime):
        if isinstance(message, StreamEventMessage):
            tokens.append(message)
        elif isinstance(message, ResultMessage):
            result = message
    assert result is not None
    final = [t for t in tokens if t.turn == result.num_turns]
    last = max((t.attempt for t in final), default=0)
    streamed = "".join(
        t.event["delta"].get("text", "")
        for t in final
        if t.attempt == last and t.event.get("type") == "content_block_delta"
    )
    return {
        "q": q,
        "kind": kind,
        "subtype": result.subtype,
        "result": result.result,
        "events": len(tokens),
        "streamed": streamed,
    }


async def main() -> None:
    runtime = await Runtime.connect(settings=FAST_SETTINGS, inline_workers=False)
    try:
        for done in asyncio.as_completed([run(runtime, q, kind) for q, kind in PLAN]):
            print(json.dumps(await done), flush=True)
    finally:
        await runtime.close()
    os.environ["LATTICE_STREAM_HOST"] = "127.0.0.1"  # this host's loopback: no worker's
    unreachable = await Runtime.connect(settings=FAST_SETTINGS, inline_workers=False)
    try:
        print(json.dumps({"unreachable": await run(unreachable, "q21", "scribe")}), flush=True)
    finally:
        await unreachable.close()


if __name__ == "__main__":
    asyncio.run(main())
