# pyright: strict
"""How a run ends as Temporal shows it: its status says its outcome.

A query whose result is an error (``error_*``) ends its workflow Failed: a non-retryable
``ApplicationError`` whose type is the subtype, whose message is the error's and whose details
carry the run's whole output (``AgentRunOutput``: the result, the transcript's head, the
stream's tail), so Temporal's failure counts, alerts and ``ExecutionStatus="Failed"`` see it,
and every caller still reads the typed result (``output_of_failure``).

A Temporal cancel request (the UI's "Request Cancellation", ``temporal workflow cancel``,
``handle.cancel()``) is the run's interrupt: the loop finishes ``interrupted``, its completed
turns kept and its search attributes upserted, and the workflow ends Canceled. temporalio 1.35
sends a workflow's cancel command without details, so a canceled close carries no output: the
run puts it in its memo (``OUTPUT_MEMO``, for clients) and sends it to the run that started it
(the ``child_output`` signal, before it ends: the parent has it when it hears the child ended).
The cancel request goes on to the runs it started as their own cancel requests.

The run's body runs in a task of its own, out of the request's reach (asyncio's cancellation
would cancel whatever the body awaits: a tool call, a child, an approval's wait); the request
becomes the interrupt instead (``on_cancel``). Runs recorded before this
(``AgentRunInput.temporal_outcomes`` unset) complete whatever their result, as they did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.exceptions import ApplicationError, CancelledError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from ._children import signal_quietly
    from ._types import AgentRunOutput

__all__ = [
    "CHILD_OUTPUT_SIGNAL",
    "OUTPUT_MEMO",
    "ChildOutput",
    "Outcomes",
    "output_of_failure",
    "wait_condition",
]

# the memo key of a canceled run's output
OUTPUT_MEMO = "lattice_output"
CHILD_OUTPUT_SIGNAL = "child_output"


class ChildOutput(BaseModel):
    """A run's output, for the run that started it, sent before it ends Canceled."""

    workflow_id: str
    output: AgentRunOutput


def output_of_failure(
    err: BaseException | None, output_type: type[AgentRunOutput] = AgentRunOutput
) -> AgentRunOutput | None:
    """The output a run that ended Failed with an error result carries in its failure (``err``:
    that failure, or a child's error wrapping it), read as ``output_type`` (a team run's:
    ``TeamRunOutput``); None for a failure of another kind."""
    cause = err.cause if isinstance(err, ChildWorkflowError) else err
    if not isinstance(cause, ApplicationError) or not cause.details:
        return None
    if not (cause.type or "").startswith("error_"):
        return None
    try:
        output = output_type.model_validate(cause.details[0])
    except ValidationError:
        return None
    return output if output.result.subtype == cause.type else None


async def wait_condition(
    fn: Callable[[], bool],
    *,
    timeout: timedelta | None = None,  # noqa: ASYNC109 - workflow.wait_condition's, a timer
    timeout_summary: str | None = None,
    shielded: bool,
) -> None:
    """``workflow.wait_condition`` in a run whose body the cancel request does not cancel
    (``shielded``: ``temporal_outcomes``). temporalio raises ``CancelledError`` from a wait
    under way when the request came, as if its task had been cancelled with the run's; here
    the wait ends as it would have: the condition holds, or its timeout passed."""
    try:
        await workflow.wait_condition(fn, timeout=timeout, timeout_summary=timeout_summary)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if not shielded or task is None or task.cancelling():
            raise  # the task itself was cancelled
        if workflow.cancellation_reason() is None:
            raise
        if not fn():
            raise TimeoutError from None


class Outcomes:
    """A run's end as Temporal shows it, owned by AgentWorkflow and TeamWorkflow: the body runs
    out of the cancel request's reach, and the request calls ``on_cancel`` (the run's own
    interrupt) instead."""

    def __init__(self, on_cancel: Callable[[], None]) -> None:
        self._on_cancel = on_cancel
        self.cancel_requested = False  # a Temporal cancel request interrupted the run
        self._child_outputs: dict[str, AgentRunOutput] = {}  # by the child's workflow id

    def child_output(self, ended: ChildOutput) -> None:
        """The ``child_output`` signal (the workflow declares it): a run this one started is
        ending Canceled, and this is its output (see :meth:`ended_child`)."""
        self._child_outputs[ended.workflow_id] = ended.output

    async def run(self, body: Coroutine[Any, Any, AgentRunOutput]) -> AgentRunOutput:
        """Run ``body`` to the run's output, a cancel request meanwhile its interrupt; then end
        as Temporal should show it (:meth:`_end`)."""
        task = asyncio.ensure_future(body)
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                if task.done() and not task.cancelled():
                    break  # it had ended: the request came too late to interrupt it
                if task.done() or self.cancel_requested:
                    raise  # the worker evicts the run
                if workflow.cancellation_reason() is None:
                    raise
                self.cancel_requested = True
                self._on_cancel()
        return await self._end(task.result())

    async def _end(self, output: AgentRunOutput) -> AgentRunOutput:
        """Completed with the output, Failed with an error result (the output in the failure's
        details), or Canceled when the cancel request interrupted the run (the output in the
        memo and sent to the parent run first). The search attributes were upserted already."""
        result = output.result
        if result.subtype.startswith("error"):
            raise ApplicationError(
                result.result or result.subtype, output, type=result.subtype, non_retryable=True
            )
        if not (self.cancel_requested and result.subtype == "interrupted"):
            return output
        info = workflow.info()
        workflow.upsert_memo({OUTPUT_MEMO: output})
        if info.parent is not None:
            parent = workflow.get_external_workflow_handle(info.parent.workflow_id)
            ended = ChildOutput(workflow_id=info.workflow_id, output=output)
            await signal_quietly(parent, CHILD_OUTPUT_SIGNAL, ended)
        raise CancelledError("the run was cancelled: it ended interrupted")

    def ended_child(self, err: ChildWorkflowError, workflow_id: str) -> AgentRunOutput | None:
        """The output of a child run that ended Failed with an error result, or Canceled by a
        cancel request (it sent its output first); None when it ended otherwise."""
        output = output_of_failure(err)
        if output is None and isinstance(err.cause, CancelledError):
            output = self._child_outputs.pop(workflow_id, None)
        return output
