"""The budget part of AgentWorkflow: a query's ``max_budget_usd`` bounds everything it reaches.

A query with a budget is a *bank* for the runs started under it — its delegates, their own
delegates, its team's members — at any depth (``AgentRunInput.banks`` names them). Before each
model request such a run reports what its own requests cost so far to each of its banks (an
update of the bank's run, from a local activity) and hears what the bank's whole tree spent:
at or past the budget, it ends ``error_max_budget`` instead of asking the model. It reports
its last request before it starts runs of its own (they start from what is left) and as it
ends. The bank's run keeps the books (``_ledger``: each run's own cost, by workflow
id), checks its own requests against them, and carries them across continue-as-new.

Every request starts with all earlier ones reported, so once the tree's reported spend reaches
the budget no run starts another: the overshoot is at most the one request each run had under
way (or had not reported yet) at that moment.
"""

from __future__ import annotations

import asyncio
import math

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from . import _contract as contract
    from ._budget_types import Spending, SpendReport, Statement
    from ._contract import SPEND_UPDATE
    from ._types import AgentRunInput


def budget_of(query: AgentRunInput) -> float | None:
    """A query's own budget: its ``max_budget_usd``, else its agent's (None: none)."""
    return query.max_budget_usd if query.max_budget_usd is not None else query.agent.max_budget_usd


class Budget:
    """AgentWorkflow's budget across its tree; its state is set in ``AgentWorkflow.__init__``."""

    _input: AgentRunInput
    _cost_usd: float  # this agent's own requests with a known price
    _cost_by_agent: dict[str, float | None]  # the finished children's shares
    _ledger: dict[str, float]  # a bank's books: each run under it, its own requests' cost
    _said: dict[str, Statement]  # what each bank this run draws from said last
    _reported_usd: float | None  # the spending this run last reported to its banks

    @workflow.update(name=SPEND_UPDATE)
    def spend(self, spending: Spending) -> Statement:
        """A run under this query (at any depth) reports what its own requests cost so far;
        the answer is what the whole query spent (a report is a running total: a repeated
        one changes nothing)."""
        run = spending.run
        self._ledger[run] = max(self._ledger.get(run, 0.0), spending.spent_usd)
        return Statement(
            workflow_id=workflow.info().workflow_id,
            spent_usd=self._spent_usd(),
            max_budget_usd=budget_of(self._input),
        )

    @spend.validator
    def _check_spending(self, spending: Spending) -> None:
        """A report is a finite cost of zero or more, else refused (it never reaches the
        books)."""
        if not math.isfinite(spending.spent_usd) or spending.spent_usd < 0:
            raise ValueError(f"a spending report of {spending.spent_usd!r} USD is not a cost")

    def _spent_usd(self) -> float:
        """What the query spent that has a price, what its budget is measured against: its
        own requests, and its tree's as the runs under it reported them or, when more, as its
        finished children's results and team reports say."""
        finished = sum(c for c in self._cost_by_agent.values() if c is not None)
        return self._cost_usd + max(finished, sum(self._ledger.values()))

    @property
    def _outer(self) -> Statement | None:
        """What the bank with the least left said last (None: the run draws from none)."""
        said = [s for s in self._said.values() if s.max_budget_usd is not None]
        return min(said, key=lambda s: (s.max_budget_usd or 0.0) - s.spent_usd, default=None)

    async def _ask_banks(self) -> bool:
        """Before a model request: report this run's spending to its banks and hear what they
        spent. False when it draws from none (nothing was asked)."""
        if not self._input.banks:
            return False
        await self._report_spending()
        return True

    async def _report_spending(self, *, if_changed: bool = False) -> None:
        """Report this run's spending to its banks (``if_changed``: unless they know it)."""
        input = self._input
        spent = self._cost_usd
        if not input.banks or (if_changed and spent == self._reported_usd):
            return
        report = SpendReport(
            spending=Spending(
                run=workflow.info().workflow_id, agent=input.agent.name, spent_usd=spent
            ),
            banks=input.banks,
        )
        try:
            said = await contract.report_spend(report, summary=f"{input.agent.name} · budget")
        except (ActivityError, CancelledError, asyncio.CancelledError) as err:
            # cancelled (the run is ending): the banks' last word stands
            workflow.logger.warning("spending not reported: %s", err)
            return
        self._reported_usd = spent
        for statement in said:
            self._said[statement.workflow_id] = statement
