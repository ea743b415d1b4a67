# pyright: strict
"""The steering part of AgentWorkflow: a person's message for the running query (``_steer``).

A steer is a ``steer`` update. Its validator refuses it before anything is written when the
run is ending (the loop's last step is ``Finish``, or it was interrupted or aborted), while it
hands over to a new run (``ContinueAsNew``: a retryable refusal, the caller sends it again
there), or when its text is not one; once accepted it waits in workflow state, so a worker
killed afterwards loses nothing (the next worker replays the update). The model gets
it at its next request: the loop adds the waiting steers after the tool results of the batch
that ran (``_steers_into``), or, when no batch came between, as a user message of their own
(the ``TakeSteers`` step). No new command comes of a run without steers: histories recorded
before steering replay unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from .._messages import (
        ContentBlock,
        ModelMessage,
        SystemMessage,
        TextBlock,
        UserMessage,
    )
    from .._steer import Steer, steer_problem
    from .._steps import ContinueAsNew, Finish, SteersTaken, Step
    from ._contract import FailureType
    from ._types import AgentRunInput, ModelCallOutput

__all__ = ["STEER_UPDATE", "Steering"]

STEER_UPDATE = "steer"


class Steering:
    """AgentWorkflow's steers. Its state starts empty (immutable defaults): the steers
    accepted and not in the conversation yet, and the step the loop is executing (set by
    ``AgentWorkflow._loop``)."""

    _steers: tuple[str, ...] = ()
    _step: Step | None = None
    _input: AgentRunInput
    _interrupted: bool
    _aborted: bool
    _head: str | None
    _unsent: list[ModelMessage]
    _publish: Callable[[object], None]
    _add: Callable[[ModelMessage, UserMessage], None]
    _take_reply: Callable[[], ModelCallOutput | None]
    _land: Callable[..., Awaitable[bool]]  # StoreLanding's

    @workflow.update(name=STEER_UPDATE)
    def steer(self, steer: Steer) -> None:
        """A message for the model, taken at its next request; shown on the run's stream
        at once (``system``, subtype ``steered``)."""
        self._steers = (*self._steers, steer.text)
        info = workflow.info()
        self._publish(
            SystemMessage(
                subtype="steered",
                session_id=self._input.session_id,
                agent=self._input.agent.name,
                workflow_id=info.workflow_id,
                message=steer.text,
            )
        )

    @steer.validator
    def _check_steer(self, steer: Steer) -> None:
        """Refused (nothing reaches the history) when the run cannot take it any more."""
        where = workflow.info().workflow_id
        problem = steer_problem(steer.text)
        if problem is None and (
            isinstance(self._step, Finish) or self._interrupted or self._aborted
        ):
            problem = f"{where} is ending: the model makes no further request"
        elif problem is None and isinstance(self._step, ContinueAsNew):  # retryable: send again
            raise ApplicationError(
                f"{where} is continuing as a new run: send the steer again",
                type=FailureType.STEER_REFUSED,
            )
        if problem is not None:
            raise ApplicationError(problem, type=FailureType.STEER_REFUSED, non_retryable=True)

    def _steers_into(self, blocks: list[ContentBlock]) -> bool:
        """The waiting steers join a batch's results (after them: the API wants tool results
        first in that user message), unless the query is stopping. True when any did."""
        if not self._steers or self._interrupted or self._aborted:
            return False
        blocks += [TextBlock(text=text) for text in self._steers]
        self._steers = ()
        return True

    async def _steer_step(self) -> SteersTaken:
        """The ``TakeSteers`` step: the reply the loop holds (a final answer the steers came
        during) joins the conversation, then the steers, as a user message of their own."""
        output = self._take_reply()
        if output is not None:
            await self._land(output.message, head=output.head)
        texts, self._steers = self._steers, ()
        message = ModelMessage(role="user", content=[TextBlock(text=text) for text in texts])
        self._add(message, UserMessage(message=message, session_id=self._input.session_id))
        await self._land(message, head=self._head, unsent=self._unsent)
        return SteersTaken()
