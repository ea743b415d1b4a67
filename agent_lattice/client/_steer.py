"""Steering a running query from any process: ``steer(workflow_id, text)`` (see ``_steer``).

The steer is an update of the run; the run's validator refuses it, before anything is
written, when the run is ending. A run no worker serves is not sent it: the update would wait
for a worker to come back. While a run hands over to a new one (continue-as-new) its refusal
is a retryable one, and the steer is sent again, to the new run.
"""

from __future__ import annotations

import asyncio

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from .._steer import Steer, check_steer
from ..worker._encryption import refused_by_worker
from ..worker._pollers import queue_served
from ..workflows._contract import FailureType
from ..workflows._steering import STEER_UPDATE
from ._default import get_default_runtime
from ._orphans import orphan_hint, run_state
from ._runtime import Runtime

__all__ = ["send_steer", "steer"]

# how long a steer is sent again while its run continues as new (one task, usually)
RESEND_WITHIN_S = 10.0
RESEND_EVERY_S = 0.1


async def steer(workflow_id: str, text: str, *, runtime: Runtime | None = None) -> bool:
    """Send ``text`` to the running query ``workflow_id`` (a delegated child's run too),
    from any process: the model gets it at its next request, after the tool results of the
    batch that is running (see :meth:`Agent.steer`). True once the run holds it (durably:
    a worker that dies afterwards loses nothing); False when no query runs under that id
    (none, ended, or ending now) or no worker serves it (nothing was sent). Raises
    :class:`OptionError` for an empty or oversized text, and
    :class:`UnknownEncryptionKeyError` or :class:`UnencryptedPayloadError` when the run's
    worker cannot read it."""
    checked = check_steer(text)
    client = (runtime or await get_default_runtime()).client
    return await send_steer(client, workflow_id, checked) is None


async def send_steer(client: Client, workflow_id: str, steer: Steer) -> str | None:
    """None when the run accepted ``steer``; else why it did not (one line)."""
    handle = client.get_workflow_handle(workflow_id)
    loop = asyncio.get_running_loop()
    until = loop.time() + RESEND_WITHIN_S
    while True:
        try:
            description = await handle.describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return f"no query {workflow_id!r} (it never existed, or is forgotten)"
            raise
        if description.status != WorkflowExecutionStatus.RUNNING:
            status = description.status.name.lower() if description.status else "closed"
            return f"{workflow_id} is not running ({status}): no model request will read it"
        if description.workflow_type != "AgentWorkflow":
            return (
                f"{workflow_id} is a {description.workflow_type}, not an agent's query: steer "
                "the query of the agent that should read it (a team's lead, a member's run)"
            )
        if not await queue_served(client, description.task_queue):
            hint = orphan_hint(await run_state(client, workflow_id))
            return f"{hint}. The steer was not sent: send it once a worker serves the run"
        try:
            await handle.execute_update(STEER_UPDATE, steer)
            return None
        except WorkflowUpdateFailedError as err:
            cause = err.cause or err
            refusal = refused_by_worker(cause)  # the worker cannot read this process's payload
            if refusal is not None:
                raise refusal from None
            if not isinstance(cause, ApplicationError) or cause.type != FailureType.STEER_REFUSED:
                raise
            if cause.non_retryable or loop.time() >= until:
                return cause.message
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:  # it ended meanwhile
                return f"{workflow_id} ended before the steer reached it"
            raise
        await asyncio.sleep(RESEND_EVERY_S)  # it continues as new: the new run takes it
