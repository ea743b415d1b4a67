"""What AgentWorkflow and TeamWorkflow both do with the workflows they start."""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from ._types import (
        ActivitySettings,
        AgentRunInput,
        AgentRunOutput,
        ChildQuery,
        TeamChild,
        TeamRunInput,
    )

__all__ = ["signal_quietly", "start_child", "start_query"]


async def start_child(
    child: ChildQuery, settings: ActivitySettings, *, summary: str
) -> workflow.ChildWorkflowHandle[Any, AgentRunOutput]:
    """A delegated query (or handed-off work) as a child workflow, with its parent's
    activity settings."""
    query = child.child.model_copy(update={"settings": settings})
    team = child.team if isinstance(child, TeamChild) else None
    return await start_query(
        query, team, id=child.workflow_id, task_queue=child.task_queue, summary=summary
    )


async def start_query(
    query: AgentRunInput,
    team: TeamRunInput | None,
    *,
    id: str,
    task_queue: str | None,
    summary: str,
) -> workflow.ChildWorkflowHandle[Any, AgentRunOutput]:
    """A query as a child workflow: the agent's ``AgentWorkflow``, or, when the agent leads a
    team, that team's ``TeamWorkflow`` with ``query`` as its lead's. Closing the parent asks
    the child to cancel."""
    kind: str = "AgentWorkflow"
    arg: AgentRunInput | TeamRunInput = query
    if team is not None:
        kind, arg = "TeamWorkflow", team.model_copy(update={"lead": query})
    return await workflow.start_child_workflow(
        kind,
        arg,
        id=id,
        task_queue=task_queue,
        result_type=AgentRunOutput,
        parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
        static_summary=summary,
    )


async def signal_quietly(handle: Any, name: str, *args: Any) -> None:
    """Signal a workflow that may have closed meanwhile: then there is nothing left to tell."""
    try:
        await handle.signal(name, *args)
    except Exception as err:
        workflow.logger.debug("signal %s failed: %s", name, err)
