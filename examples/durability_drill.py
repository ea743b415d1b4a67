"""Test your agent's durability: kill its worker mid-tool and right after a refund, and check
that nothing ran twice; then replay the run's history as a CI job would before an upgrade.

``crash_drill(APP, AGENT, PROMPT, kill=...)`` runs the agent under a ``lattice worker``
process, SIGKILLs the worker at the kill point, starts another, and reports the run's result
and how often each tool's handler ran to completion. This file is the app as well: the
drill's workers load its ``support`` agent (``lattice worker examples/durability_drill.py``
would serve it too). Without ``ANTHROPIC_API_KEY`` a scripted fake model answers, in each
worker: it answers from the conversation, so the second worker's model picks up where the
first left off. See docs/durability.md.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from _demo import model_options
from pydantic import BaseModel

from agent_lattice import create_agent, tool
from agent_lattice.testing import (
    RecordedRequest,
    Reply,
    assert_replays,
    crash_drill,
    slow,
    text,
    tool_use,
)

PROMPT = "Order 42 arrived broken: please refund it."


class Order(BaseModel):
    order_id: str


def find_order(input: Order) -> str:
    """A read: running it again does no harm (``idempotent=True`` below)."""
    return f"order {input.order_id}: a teapot, 120 EUR, delivered broken"


def refund(input: Order) -> str:
    """A payment: it must never run twice (not marked idempotent)."""
    return f"refunded 120 EUR for order {input.order_id}"


def fake(request: RecordedRequest) -> Reply:
    """Look the order up, refund it, then say so: decided by the conversation so far."""
    results = [str(r["content"]) for r in request.tool_results]
    if not results:
        return tool_use("find_order", {"order_id": "42"})
    if results[0].startswith("order "):
        return tool_use("refund", {"order_id": "42"})
    return slow(text(f"Done: {results[0]}. Sorry about the teapot!"), delay=0.02)


support = create_agent(
    name="support",
    system_prompt="You handle refunds: look the order up, then refund it.",
    tools=[
        tool("find_order", "Look an order up", Order, find_order, idempotent=True),
        tool("refund", "Refund an order", Order, refund),
    ],
    workspace=False,
    **model_options("durability_drill", fake),
)


APP = str(Path(__file__).resolve())


async def main() -> None:
    for kill in ("mid_tool:find_order", "after_tool:refund"):
        report = await crash_drill(APP, "support", PROMPT, kill=kill)
        print(f"kill={kill}: {report.result.subtype}: {report.result.result}")
        print(f"  calls started {report.tool_starts}, runs completed {report.tool_runs}")
        twice = sorted(name for name, runs in report.tool_runs.items() if runs > 1)
        print(f"  tools that ran twice: {twice or 'none'}")

    # the last drill's run, exported as a CI job would save production runs, and replayed
    # against this agent-lattice (`lattice replay DIR` does the same from a shell)
    with tempfile.TemporaryDirectory() as histories:
        export = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "agent_lattice.cli", "runs", "export"],
            *[report.workflow_id, "--to", histories],
            stdout=asyncio.subprocess.DEVNULL,
        )
        assert await export.wait() == 0, "lattice runs export failed"
        replayed = await assert_replays(histories)
        print(f"replayed {replayed} exported history: deterministic")


if __name__ == "__main__":
    asyncio.run(main())
