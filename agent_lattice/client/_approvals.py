"""Approval requests from any process: list the tool calls that wait for a person, decide,
and list how they ended and who decided.

A run keeps its waiting requests and how they ended in its memo, so listing needs no worker
(a run whose workers are all down is listed too); a decision is an update of the run that
waits, applied by the run's worker (it waits for one to come back). A decision names its
approver: the one given, else this client's Temporal identity (which Temporal records with
the update too).
"""

from __future__ import annotations

from typing import Any, TypeVar

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from .. import _settings
from .._approvals import (
    APPROVAL_HISTORY_MEMO,
    APPROVAL_MEMO,
    ApprovalDecision,
    PendingApproval,
    ResolvedApproval,
    check_decision,
)
from .._errors import ApprovalError
from ..worker._encryption import refused_by_worker
from ..worker._pollers import queue_served
from ._default import get_default_runtime
from ._orphans import orphan_hint, run_state
from ._runtime import Runtime

__all__ = [
    "decide",
    "find_approval",
    "list_pending_approvals",
    "list_resolved_approvals",
    "resolve_approval",
]

RUNNING_RUNS = "WorkflowType = 'AgentWorkflow' AND ExecutionStatus = 'Running'"


async def resolve_approval(
    workflow_id: str,
    approval_id: str,
    behavior: str = "allow",
    message: str | None = None,
    updated_input: dict[str, Any] | None = None,
    *,
    approver: str | None = None,
    runtime: Runtime | None = None,
) -> None:
    """Decide on the approval request ``approval_id`` of the run ``workflow_id`` (as the
    ``approval_request`` message or ``list_pending_approvals()`` names them), from any
    process: ``allow`` runs the tool (with ``updated_input`` when given, checked against the
    tool's schema), ``deny`` gives the model an error tool_result with ``message``.
    ``approver``: who decides, recorded with the decision (default: the runtime's Temporal
    client identity, ``runtime.client.identity``). Raises :class:`ApprovalError` when the
    decision cannot be applied (no such waiting request, one already decided, an approver
    not among the request's ``approvers``, an input the schema refuses), and
    :class:`UnknownEncryptionKeyError` or :class:`UnencryptedPayloadError` when the run's
    worker cannot read it (this process encrypts with a key the worker lacks, or has no keys
    and the worker has): then nothing changed."""
    decision = check_decision(approval_id, behavior, message, updated_input, approver)
    client = (runtime or await get_default_runtime()).client
    await decide(client, workflow_id, decision)


async def decide(client: Client, workflow_id: str, decision: ApprovalDecision) -> None:
    """Send ``decision`` to the run; its worker applies it, or refuses it (ApprovalError). A
    run no worker serves (its process died) is told nothing: the update would wait for one.
    A decision that names no approver is sent as ``client``'s identity's."""
    if decision.approver is None:
        decision = decision.model_copy(update={"approver": client.identity})
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


async def list_resolved_approvals(
    workflow_id: str | None = None, *, runtime: Runtime | None = None
) -> list[ResolvedApproval]:
    """How approval requests ended, oldest decision first: of the run ``workflow_id``
    (running or closed; the run that waited, as its ``approval_request`` named it), or of
    every running query. Each item names its ``approval_id``, ``tool_name``, ``behavior``
    (allow, deny, timed_out, cancelled), ``approver`` (who decided; None when no one did),
    ``requested_at`` and ``decided_at``. Read from the runs' memos (a run keeps its last 100):
    no worker needs to be up."""
    client = (runtime or await get_default_runtime()).client
    if workflow_id is None:
        found = await _of_every_run(client, APPROVAL_HISTORY_MEMO, ResolvedApproval)
    else:
        found = await _of_run(client, workflow_id, APPROVAL_HISTORY_MEMO, ResolvedApproval)
    return sorted(found, key=lambda r: r.decided_at)


async def find_approval(client: Client, approval_id: str, *within: str) -> str | None:
    """The run that holds ``approval_id``: looked for in the runs ``within`` first (their
    memo as the run holds it now), then among every running query (as visibility has it)."""
    for workflow_id in within:
        if any(p.approval_id == approval_id for p in await _of_run(client, workflow_id)):
            return workflow_id
    found = [p for p in await _of_every_run(client) if p.approval_id == approval_id]
    return found[0].workflow_id if found else None


M = TypeVar("M", PendingApproval, ResolvedApproval)


async def _of_run(
    client: Client,
    workflow_id: str,
    key: str = APPROVAL_MEMO,
    model: type[M] = PendingApproval,
) -> list[M]:
    """What the run's memo keeps under ``key``: its waiting requests (a running run's only:
    a run that ended waits for nothing), or how its requests ended (running or closed)."""
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return []
        raise
    if key == APPROVAL_MEMO and description.status != WorkflowExecutionStatus.RUNNING:
        return []
    return _items(await description.memo_value(key, None), model)


async def _of_every_run(
    client: Client, key: str = APPROVAL_MEMO, model: type[M] = PendingApproval
) -> list[M]:
    prefix = _settings.task_queue_prefix()
    found: list[M] = []
    async for execution in client.list_workflows(RUNNING_RUNS):
        if execution.task_queue.startswith(prefix):
            found += _items(await execution.memo_value(key, None), model)
    return found


def _items(memo: Any, model: type[M]) -> list[M]:
    return [model.model_validate(item) for item in memo or []]
