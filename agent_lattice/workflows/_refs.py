# pyright: strict
"""What a workflow is told about an agent, built from its config (client and worker side)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._types import AgentRef, CompactionRef, RequestOptions

if TYPE_CHECKING:
    from .._agent import Agent, AgentConfig

__all__ = ["agent_ref", "request_options", "workflow_id_for"]


def agent_ref(agent: Agent) -> AgentRef:
    """What a workflow needs to know of ``agent`` (its worker resolves the rest by key)."""
    config = agent.config
    return AgentRef(
        key=agent.key,
        name=agent.name,
        model=config.model,
        max_turns=config.max_turns,
        tools=[t.name for t in config.tools],
        cheap_tools=[t.name for t in config.tools if t.cheap],
        requires_output=config.output_schema is not None,
        max_concurrency=config.tool_concurrency.max_concurrency,
        result_hook=bool(config.hooks and config.hooks.on_tool_result),
        traced=config.tracer is not None,
        compaction=CompactionRef(**dataclasses.asdict(config.auto_compact))
        if config.auto_compact is not None
        else None,
        delegates=[
            t.name
            for t in config.tools
            if t.delegation is not None and t.delegation.kind != "adapter"
        ],
        member_adapters=[
            t.name
            for t in config.tools
            if t.delegation is not None
            and t.delegation.kind == "adapter"
            and t.delegation.team is not None
        ],
        idempotent_tools=[t.name for t in config.tools if t.idempotent],
        tool_timeouts={t.name: t.timeout_s for t in config.tools if t.timeout_s is not None},
        approval_timeout_s=config.approval_timeout_s,
        max_budget_usd=config.max_budget_usd,
    )


def workflow_id_for(agent: Agent, index: int) -> str:
    return f"{agent.name}-{agent.session_id}-{index}"


def request_options(
    config: AgentConfig,
    *,
    output_format: Any = None,
    thinking_config: Mapping[str, Any] | None = None,
    reasoning_effort: str | None = None,
    request_timeout_ms: int | None = None,
) -> RequestOptions:
    """A query's model parameters: the query's values over the agent's defaults."""
    thinking = thinking_config if thinking_config is not None else config.thinking_config
    return RequestOptions(
        output_format=output_format if output_format is not None else config.output_format,
        thinking=dict(thinking) if thinking is not None else None,
        reasoning_effort=reasoning_effort or config.reasoning_effort,
        timeout_ms=request_timeout_ms or config.request_timeout_ms,
    )
