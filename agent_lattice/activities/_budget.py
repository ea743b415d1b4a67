"""The budget activity: a run's spending told to the queries whose budget it draws from."""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from ..workflows._budget_types import Bank, Spending, SpendReport, Statement
from ..workflows._contract import SPEND_UPDATE, ActivityName
from ._base import ActivitiesBase

# how long a bank's answer is waited for before the attempt fails (and is tried again)
ANSWER_TIMEOUT_S = 50.0


class BudgetActivities(ActivitiesBase):
    """The activity that keeps a tree's budget (the banks are workflows: see ``Bank``)."""

    @activity.defn(name=ActivityName.REPORT_SPEND)
    async def report_spend(self, input: SpendReport) -> list[Statement]:
        """Tell each bank what this run spent so far (an update of the bank's run, which
        keeps the books) and return what they answer (a local activity of the run). A bank
        whose query has ended, or whose worker does not keep books, is left out; one that
        does not answer in time fails the attempt."""
        said = await asyncio.gather(*(_tell(bank, input.spending) for bank in input.banks))
        return [s for s in said if s is not None]


async def _tell(bank: Bank, spending: Spending) -> Statement | None:
    handle = activity.client().get_workflow_handle(bank.workflow_id)
    try:
        return await asyncio.wait_for(
            handle.execute_update(SPEND_UPDATE, spending, result_type=Statement),
            ANSWER_TIMEOUT_S,
        )
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        activity.logger.info("bank %s has ended: %s", bank.workflow_id, err)
    except WorkflowUpdateFailedError as err:
        activity.logger.warning("bank %s refused a spending report: %s", bank.workflow_id, err)
    return None
