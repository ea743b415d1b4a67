"""Tool batches: safe calls overlap, others run alone, results keep the tool_use order."""

from __future__ import annotations

import asyncio

from agent_lattice import ToolResult, tool
from agent_lattice.testing import Script, message, text, tool_use_block

from conftest import Expr


def batch(*calls: tuple[str, str]):
    return message(
        [tool_use_block(name, {"expr": arg}, id=f"toolu_{arg}") for name, arg in calls],
        stop_reason="tool_use",
    )


async def test_concurrency_safe_calls_overlap_and_keep_order(make_agent, fake_anthropic):
    running: set[str] = set()
    log: list[str] = []

    async def search(input: Expr) -> ToolResult:
        running.add(input.expr)
        log.append(f"start {input.expr}")
        await asyncio.sleep(0.3)
        running.discard(input.expr)
        log.append(f"end {input.expr}")
        if input.expr == "bad":
            raise RuntimeError("index offline")
        return ToolResult(content=f"found {input.expr}")

    async def write(input: Expr) -> ToolResult:
        log.append(f"write {input.expr}")
        assert not running, "an unsafe call never overlaps another"
        return ToolResult(content=f"wrote {input.expr}")

    safe_search = tool("search", "Search", Expr, search, is_concurrency_safe=lambda _: True)
    fake_anthropic.set_handler(
        Script(
            batch(
                ("search", "a"), ("search", "bad"), ("search", "c"), ("write", "w"), ("search", "d")
            ),
            text("done"),
        )
    )
    agent = make_agent(tools=[safe_search, tool("write", "Write", Expr, write)])

    result = await agent.prompt("go")

    assert result.subtype == "success"
    first_end = min(i for i, line in enumerate(log) if line.startswith("end"))
    assert {"start a", "start bad", "start c"} <= set(log[:first_end])  # the safe run overlapped
    assert log.index("write w") > max(log.index("end a"), log.index("end bad"), log.index("end c"))
    assert log.index("start d") > log.index("write w")
    results = fake_anthropic.requests[1].tool_results
    assert [r["tool_use_id"] for r in results] == [
        "toolu_a",
        "toolu_bad",
        "toolu_c",
        "toolu_w",
        "toolu_d",
    ]
    assert [r["is_error"] for r in results] == [False, True, False, False, False]
    assert "index offline" in results[1]["content"]


async def test_tools_without_a_declaration_run_one_at_a_time(make_agent, fake_anthropic):
    active = 0
    peak = 0

    async def slow(input: Expr) -> ToolResult:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.1)
        active -= 1
        return ToolResult(content=input.expr)

    fake_anthropic.set_handler(
        Script(batch(("slow", "1"), ("slow", "2"), ("slow", "3")), text("ok"))
    )
    await make_agent(tools=[tool("slow", "Slow", Expr, slow)]).prompt("go")
    assert peak == 1
