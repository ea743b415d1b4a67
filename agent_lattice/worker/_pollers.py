"""Who serves a task queue: its live workflow pollers, the process a private queue belongs
to, and workers on exactly a given set of queues (adopting orphans, ending one).

Liveness rule (``queue_served``): a run is served when a live worker polls its task queue for
workflow tasks. Temporal lists a poller for minutes after it stopped, so a poller counts as
live when (a) its last poll is recent: a live idle worker renews its long poll about every
60 s (measured on the dev server: entries aged up to 58 s before renewal), hence
``POLLER_FRESH`` = 70 s; and (b) for a lattice worker on this host and in this pid namespace
(its identity says so: ``worker._plugin.process_identity``), its process exists. So on the
same host a dead process's runs are orphans at once; any other worker (another host, another
container of the same host name, an identity of the user's) is judged dead 70 s after its
last poll.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import PollerInfo, TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest, DescribeTaskQueueResponse
from temporalio.client import Client

from .._processes import pid_alive
from ..activities._registry import AgentRegistry
from ..live._feeds import LIVE_MARK
from ._plugin import LatticePlugin, lattice_worker, process_identity

__all__ = [
    "POLLER_FRESH",
    "PRIVATE_STICKY_TIMEOUT",
    "live_pollers",
    "owner_of",
    "queue_served",
    "serving",
]

POLLER_FRESH = timedelta(seconds=70)
# A private queue's process is short-lived: when it dies, the workflow task waiting on its
# sticky queue moves to the normal queue (where an adopter polls) after this long.
PRIVATE_STICKY_TIMEOUT = timedelta(seconds=2)


def _poller_alive(identity: str, last_access: datetime | None) -> bool:
    """Judge a listed poller by its last poll, and one of this host's pids by its process."""
    if last_access is not None and datetime.now(UTC) - last_access > POLLER_FRESH:
        return False
    own = identity.partition(LIVE_MARK)[0]  # the live port a worker names is no part of it
    pid = own.partition("@")[0]
    if pid.isdigit() and own == process_identity(int(pid)):
        return pid_alive(int(pid))
    return True


async def live_pollers(
    client: Client, task_queue: str
) -> tuple[DescribeTaskQueueResponse, list[PollerInfo]]:
    """The task queue as the server describes it, and its live workflow pollers."""
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    live = []
    for poller in response.pollers:
        seen = (
            poller.last_access_time.ToDatetime(tzinfo=UTC)
            if poller.HasField("last_access_time")
            else None
        )
        if _poller_alive(poller.identity, seen):
            live.append(poller)
    return response, live


async def queue_served(client: Client, task_queue: str) -> bool:
    """Whether a live worker polls ``task_queue`` for workflow tasks (see the module doc)."""
    return bool((await live_pollers(client, task_queue))[1])


def owner_of(task_queue: str) -> str | None:
    """The process tag (``host-pid-tag``) of a queue private to a process, else None."""
    base, sep, tag = task_queue.rpartition("@")
    return tag if sep and base and tag else None


@contextlib.asynccontextmanager
async def serving(
    client: Client,
    queues: Iterable[str],
    registry: AgentRegistry,
    *,
    workflow_only: Iterable[str] = (),
) -> AsyncIterator[None]:
    """Workers on exactly ``queues`` with ``registry``'s agents while the block runs (on
    ``workflow_only`` queues, no activities are taken).

    An empty registry serves the workflow code only: each activity then fails with
    ``AgentNotRegistered`` (non-retryable), which is how ``lattice interrupt --force`` ends
    a run whose definition it does not have."""
    no_activities = set(workflow_only)
    workers = [
        lattice_worker(
            client,
            task_queue=queue,
            plugin=LatticePlugin(registry),
            sticky_queue_schedule_to_start_timeout=PRIVATE_STICKY_TIMEOUT,
            no_remote_activities=queue in no_activities,
        )
        for queue in dict.fromkeys(queues)
    ]
    tasks = [asyncio.create_task(worker.run()) for worker in workers]
    try:
        yield
    finally:
        for worker, task in zip(workers, tasks, strict=True):
            if not task.done():
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(worker.shutdown(), 10)
        for task in tasks:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
