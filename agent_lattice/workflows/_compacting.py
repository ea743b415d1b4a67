# pyright: strict
"""The compaction part of AgentWorkflow: the older part of the conversation replaced by a
model-written summary, in a durable step (an activity), when the conversation passes the
agent's threshold or a request overflowed the context window."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from .._messages import ModelMessage, SystemMessage, Usage
    from . import _contract as contract
    from ._types import AgentRunInput, CompactInput

__all__ = ["Compacting"]


class Compacting:
    """AgentWorkflow's compaction; its state is set in ``AgentWorkflow.run``."""

    _input: AgentRunInput
    _head: str | None
    _unsent: list[ModelMessage]
    _compacted: bool
    _usage: Usage
    # from Delegating and AgentWorkflow
    _add_cost: Callable[[float | None], None]
    _publish: Callable[[object], None]

    async def _compact(self) -> bool:
        """Replace the older part of the transcript with a model-written summary (a durable
        step). False when there was nothing safe to summarize or the summary failed."""
        input, s = self._input, self._input.settings
        compaction = input.agent.compaction
        assert compaction is not None
        try:
            out = await contract.compact(
                CompactInput(
                    agent_key=input.agent.key,
                    session_id=input.session_id,
                    head=self._head,
                    unsent=self._unsent,
                    keep_recent_messages=compaction.keep_recent_messages,
                    prompt=compaction.prompt,
                    timeout_ms=input.request.timeout_ms,
                ),
                contract.compaction_preset(s),
                summary=f"{input.agent.name} · compaction",
            )
        except (ActivityError, ApplicationError, CancelledError, asyncio.CancelledError):
            workflow.logger.warning("compaction failed; the conversation continues uncompacted")
            return False
        if out.head is None:
            return False
        self._head, self._unsent = out.head, []
        self._compacted = True
        if out.usage is not None:
            self._usage = self._usage + out.usage
            self._add_cost(out.cost_usd)
        self._publish(
            SystemMessage(
                subtype="compaction",
                session_id=input.session_id,
                compacted_messages=out.compacted_messages,
                usage=out.usage,
                workflow_id=workflow.info().workflow_id,
                run_id=workflow.info().run_id,
            )
        )
        return True
