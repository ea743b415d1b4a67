"""Seeds, "Persistent History And Resume": a JSONL history store seeds the conversation and
mirrors every message; a second Agent over the same store continues it."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from _demo import model_options

from agent_lattice import create_agent, create_jsonl_history_store
from agent_lattice.testing import RecordedRequest, Reply, text


def fake(request: RecordedRequest) -> Reply:
    said = " ".join(m["content"] for m in request.messages if isinstance(m["content"], str))
    if "What is my name?" in said and "Ada" in said:
        return text("Your name is Ada.")
    return text("Nice to meet you.")


async def main() -> None:
    path = Path(tempfile.mkdtemp()) / ".agent-sessions" / "ada.jsonl"
    options = model_options("history_store", fake)

    first = create_agent(history_store=create_jsonl_history_store(path=path), **options)
    await first.prompt("My name is Ada.")

    # Another process would do the same: a new Agent over the same store.
    second = create_agent(history_store=create_jsonl_history_store(path=path), **options)
    result = await second.prompt("What is my name?")
    print(result.result)
    print(f"{len(path.read_text().splitlines())} messages in {path.name}")

    await second.replace_history(
        [
            {"role": "user", "content": "My name is Grace."},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello Grace."}]},
        ]
    )
    print(f"after replace_history: {len(await second.get_history())} messages")


if __name__ == "__main__":
    asyncio.run(main())
