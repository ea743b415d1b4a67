"""Seeds, "Pass outputFormat...": ask the provider for JSON; the final text comes back unchanged.

``output_format="json"`` or ``{"type": "json_schema", "schema": {...}}`` is sent as the
provider's structured-output parameter (``output_config.format``); parse the text yourself.
"""

from __future__ import annotations

import asyncio
import json

from _demo import model_options

from agent_lattice import create_agent
from agent_lattice.testing import RecordedRequest, Reply, text

ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "number"}},
    "required": ["answer"],
    "additionalProperties": False,
}


def fake(request: RecordedRequest) -> Reply:
    fmt = (request.body.get("output_config") or {}).get("format")
    if fmt is None:
        return text("no output format was sent, so here is prose")
    if "answer" in fmt.get("schema", {}).get("properties", {}):
        return text('{"answer": 4}')
    return text('{"status": "ok", "items": 3}')


agent = create_agent(**model_options("output_format", fake))


async def main() -> None:
    json_result = await agent.prompt("Return JSON only.", output_format="json")
    print("json:", json_result.result)

    result = await agent.prompt(
        "Return the answer to 2 + 2.",
        output_format={"type": "json_schema", "schema": ANSWER_SCHEMA},
    )
    print("json_schema:", result.result)
    print("parsed by the application:", json.loads(result.result or "null"))


if __name__ == "__main__":
    asyncio.run(main())
