"""Runs no process serves any more (orphans): finding them, and serving their queues again.

Inline agents (and ``lattice run`` without a worker) run on a task queue private to their
process: ``<agent queue>@<host>-<pid>-<tag>`` (``Runtime.task_queue_for``). When that process
dies, its runs stay RUNNING with nobody polling their queue. A later process adopts such a run
by polling exactly that queue (and its delegation targets' queues with the same tag). Whether
a queue is served, and the workers that serve one, are the worker's (``worker/_pollers``).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from temporalio.api.enums.v1 import (
    EventType,
    WorkerVersioningMode,
)
from temporalio.client import Client, WorkflowExecutionStatus

from .._errors import ConcurrentQueryError
from ..activities._registry import AgentRegistry
from ..worker._pollers import live_pollers, owner_of, queue_served, serving
from ..workflows._types import AgentRunInput

if TYPE_CHECKING:
    from .._agent import Agent

__all__ = [
    "RunState",
    "UnroutedBuild",
    "adoptable",
    "end_orphan",
    "orphan_hint",
    "run_queues",
    "run_state",
    "team_may_start",
    "unrouted_builds",
    "until_served",
]

T = TypeVar("T")


@dataclass(frozen=True)
class UnroutedBuild:
    """A build whose versioned workers poll a task queue that routes new runs elsewhere: its
    worker deployment's current version is another build, or it has none."""

    deployment: str
    build_id: str
    current: str | None  # the current version's build id; None: the deployment has none


async def unrouted_builds(client: Client, task_queue: str) -> list[UnroutedBuild]:
    """The builds of the live versioned workers polling ``task_queue`` when none of its live
    workers gets its new runs (Worker Versioning): new runs go to the current version of its
    worker deployment, or to unversioned workers while there is none. Empty when a live
    worker gets them, or when no versioned worker polls."""
    response, live = await live_pollers(client, task_queue)
    current = response.versioning_info.current_deployment_version
    routed_to = (current.deployment_name, current.build_id) if current.build_id else None
    builds: dict[tuple[str, str], None] = {}
    for poller in live:
        options = poller.deployment_options
        versioned = (
            options.worker_versioning_mode == WorkerVersioningMode.WORKER_VERSIONING_MODE_VERSIONED
        )
        build = (options.deployment_name, options.build_id) if versioned else None
        if build == routed_to:
            return []  # this worker gets the new runs
        if build is not None:
            builds[build] = None
    return [
        UnroutedBuild(name, build_id, routed_to[1] if routed_to else None)
        for name, build_id in builds
    ]


def _owner_text(tag: str) -> str:
    """``process 1234 on host`` from ``host-1234-abcdef`` (the host may hold dashes)."""
    host, _, rest = tag.rpartition("-")[0].rpartition("-")
    return f"process {rest} on {host}" if host and rest.isdigit() else f"process {tag}"


@dataclass
class RunState:
    """A run as its caller (attach, interrupt, a new session object, a worker) needs it."""

    workflow_id: str
    running: bool
    task_queue: str
    served: bool  # meaningful while running
    agent_key: str
    session_id: str

    @property
    def orphaned(self) -> bool:
        return self.running and not self.served


async def run_state(client: Client, workflow_id: str) -> RunState:
    """Describe a run (raises ``RPCError`` NOT_FOUND when there is none)."""
    handle = client.get_workflow_handle(workflow_id)
    description = await handle.describe()
    running = description.status == WorkflowExecutionStatus.RUNNING
    queue = description.task_queue
    run_input = await _input_of(client, workflow_id)
    return RunState(
        workflow_id=workflow_id,
        running=running,
        task_queue=queue,
        served=running and await queue_served(client, queue),
        agent_key=run_input.agent.key if run_input else "",
        session_id=run_input.session_id if run_input else "",
    )


async def _input_of(client: Client, workflow_id: str) -> AgentRunInput | None:
    """The run's input, from its first history event (None for a workflow of another kind)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    if started.workflow_type.name != "AgentWorkflow":
        return None
    (run_input,) = await client.data_converter.decode(started.input.payloads, [AgentRunInput])
    return run_input


def adoptable(state: RunState, agent: Agent | None) -> str | None:
    """The dead process's tag when ``agent`` can adopt the session's running query (None
    when it closed); else ``ConcurrentQueryError`` saying why and what to do instead."""
    workflow_id, session_id = state.workflow_id, state.session_id
    tag = owner_of(state.task_queue)
    if not state.running:
        return None
    if state.served:
        raise ConcurrentQueryError(
            f"session {session_id!r} has a query running ({workflow_id}), served by a live "
            f"worker; wait for it, or interrupt it with `lattice interrupt {workflow_id}`"
        )
    if agent is None or tag is None:
        raise ConcurrentQueryError(
            f"session {session_id!r} has a query running: " + orphan_hint(state)
        )
    if state.agent_key != agent.key:
        raise ConcurrentQueryError(
            f"session {session_id!r} has an orphaned query {workflow_id} of another "
            f"definition of agent {agent.name!r} (key {state.agent_key}; this one is "
            f"{agent.key}): only its own definition can finish it. End it, keeping its "
            f"completed turns, with `lattice interrupt --force {workflow_id}`"
        )
    print(
        f"agent-lattice: adopting {workflow_id} (its process is gone; task queue "
        f"{state.task_queue}): serving it here until it ends",
        file=sys.stderr,
    )
    return tag


async def until_served(client: Client, state: RunState, every: float = 1.0) -> None:
    """Wait until an orphaned run is adopted (a live worker polls its queue) or closed."""
    handle = client.get_workflow_handle(state.workflow_id)
    while not await queue_served(client, state.task_queue):
        if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
            return
        await asyncio.sleep(every)


def orphan_hint(state: RunState) -> str:
    """One line: where the run was, that nobody serves it, and the ways out."""
    tag = owner_of(state.task_queue)
    end = f"to end it keeping its completed turns, `lattice interrupt --force {state.workflow_id}`"
    if tag is None:  # a shared queue: any worker for the app serves it
        return (
            f"{state.workflow_id} waits for a worker: none serves its task queue "
            f"{state.task_queue}. Start `lattice worker APP` for its app; {end}"
        )
    return (
        f"{state.workflow_id} is orphaned: it ran in {_owner_text(tag)}, which is gone, on task "
        f"queue {state.task_queue}, and no worker serves it now. To adopt it, run the same "
        f"agent with session id {state.session_id!r} (create_agent(session_id=...)) or "
        f"`lattice worker APP` for its app; {end}"
    )


async def run_queues(client: Client, workflow_id: str) -> list[str]:
    """The task queues a run and its running child runs (delegation) are on."""
    queues: list[str] = []
    pending = [workflow_id]
    while pending:
        current = pending.pop()
        handle = client.get_workflow_handle(current)
        description = await handle.describe()
        if description.status != WorkflowExecutionStatus.RUNNING:
            continue
        if description.task_queue not in queues:
            queues.append(description.task_queue)
        async for event in handle.fetch_history_events():
            if event.event_type == (EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED):
                pending.append(
                    event.start_child_workflow_execution_initiated_event_attributes.workflow_id
                )
    return queues


async def team_may_start(client: Client, workflow_id: str) -> bool:
    """Whether a running team workflow may be about to start ``workflow_id`` as its lead's
    query: team ``team-<team>-<session>-<n>`` starts lead ``<lead>-<session>-<n>``."""
    tail = "-" + "-".join(workflow_id.rsplit("-", 2)[-2:])
    async for team in client.list_workflows(
        "WorkflowType = 'TeamWorkflow' AND ExecutionStatus = 'Running'", limit=200
    ):
        if team.id.endswith(tail):
            return True
    return False


async def end_orphan(
    client: Client, workflow_id: str, outcome: Awaitable[T], within: float
) -> T | None:
    """Serve a run's queues with no agent and interrupt it; ``outcome`` once it ended, or
    None after ``within`` seconds (the run is then terminated). A shared queue's activities
    are left alone: other runs wait there for their worker, and would fail here."""
    handle = client.get_workflow_handle(workflow_id)
    queues = await run_queues(client, workflow_id)
    shared = [q for q in queues if owner_of(q) is None]
    async with serving(client, queues, AgentRegistry(), workflow_only=shared):
        await handle.signal("interrupt")
        try:
            return await asyncio.wait_for(outcome, within)
        except TimeoutError:
            await handle.terminate(
                reason=f"lattice interrupt --force: not ended within {within:g} s"
            )
            return None
