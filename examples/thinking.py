"""Seeds, "Pass thinkingConfig..." and reasoningEffort: reasoning settings per agent and per query.

The scripted fake answers with what it received, so the output shows what was sent.
"""

from __future__ import annotations

import asyncio
import json

from _demo import model_options

from agent_lattice import create_agent
from agent_lattice.testing import RecordedRequest, Reply, message, text_block, thinking_block


def fake(request: RecordedRequest) -> Reply:
    thinking = request.body.get("thinking")
    effort = request.body.get("reasoning_effort")
    sent = f"thinking={json.dumps(thinking, sort_keys=True)} reasoning_effort={json.dumps(effort)}"
    blocks = [thinking_block("Let me work through it step by step.")] if thinking else []
    return message([*blocks, text_block(f"I was sent {sent}")])


options = model_options("thinking", fake)

agent = create_agent(
    **options,
    thinking_config={"type": "adaptive"},
)

kimi = create_agent(
    **options,
    reasoning_effort="high",  # Kimi K3 via an Anthropic-compatible gateway; no thinking_config
)


async def main() -> None:
    result = await agent.prompt("Solve this carefully.")
    print("agent default:  ", result.result)

    # budget_tokens is capped at max_tokens - 1 (max_tokens defaults to 4096).
    result = await agent.prompt(
        "Solve this carefully.", thinking_config={"type": "enabled", "budget_tokens": 8_000}
    )
    print("query override: ", result.result)
    thoughts = [b.thinking for b in (await agent.get_history())[-1].blocks if b.type == "thinking"]
    print("its thinking:   ", thoughts)

    result = await kimi.prompt("Solve this carefully.")
    print("kimi default:   ", result.result)
    result = await kimi.prompt("Solve this carefully.", reasoning_effort="low")
    print("kimi override:  ", result.result)


if __name__ == "__main__":
    asyncio.run(main())
