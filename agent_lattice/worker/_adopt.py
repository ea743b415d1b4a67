"""``lattice worker`` adopts the orphaned runs of the agents it serves.

A run started inline by a process that died stays RUNNING on that process's private task
queue (``<agent queue>@<host>-<pid>-<tag>``, see ``client/_orphans``). A worker that serves
the same agent definition finds such runs (at start, then every ``ADOPT_EVERY_S``) and polls
exactly their queues (the agent's and its delegation targets', with the dead process's tag)
until the runs close. The queue name holds the definition's key, so a worker only adopts runs
of definitions it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from temporalio.client import Client
from temporalio.service import RPCError

from .._agent import Agent
from ..activities._registry import AgentRegistry
from ..teams._delegation import delegation_targets
from ._pollers import owner_of, queue_served, serving

__all__ = ["ADOPT_EVERY_S", "adopt_orphans"]

log = logging.getLogger("agent_lattice.worker")

ADOPT_EVERY_S = 15.0
RUNNING_AGENT_RUNS = "WorkflowType = 'AgentWorkflow' AND ExecutionStatus = 'Running'"


async def adopt_orphans(
    client: Client,
    agents: Iterable[Agent],
    say: Callable[[str], None],
    *,
    every: float = ADOPT_EVERY_S,
) -> None:
    """Adopt orphaned runs of ``agents`` until cancelled; ``say`` reports each adoption."""
    # an explicit task_queue is shared, not private: the worker's own workers poll it
    targets = [a for a in delegation_targets(list(agents)) if not a.config.task_queue]
    registry = AgentRegistry(targets)
    bases = {f"{a.task_queue}@" for a in targets}
    adopted: dict[str, asyncio.Task[None]] = {}
    try:
        while True:
            for tag in [t for t, task in adopted.items() if task.done()]:
                del adopted[tag]
            try:
                found = await _orphans(client, bases, skip=set(adopted))
            except RPCError as err:  # the server is away for now: try again next round
                log.debug("could not look for orphaned runs: %s", err)
                found = {}
            for tag, ids in found.items():
                queues = [f"{a.task_queue}@{tag}" for a in targets]
                say(f"adopting orphaned run {', '.join(ids)} (process {tag} is gone)")
                adopted[tag] = asyncio.create_task(_serve(client, queues, registry, ids, say))
            await asyncio.sleep(every)
    finally:
        for task in adopted.values():
            task.cancel()
        for task in adopted.values():
            with contextlib.suppress(BaseException):
                await task


async def _orphans(client: Client, bases: set[str], skip: set[str]) -> dict[str, list[str]]:
    """Running agent runs on a private queue of one of ``bases`` that no one serves, by tag."""
    found: dict[str, list[str]] = {}
    served: dict[str, bool] = {}
    async for run in client.list_workflows(RUNNING_AGENT_RUNS):
        queue = run.task_queue
        tag = owner_of(queue)
        if tag is None or tag in skip or queue[: -len(tag)] not in bases:
            continue
        if queue not in served:
            served[queue] = await queue_served(client, queue)
        if not served[queue]:
            found.setdefault(tag, []).append(run.id)
    return found


async def _serve(
    client: Client,
    queues: list[str],
    registry: AgentRegistry,
    workflow_ids: list[str],
    say: Callable[[str], None],
) -> None:
    """Poll ``queues`` until the adopted runs closed."""
    async with serving(client, queues, registry):
        for workflow_id in workflow_ids:
            with contextlib.suppress(Exception):  # a failed run is closed too
                await client.get_workflow_handle(workflow_id).result()
    say(f"adopted run {', '.join(workflow_ids)} closed")
