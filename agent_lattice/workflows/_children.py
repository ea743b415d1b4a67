# pyright: strict
"""What AgentWorkflow and TeamWorkflow both do with the workflows they start."""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from ._books import budget_of
    from ._budget_types import Bank
    from ._delegation_types import ChildQuery, TeamChild, TeamRunInput
    from ._types import AgentRunInput, AgentRunOutput
    from ._visibility import PROMPT_MEMO, prompt_line, start_attributes

__all__ = ["signal_quietly", "start_child", "start_query"]


async def start_child(
    child: ChildQuery, parent: AgentRunInput, *, parent_id: str, summary: str
) -> workflow.ChildWorkflowHandle[Any, AgentRunOutput]:
    """A delegated query (or handed-off work) as a child workflow, with its parent's
    activity settings (and search attributes when the parent has them). ``parent`` is the
    query it works for, run as workflow ``parent_id``: the child draws from its budget, and
    from every budget the parent draws from."""
    banks = list(parent.banks)
    budget = budget_of(parent)
    if budget is not None:
        banks.append(Bank(workflow_id=parent_id, max_budget_usd=budget))
    query = child.child.model_copy(
        update={
            "settings": parent.settings,
            "search_attributes": parent.search_attributes,
            "index_every_s": parent.index_every_s,
            "banks": banks,
            "temporal_outcomes": parent.temporal_outcomes,
        }
    )
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
    the child to cancel. The memo holds the prompt's first line; an agent's run is known by
    its search attributes from the start (see ``_visibility``)."""
    kind: str = "AgentWorkflow"
    arg: AgentRunInput | TeamRunInput = query
    agent = query.agent
    attributes = (
        start_attributes(agent.name, query.session_id, agent.model)
        if query.search_attributes
        else None
    )
    if team is not None:
        kind, arg = "TeamWorkflow", team.model_copy(update={"lead": query})
        attributes = None  # the lead's own run carries them
    return await workflow.start_child_workflow(
        kind,
        arg,
        id=id,
        task_queue=task_queue,
        result_type=AgentRunOutput,
        parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
        static_summary=summary,
        memo={PROMPT_MEMO: prompt_line(query.prompt)},
        search_attributes=attributes,
    )


async def signal_quietly(handle: Any, name: str, *args: Any) -> None:
    """Signal a workflow that may have closed meanwhile: then there is nothing left to tell."""
    try:
        await handle.signal(name, *args)
    except Exception as err:
        workflow.logger.debug("signal %s failed: %s", name, err)
