"""pydantic-ai's Temporal integration, set up as its documentation does, for ``peer.py``.

Imported (passed through the workflow sandbox) only once ``PEER_MODEL_URL`` names the fake
model: the agent is built at import, like a module-level agent of an application. One tool,
``step``, as the agent-lattice agents of the benchmark have.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, ClassVar

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.temporal import PydanticAIWorkflow, TemporalAgent
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider


async def step(i: int) -> str:
    """One step of work."""
    return f"step {i} ok"


_model = AnthropicModel(
    "claude-bench",
    provider=AnthropicProvider(api_key="test", base_url=os.environ["PEER_MODEL_URL"]),
)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # TemporalAgent: the integration's documented wrapper
    agent = TemporalAgent(Agent(_model, name="peer", tools=[step]))


@workflow.defn(name="PeerPydanticAI")
class PeerPydanticAI(PydanticAIWorkflow):
    __pydantic_ai_agents__: ClassVar[list[Any]] = [agent]

    @workflow.run
    async def run(self, prompt: str) -> str:
        result = await agent.run(prompt)
        return result.output
