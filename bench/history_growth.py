"""Temporal history size of one query as it grows: transcript by reference vs by value.

One query runs N turns (a tool call per turn, a final answer at turn N) with tool outputs of
S bytes, through ``agent.query()`` on the embedded server, exactly as a script would. For each
(S, N) it prints the workflow history's event count and bytes, and beside them the bytes a
transcript-in-every-input design would store for the *same run*: our history, plus the JSON of
the whole transcript at each model request (what such a design puts in every model activity's
input), computed from this run's own transcript. Target: <= 5 MB at 100 turns x 20 KB, and
growth linear in turns (bytes per turn flat as N grows).

    python bench/history_growth.py                     # ~1 min
    python bench/history_growth.py --turns 10,50,100,200 --sizes 100,20000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import emit, history_figures, lattice_home, note, start_library_server, table
from pydantic import BaseModel

from agent_lattice import Runtime, create_agent, tool
from agent_lattice._messages import ModelMessage, TextBlock, ToolUseBlock, Usage
from agent_lattice.providers import ModelRequest


class Scripted:
    """Answers at once: ``tool_use`` of ``emit`` for turns < N, text at turn N (the prompt
    says ``turns=N``)."""

    async def create(self, request: ModelRequest, *, on_event: Any = None) -> ModelMessage:
        turns = int(request.messages[0].text.split("=")[1])
        turn = 1 + sum(1 for m in request.messages if m.role == "assistant")
        usage = Usage(input_tokens=10, output_tokens=5)
        if turn < turns:
            use = ToolUseBlock(id=f"toolu_{turn:05d}", name="emit", input={"i": turn})
            return ModelMessage(
                role="assistant", content=[use], stop_reason="tool_use", usage=usage
            )
        return ModelMessage(
            role="assistant", content=[TextBlock(text="done")], stop_reason="end_turn", usage=usage
        )


class Emit(BaseModel):
    i: int


def transcript_in_every_input(history: list[ModelMessage]) -> int:
    """Bytes of the transcript a by-value design sends with each model request of the run."""
    total = 0
    for k, message in enumerate(history):
        if message.role == "assistant":  # the request that produced it carried history[:k]
            total += sum(len(json.dumps(m.to_wire()).encode()) for m in history[:k])
    return total


async def run(runtime: Runtime, size: int, turns: int) -> list[object]:
    payload = "x" * size
    agent = create_agent(
        model="scripted",
        name=f"growth-{size}-{turns}",
        tools=[tool("emit", "Emit output", Emit, lambda _: payload)],
        model_client=Scripted(),
        max_turns=turns + 1,
    ).bind_runtime(runtime)
    result = await agent.prompt(f"turns={turns}", stream=False)
    assert result.subtype == "success" and result.num_turns == turns, result
    figures = await history_figures(runtime.client, result.workflow_id)
    history = await agent.get_history()
    peer = figures.bytes + transcript_in_every_input(history)
    return [
        size,
        turns,
        figures.events,
        figures.bytes / 1024,
        figures.bytes / turns / 1024,
        peer / 1024,
        peer / turns / 1024,
        peer / figures.bytes,
    ]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", default="10,50,100")
    parser.add_argument("--sizes", default="100,20000")
    args = parser.parse_args()
    ns = [int(n) for n in args.turns.split(",")]
    sizes = [int(s) for s in args.sizes.split(",")]
    with lattice_home() as home:
        server = start_library_server(home)
        runtime = await Runtime.connect(server.address, quiet=True)
        try:
            rows = []
            for size in sizes:
                for n in ns:
                    note(f"tool output {size} B, {n} turns ...")
                    rows.append(await run(runtime, size, n))
        finally:
            await runtime.close()
            server.stop()
    emit(
        table(
            [
                "tool output B",
                "turns",
                "events",
                "history KiB",
                "KiB/turn",
                "by-value KiB",
                "by-value KiB/turn",
                "by-value / ours",
            ],
            rows,
            title="Workflow history of one query (transcript by reference vs in every input)",
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
