# pyright: strict
"""A query's books: the usage and cost of everything it ran, each agent's share apart, and its
``max_budget_usd``, which bounds everything it reaches.

A query with a budget is a *bank* for the runs started under it — its delegates, their own
delegates, its team's members — at any depth (``AgentRunInput.banks`` names them). Before each
model request such a run reports what its own requests cost so far to each of its banks (an
update of the bank's run, from a local activity) and hears what the bank's whole tree spent:
at or past the budget, it ends ``error_max_budget`` instead of asking the model. It reports
its last request before it starts runs of its own (they start from what is left) and as it
ends. The bank's run keeps the ledger (each run's own cost, by workflow id), checks its own
requests against it, and carries it across continue-as-new.

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
    from .._messages import ResultMessage, Usage
    from . import _contract as contract
    from ._budget_types import Spending, SpendReport, Statement
    from ._types import AgentRunInput


def budget_of(query: AgentRunInput) -> float | None:
    """A query's own budget: its ``max_budget_usd``, else its agent's (None: none)."""
    return query.max_budget_usd if query.max_budget_usd is not None else query.agent.max_budget_usd


class Books:
    """Owned by an AgentWorkflow: what its query used and spent, carried across
    continue-as-new, and its budget's checks."""

    def __init__(self, input: AgentRunInput) -> None:
        self._input = input
        carried = input.continuation
        self.usage = carried.usage if carried else Usage()  # the whole tree's
        # the finished children's usage and cost, by agent
        self.usage_by_agent: dict[str, Usage] = dict(carried.usage_by_agent) if carried else {}
        self.cost_by_agent: dict[str, float | None] = dict(carried.cost_by_agent) if carried else {}
        self.cost_usd = carried.cost_usd if carried else 0.0  # own requests with a known price
        self.cost_unknown = carried.cost_unknown if carried else False  # one of them had none
        # a bank's ledger: each run under it, its own requests' cost
        self.ledger: dict[str, float] = dict(carried.ledger) if carried else {}
        self._said: dict[str, Statement] = {}  # what each bank this run draws from said last
        self._reported_usd: float | None = None  # what this run last reported to its banks

    def add_usage(self, usage: Usage | None) -> None:
        """One of this agent's own requests (a reply, a cut-off stream, a compaction)."""
        if usage is not None:
            self.usage = self.usage + usage

    def add_cost(self, cost: float | None) -> None:
        """One of this agent's own model requests (None: its model has no known price)."""
        if cost is None:
            self.cost_unknown = True
        else:
            self.cost_usd += cost

    def add_child(self, result: ResultMessage) -> None:
        """A child's usage is the parent's too; each agent's own share is kept apart."""
        self.usage = self.usage + result.usage
        shares = result.usage_by_agent or {"agent": result.usage}
        for name, usage in shares.items():
            self.usage_by_agent[name] = self.usage_by_agent.get(name, Usage()) + usage
            # a share without a cost (a run from before costs) is unknown unless it used nothing
            cost = result.cost_by_agent.get(name, 0.0 if usage == Usage() else None)
            self.cost_by_agent[name] = _plus(self.cost_by_agent.get(name, 0.0), cost)

    def cost_shares(self) -> dict[str, float | None]:
        """Each agent's cost, beside :meth:`usage_shares`: the children's, this agent's own."""
        shares = dict(self.cost_by_agent)
        name = self._input.agent.name
        own = None if self.cost_unknown else self.cost_usd
        shares[name] = _plus(shares.get(name, 0.0), own)
        return shares

    def usage_shares(self) -> dict[str, Usage]:
        """Each agent's own usage: the children's as they reported it, this agent's the rest."""
        shares = dict(self.usage_by_agent)
        children = Usage()
        for usage in shares.values():
            children = children + usage
        name = self._input.agent.name
        own = Usage(
            input_tokens=self.usage.input_tokens - children.input_tokens,
            output_tokens=self.usage.output_tokens - children.output_tokens,
            cache_creation_input_tokens=self.usage.cache_creation_input_tokens
            - children.cache_creation_input_tokens,
            cache_read_input_tokens=self.usage.cache_read_input_tokens
            - children.cache_read_input_tokens,
        )
        shares[name] = shares.get(name, Usage()) + own
        return shares

    def spend(self, spending: Spending) -> Statement:
        """The ``spend`` update (the workflow declares it): a run under this query (at any
        depth) reports what its own requests cost so far; the answer is what the whole query
        spent (a report is a running total: a repeated one changes nothing)."""
        run = spending.run
        self.ledger[run] = max(self.ledger.get(run, 0.0), spending.spent_usd)
        return Statement(
            workflow_id=workflow.info().workflow_id,
            spent_usd=self.spent_usd(),
            max_budget_usd=budget_of(self._input),
        )

    @staticmethod
    def check_spending(spending: Spending) -> None:
        """A report is a finite cost of zero or more, else refused (it never reaches the
        ledger)."""
        if not math.isfinite(spending.spent_usd) or spending.spent_usd < 0:
            raise ValueError(f"a spending report of {spending.spent_usd!r} USD is not a cost")

    def spent_usd(self) -> float:
        """What the query spent that has a price, what its budget is measured against: its
        own requests, and its tree's as the runs under it reported them or, when more, as its
        finished children's results and team reports say."""
        finished = sum(c for c in self.cost_by_agent.values() if c is not None)
        return self.cost_usd + max(finished, sum(self.ledger.values()))

    @property
    def outer(self) -> Statement | None:
        """What the bank with the least left said last (None: the run draws from none)."""
        said = [s for s in self._said.values() if s.max_budget_usd is not None]
        return min(said, key=lambda s: (s.max_budget_usd or 0.0) - s.spent_usd, default=None)

    async def ask_banks(self) -> bool:
        """Before a model request: report this run's spending to its banks and hear what they
        spent. False when it draws from none (nothing was asked)."""
        if not self._input.banks:
            return False
        await self.report_spending()
        return True

    async def report_spending(self, *, if_changed: bool = False) -> None:
        """Report this run's spending to its banks (``if_changed``: unless they know it)."""
        input = self._input
        spent = self.cost_usd
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


def _plus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b
