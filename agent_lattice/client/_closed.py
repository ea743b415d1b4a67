"""A closed run's output, however Temporal shows its close (see ``workflows/_outcomes``):
Completed (the workflow's result), Failed with an error result (the failure's details) or
Canceled by a cancel request that interrupted it (its memo). Every caller reads the same typed
output from each, so the session's next query goes on from it."""

from __future__ import annotations

from temporalio.api.failure.v1 import Failure
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
)
from temporalio.exceptions import CancelledError

from ..workflows._outcomes import OUTPUT_MEMO, output_of_failure
from ..workflows._types import AgentRunOutput

__all__ = ["canceled_output", "closed_output", "failed_output", "output_of_close"]


async def closed_output(client: Client, workflow_id: str) -> AgentRunOutput | None:
    """The output of the run ``workflow_id`` (its latest, continued-as-new ones followed),
    waiting for it to close; None when it closed without one (terminated, timed out, failed
    outside its loop)."""
    handle = client.get_workflow_handle(workflow_id, result_type=AgentRunOutput)
    try:
        return await handle.result()
    except WorkflowFailureError as err:
        return await output_of_close(client, workflow_id, err)


async def output_of_close(
    client: Client, workflow_id: str, err: WorkflowFailureError, run_id: str | None = None
) -> AgentRunOutput | None:
    """The output of a run whose result raised ``err``: Failed with an error result, or
    Canceled by a cancel request; None for any other close (``run_id``: that run's, else the
    workflow's latest)."""
    output = output_of_failure(err.cause)
    if output is None and isinstance(err.cause, CancelledError):
        output = await canceled_output(client, workflow_id, run_id)
    return output


async def failed_output(client: Client, failure: Failure) -> AgentRunOutput | None:
    """The output a Failed close event's failure carries (None: not an error result's)."""
    return output_of_failure(await client.data_converter.decode_failure(failure))


async def canceled_output(
    client: Client, workflow_id: str, run_id: str | None = None
) -> AgentRunOutput | None:
    """The output a Canceled run left in its memo (None: it left none, as a run canceled
    before it could end interrupted, or recorded before)."""
    description = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
    if description.status != WorkflowExecutionStatus.CANCELED:
        return None
    output: AgentRunOutput | None = await description.memo_value(
        OUTPUT_MEMO, None, type_hint=AgentRunOutput
    )
    return output
