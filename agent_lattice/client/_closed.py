"""A closed run's output, result and messages, however Temporal shows its close (see ``workflows/_outcomes``):
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

from .._messages import (
    AssistantMessage,
    ErrorInfo,
    ResultMessage,
    SDKMessage,
    SystemMessage,
    UserMessage,
)
from ..history._transcripts import TranscriptStore, run_transcript
from ..worker._encryption import refused_by_worker
from ..workflows._outcomes import OUTPUT_MEMO, output_of_failure
from ..workflows._types import AgentRunInput, AgentRunOutput

__all__ = [
    "canceled_output",
    "closed_output",
    "closed_result",
    "failed_output",
    "output_of_close",
    "recorded_messages",
]


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
    client: Client,
    workflow_id: str,
    err: WorkflowFailureError,
    run_id: str | None = None,
    output_type: type[AgentRunOutput] = AgentRunOutput,
) -> AgentRunOutput | None:
    """The output of a run whose result raised ``err``: Failed with an error result, or
    Canceled by a cancel request; None for any other close (``run_id``: that run's, else the
    workflow's latest; ``output_type``: a team run's is a ``TeamRunOutput``)."""
    output = output_of_failure(err.cause, output_type)
    if output is None and isinstance(err.cause, CancelledError):
        output = await canceled_output(client, workflow_id, run_id, output_type)
    return output


async def failed_output(client: Client, failure: Failure) -> AgentRunOutput | None:
    """The output a Failed close event's failure carries (None: not an error result's)."""
    return output_of_failure(await client.data_converter.decode_failure(failure))


async def canceled_output(
    client: Client,
    workflow_id: str,
    run_id: str | None = None,
    output_type: type[AgentRunOutput] = AgentRunOutput,
) -> AgentRunOutput | None:
    """The output a Canceled run left in its memo (None: it left none, as a run canceled
    before it could end interrupted, or recorded before)."""
    description = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
    if description.status != WorkflowExecutionStatus.CANCELED:
        return None
    output: AgentRunOutput | None = await description.memo_value(
        OUTPUT_MEMO, None, type_hint=output_type
    )
    return output


async def closed_result(client: Client, workflow_id: str) -> ResultMessage:
    """The result of a run, waiting for it to close: its own, however Temporal shows
    its close (Completed, Failed with an error result, Canceled by a cancel request);
    another failure becomes an error result, except a worker's refusal of the run's input
    (unencrypted, or under a key it lacks: the caller's configuration), raised as the
    error it was."""
    handle = client.get_workflow_handle(workflow_id, result_type=AgentRunOutput)
    try:
        output = await handle.result()
        return output.result
    except WorkflowFailureError as err:
        closed = await output_of_close(client, workflow_id, err)
        if closed is not None:
            return closed.result
        cause = err.cause or err
        refusal = refused_by_worker(cause)
        if refusal is not None:
            raise refusal from None
        return ResultMessage(
            subtype="error_during_execution",
            result=str(cause),
            is_error=True,
            session_id="",
            error=ErrorInfo(type=type(cause).__name__, message=str(cause)),
        )


async def recorded_messages(
    client: Client, store: TranscriptStore, workflow_id: str
) -> list[SDKMessage]:
    """The durable messages of a closed run, rebuilt from its input and output."""
    handle = client.get_workflow_handle(workflow_id)
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    (run_input,) = await client.data_converter.decode(started.input.payloads, [AgentRunInput])
    result = await closed_result(client, workflow_id)
    if not result.session_id:  # a failed or terminated run has no result of its own
        result = result.model_copy(
            update={"session_id": run_input.session_id, "workflow_id": workflow_id}
        )
    run_id = result.run_id or started.original_execution_run_id
    messages: list[SDKMessage] = [
        SystemMessage(
            subtype="init",
            session_id=run_input.session_id,
            model=run_input.agent.model,
            tools=run_input.agent.tools,
            agent=run_input.agent.name,
            workflow_id=workflow_id,
            run_id=run_id,
        )
    ]
    output = await closed_output(client, workflow_id)
    added = (await run_transcript(store, output, run_input.history))[1] if output else []
    turn = 0
    for message in added[1:]:
        if message.role == "assistant":
            turn += 1
            messages.append(
                AssistantMessage(message=message, session_id=run_input.session_id, turn=turn)
            )
        else:
            messages.append(UserMessage(message=message, session_id=run_input.session_id))
    messages.append(result)
    return messages
