# pyright: strict
"""Compaction: the older part of the conversation replaced by a model-written summary, in a
durable step (an activity), when the conversation passes the agent's threshold or a request
overflowed the context window."""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from .._messages import ModelMessage
    from . import _contract as contract
    from ._types import AgentRunInput, CompactInput, CompactOutput

__all__ = ["compact"]


async def compact(
    input: AgentRunInput, head: str | None, unsent: list[ModelMessage]
) -> CompactOutput | None:
    """Summarize the older part of the transcript at ``head`` + ``unsent`` into a new head (a
    durable step). None when there was nothing safe to summarize or the summary failed: the
    conversation goes on as it is."""
    s = input.settings
    compaction = input.agent.compaction
    assert compaction is not None
    try:
        out = await contract.compact(
            CompactInput(
                agent_key=input.agent.key,
                session_id=input.session_id,
                head=head,
                unsent=unsent,
                keep_recent_messages=compaction.keep_recent_messages,
                prompt=compaction.prompt,
                timeout_ms=input.request.timeout_ms,
            ),
            contract.compaction_preset(s),
            summary=f"{input.agent.name} · compaction",
        )
    except (ActivityError, ApplicationError, CancelledError, asyncio.CancelledError):
        workflow.logger.warning("compaction failed; the conversation continues uncompacted")
        return None
    return out if out.head is not None else None
