"""Approval requests from any process: list the tool calls that wait for a person, decide.

A run keeps its waiting requests in its memo, so listing needs no worker (a run whose
workers are all down is listed too); a decision is an update of the run that waits, applied
by the run's worker (it waits for one to come back).
"""

from __future__ import annotations

from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from .. import _settings
from .._approvals import APPROVAL_MEMO, ApprovalDecision, PendingApproval, check_decision
from .._errors import ApprovalError
from ..worker._encryption import refused_by_worker
from ..worker._pollers import queue_served
from ._default import get_default_runtime
from ._orphans import orphan_hint, run_state
from ._runtime import Runtime

__all__ = ["find_approval", "list_pending_approvals", "resolve_approval"]

RUNNING_RUNS = "WorkflowType = 'AgentWorkflow' AND ExecutionStatus = 'Running'"


async def resolve_approval(
    workflow_id: str,
    approval_id: str,
    behavior: str = "allow",
    message: str | None = None,
    updated_input: dict[str, Any] | None = None,
    *,
    runtime: Runtime | None = None,
) -> None:
    """Decide on the approval request ``approval_id`` of the run ``workflow_id`` (as the
    ``approval_request`` message or ``list_pending_approvals()`` names them), from any
    process: ``allow`` runs the tool (with ``updated_input`` when given, checked against the
    tool's schema), ``deny`` gives the model an error tool_result with ``message``. Raises
    :class:`ApprovalError` when the decision cannot be applied (no such waiting request, one
    already decided, an input the schema refuses), and :class:`UnknownEncryptionKeyError` or
    :class:`UnencryptedPayloadError` when the run's worker cannot read it (this process
    encrypts with a key the worker lacks, or has no keys and the worker has): then nothing
    changed."""
    decision = check_decision(approval_id, behavior, message, updated_input)
    client = (runtime or await get_default_runtime()).client
    await decide(client, workflow_id, decision)


async def decide(client: Client, workflow_id: str, decision: ApprovalDecision) -> None:
    """Send ``decision`` to the run; its worker applies it, or refuses it (ApprovalError). A
    run no worker serves (its process died) is told nothing: the update would wait for one."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        description = await handle.describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise ApprovalError(
                f"no running query {workflow_id!r} (it never existed, or is forgotten): no "
                f"approval {decision.approval_id!r} waits there"
            ) from None
        raise
    if description.status != WorkflowExecutionStatus.RUNNING:
        status = description.status.name.lower() if description.status else "closed"
        raise ApprovalError(
            f"{workflow_id} is no longer running ({status}): approval "
            f"{decision.approval_id!r} waits no more"
        )
    if not await queue_served(client, description.task_queue):
        hint = orphan_hint(await run_state(client, workflow_id))
        raise ApprovalError(f"{hint}. Nothing was decided: decide once a worker serves it")
    try:
        await handle.execute_update("resolve_approval", decision, result_type=PendingApproval)
    except WorkflowUpdateFailedError as err:
        cause = err.cause or err
        refusal = refused_by_worker(cause)  # the worker cannot read this process's decision
        if refusal is not None:
            raise refusal from None
        raise ApprovalError(getattr(cause, "message", None) or str(cause)) from None
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:  # it ended meanwhile
            raise ApprovalError(
                f"{workflow_id} ended before the decision on {decision.approval_id!r} arrived"
            ) from None
        raise


async def list_pending_approvals(
    workflow_id: str | None = None, *, runtime: Runtime | None = None
) -> list[PendingApproval]:
    """The tool calls waiting for a decision, oldest first: of the run ``workflow_id``, or of
    every running query (of this ``LATTICE_TASK_QUEUE_PREFIX``). Each item names its
    ``approval_id``, ``workflow_id``, ``agent``, ``tool_name``, ``tool_input``,
    ``requested_at`` and ``message``. Read from the runs' memos: no worker needs to be up."""
    client = (runtime or await get_default_runtime()).client
    found = await _of_run(client, workflow_id) if workflow_id else await _of_every_run(client)
    return sorted(found, key=lambda p: p.requested_at)


async def find_approval(client: Client, approval_id: str, *within: str) -> str | None:
    """The run that holds ``approval_id``: looked for in the runs ``within`` first (their
    memo as the run holds it now), then among every running query (as visibility has it)."""
    for workflow_id in within:
        if any(p.approval_id == approval_id for p in await _of_run(client, workflow_id)):
            return workflow_id
    found = [p for p in await _of_every_run(client) if p.approval_id == approval_id]
    return found[0].workflow_id if found else None


async def _of_run(client: Client, workflow_id: str) -> list[PendingApproval]:
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return []
        raise
    if description.status != WorkflowExecutionStatus.RUNNING:
        return []
    return _pending(await description.memo_value(APPROVAL_MEMO, None))


async def _of_every_run(client: Client) -> list[PendingApproval]:
    prefix = _settings.task_queue_prefix()
    found: list[PendingApproval] = []
    async for execution in client.list_workflows(RUNNING_RUNS):
        if execution.task_queue.startswith(prefix):
            found += _pending(await execution.memo_value(APPROVAL_MEMO, None))
    return found


def _pending(memo: Any) -> list[PendingApproval]:
    return [PendingApproval.model_validate(item) for item in memo or []]
