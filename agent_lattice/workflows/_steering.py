# pyright: strict
"""Steers: a person's messages for the running query.

A steer is a ``steer`` update (the workflow declares it). Its validator refuses it before
anything is written when the run is ending (the loop's last step is ``Finish``, or it was
interrupted or aborted), while it hands over to a new run (``ContinueAsNew``: a retryable
refusal, the caller sends it again there), or when its text is not one; once accepted it
waits in workflow state, so a worker killed afterwards loses nothing (the next worker replays
the update). The model gets it at its next request: the loop adds the waiting steers after
the tool results of the batch that ran (:meth:`Steers.into`), or, when no batch came between,
as a user message of their own (the ``TakeSteers`` step). No new command comes of a run
without steers: histories recorded before steering replay unchanged.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from .._messages import ContentBlock, TextBlock
    from .._steer import steer_problem
    from .._steps import ContinueAsNew, Finish, Step
    from ._contract import FailureType
    from ._stop import Stop

__all__ = ["STEER_UPDATE", "Steers"]

STEER_UPDATE = "steer"


class Steers:
    """Owned by an AgentWorkflow: the steers it accepted and the model has not read yet."""

    def __init__(self, stop: Stop) -> None:
        self._stop = stop
        self.waiting: tuple[str, ...] = ()

    def check(self, text: str, step: Step | None) -> None:
        """The update's validator (``step``: the one the loop is executing): refused, with
        nothing in the history, when the run cannot take it any more."""
        where = workflow.info().workflow_id
        problem = steer_problem(text)
        if problem is None and (isinstance(step, Finish) or self._stop.stopping):
            problem = f"{where} is ending: the model makes no further request"
        elif problem is None and isinstance(step, ContinueAsNew):  # retryable: send again
            raise ApplicationError(
                f"{where} is continuing as a new run: send the steer again",
                type=FailureType.STEER_REFUSED,
            )
        if problem is not None:
            raise ApplicationError(problem, type=FailureType.STEER_REFUSED, non_retryable=True)

    def accept(self, text: str) -> None:
        self.waiting = (*self.waiting, text)

    def into(self, blocks: list[ContentBlock]) -> bool:
        """The waiting steers join a batch's results (after them: the API wants tool results
        first in that user message), unless the query is stopping. True when any did."""
        if not self.waiting or self._stop.stopping:
            return False
        blocks += self.take()
        return True

    def take(self) -> list[ContentBlock]:
        """The waiting steers, a text block each; none waits after."""
        texts, self.waiting = self.waiting, ()
        return [TextBlock(text=text) for text in texts]
