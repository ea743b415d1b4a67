"""Team mailbox operations: the default mailbox (a TeamMailboxWorkflow) against SQLite.

For each backend, one client sends N messages to a member's mailbox, then claims and
finishes them one by one (``claim_next`` + ``set_status``), and reads the inbox after each
claim, as a member working through a drain does. It prints the median and p90 latency of
each operation in milliseconds and the workflow backend's ratio to SQLite measured in the
same run (SQLite: a local file, the floor a durable store costs on this machine). The
workflow mailbox continues as new every 2000 events; N=300 crosses that once.

    python bench/mailbox_ops.py              # ~1 min
    python bench/mailbox_ops.py --messages 100
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _common import emit, lattice_home, median, note, pct, start_library_server, table

from agent_lattice import (
    Runtime,
    TeamMailbox,
    TeamMessage,
    create_sqlite_mailbox,
    create_workflow_mailbox,
)

OPERATIONS = ("send", "claim_next", "set_status", "inbox")


async def exercise(box: TeamMailbox, messages: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {op: [] for op in OPERATIONS}

    async def timed(op: str, call):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        result = await call
        times[op].append((time.perf_counter() - start) * 1000)
        return result

    for i in range(messages):
        await timed(
            "send", box.send(TeamMessage(from_mailbox="b::lead", to_mailbox="b::m", body=str(i)))
        )
    for _ in range(messages):
        claimed = await timed("claim_next", box.claim_next("b::m"))
        assert claimed is not None
        await timed("set_status", box.set_status(claimed.id, "done", result="ok"))
        await timed("inbox", box.inbox("b::m", status="pending"))
    assert await box.claim_next("b::m") is None
    return times


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=300)
    args = parser.parse_args()
    with lattice_home() as home:
        server = start_library_server(home)
        runtime = await Runtime.connect(server.address, quiet=True)
        try:
            backends = {
                "sqlite (baseline)": create_sqlite_mailbox(path=home / "bench.db"),
                "workflow (default)": create_workflow_mailbox(
                    f"bench-{uuid.uuid4().hex[:6]}", runtime=runtime
                ),
            }
            # warm-up: the mailbox worker, the first workflow task, the SQLite file
            for box in backends.values():
                await exercise(box, 5)
            note(f"{args.messages} messages per backend…")
            results = {name: await exercise(box, args.messages) for name, box in backends.items()}
        finally:
            await runtime.close()
            server.stop()
    base = results["sqlite (baseline)"]
    rows = []
    for op in OPERATIONS:
        for name, times in results.items():
            ratio = median(times[op]) / median(base[op])
            rows.append([op, name, median(times[op]), pct(times[op], 0.9), f"{ratio:.1f}x"])
    emit(
        table(
            ["operation", "backend", "median ms", "p90 ms", "vs sqlite"],
            rows,
            title=f"Team mailbox operations, {args.messages} messages",
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
