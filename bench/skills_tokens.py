"""What an agent's skills cost its requests: on demand (the default) against all injected.

An agent with K skills of about C characters of instructions each runs one query of N turns
(a tool call per turn, then the answer) against the fake Anthropic server; in ``on_demand``
mode its first turn loads one skill with the ``Skill`` tool. For each mode the script prints
what the query's requests carried, as the server received them: the system prompt's
characters summed over the requests, the whole bodies' bytes, and estimated input tokens (a
character count / 4: no tokenizer runs offline here), and the ratio on demand / all.

    python bench/skills_tokens.py                       # 10 skills, 1,500 chars, 6 turns
    python bench/skills_tokens.py --skills 20 --chars 4000 --turns 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _common import emit, lattice_home, note, start_library_server, table
from pydantic import BaseModel

from agent_lattice import Runtime, create_bare_agent, skill, tool
from agent_lattice.testing import FakeAnthropicServer, RecordedRequest, Reply, text, tool_use


class Step(BaseModel):
    n: int


def step(input: Step) -> str:
    return f"step {input.n} done"


def model(turns: int):
    def answer(request: RecordedRequest) -> Reply:
        turn = 1 + sum(1 for m in request.messages if m["role"] == "assistant")
        loads = any(t["name"] == "Skill" for t in request.tools)
        if loads and turn == 1:
            return tool_use("Skill", {"name": "skill-0"})
        done = turn - (1 if loads else 0)
        return tool_use("step", {"n": done}) if done < turns else text("finished")

    return answer


async def measure(runtime: Runtime, mode: str, skills: int, chars: int, turns: int) -> list[object]:
    bundle = [
        skill(
            name=f"skill-{i}",
            description=f"How to do task kind {i} well",
            instructions=(f"Rule {i}: " + "be precise and check the result. " * (chars // 33))[
                :chars
            ],
        )
        for i in range(skills)
    ]
    with FakeAnthropicServer(model(turns)) as fake:
        agent = create_bare_agent(
            api_key="none",
            base_url=fake.base_url,
            model="claude-test",
            name=f"skills-{mode}",
            skills=bundle,
            skills_mode=mode,
            tools=[tool("step", "Do a step.", Step, step)],
        )
        agent.bind_runtime(runtime)
        result = await agent.prompt("go")
        assert result.result == "finished", result
        system = sum(len(r.system or "") for r in fake.requests)
        body = sum(len(json.dumps(r.body)) for r in fake.requests)
    return [mode, len(fake.requests), system, body, body // 4]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skills", type=int, default=10)
    parser.add_argument("--chars", type=int, default=1500)
    parser.add_argument("--turns", type=int, default=6)
    args = parser.parse_args()
    with lattice_home() as home:
        server = start_library_server(home)
        runtime = await Runtime.connect(server.address, inline_workers=True)
        try:
            rows = [
                await measure(runtime, mode, args.skills, args.chars, args.turns)
                for mode in ("all", "on_demand")
            ]
        finally:
            await runtime.close()
    note(f"{args.skills} skills of {args.chars} chars, {args.turns} tool turns, one skill loaded")
    emit(
        table(
            ["mode", "requests", "system chars", "body bytes", "~input tokens"],
            rows,
            title="what the query's requests carried",
        )
    )
    all_, lazy = rows
    emit(
        f"on_demand / all: body bytes {lazy[3] / all_[3]:.2f}, system chars {lazy[2] / all_[2]:.3f}"
    )


if __name__ == "__main__":
    asyncio.run(main())
