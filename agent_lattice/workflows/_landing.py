# pyright: strict
"""AgentWorkflow's writes to its agent's history store: a delegated run whose agent has a
history store writes each of its messages there as it lands (the prompt, each assistant
message, each tool-results message), through a local activity the run awaits before it goes
on.

The run is the durable record of what landed (:class:`Landing`, carried across
continue-as-new and returned with the output), so the run's end writes only what did not
land, whichever worker ends it. A store bound to ``fail_on_error`` that fails stops the run
before its next model request. A top-level query's client writes its own store instead
(it owns the Agent): only delegated runs carry a ``landing``.
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from .._messages import ModelMessage, ToolResultBlock, ToolUseBlock
    from . import _contract as contract
    from ._contract import FailureType
    from ._failures import error_info
    from ._types import AgentRunInput, Landing, LandInput, ToolCallOutput

# Runs recorded before this change never carry a landing; the marker names the runs that land.
LAND_IN_STORE = "land-in-history-store"


class StoreLanding:
    """Owned by an AgentWorkflow: what of its conversation landed in its agent's history store
    (``landing``: None when the run writes none)."""

    def __init__(
        self, landing: Landing | None, input: AgentRunInput, on_failure: Callable[[], None]
    ) -> None:
        self.landing = landing.model_copy() if landing else None
        self._input = input
        self._on_failure = on_failure  # a store bound to fail_on_error failed: stop the run

    async def land(
        self,
        message: ModelMessage | None,
        *,
        head: str | None,
        unsent: list[ModelMessage] | None = None,
    ) -> bool:
        """Write ``message`` (None: the last of the conversation at ``head``) to the agent's
        history store. False once a store bound to fail_on_error has failed: the run is
        interrupted, so no model request follows."""
        landing = self.landing
        if landing is None:
            return True
        if landing.error is not None:
            return False
        if not workflow.patched(LAND_IN_STORE):
            self.landing = None
            return True
        input = self._input
        try:
            synced = await contract.land_message(
                LandInput(
                    agent_key=input.agent.key,
                    session_id=input.session_id,
                    index=landing.landed,
                    message=message,
                    head=head,
                    unsent=unsent or [],
                    synced=landing.synced,
                ),
                summary=f"{input.agent.name} · history store",
            )
        except (ActivityError, ApplicationError) as err:  # a local activity's: either
            info = error_info(err)
            if info.type != FailureType.HISTORY_STORE_ERROR:
                # written or not: the next write (or the run's end) rewrites the store
                landing.landed, landing.synced = landing.landed + 1, False
                return True
            landing.error = info
            self._on_failure()
            return False
        landing.landed, landing.synced = landing.landed + 1, synced
        return True

    def turn_dropped(self) -> None:
        """A turn whose reply had landed left the conversation: the store no longer holds
        the conversation, so the run's end rewrites it."""
        if self.landing is not None and self.landing.landed:
            self.landing.synced = False

    def not_stored(self, reply: ModelMessage) -> list[ToolCallOutput]:
        """The answers to the calls of a reply the store could not take: none of them runs."""
        assert self.landing is not None and self.landing.error is not None
        why = self.landing.error.message
        return [
            ToolCallOutput(block=_not_run(use, f"the agent's history store failed ({why})"))
            for use in reply.tool_uses
        ]


def _not_run(use: ToolUseBlock, why: str) -> ToolResultBlock:
    return ToolResultBlock(
        tool_use_id=use.id, content=f"Tool {use.name!r} was not run: {why}.", is_error=True
    )
