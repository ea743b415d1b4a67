# pyright: strict
"""What a run under a budget and the query it draws from (its *bank*) tell each other (see
``_budget``)."""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["Bank", "SpendReport", "Spending", "Statement"]


class Bank(BaseModel):
    """A query with a budget, for a run started under it (delegated, a team member's work, at
    any depth): the run draws from that budget. The query's run keeps the books: each run under
    it reports what its own model requests cost so far (``Spending``) before each request and
    as it ends, and is told what the whole tree spent (``Statement``)."""

    workflow_id: str
    max_budget_usd: float


class Spending(BaseModel):
    """What one run's own model requests cost so far (those with a known price)."""

    run: str  # its workflow id
    agent: str
    spent_usd: float


class Statement(BaseModel):
    """A bank's answer: what its query spent, everything it reached as far as reported, and
    its budget."""

    workflow_id: str
    spent_usd: float
    max_budget_usd: float | None


class SpendReport(BaseModel):
    """A run's spending, for each of the banks it draws from (the closest last)."""

    spending: Spending
    banks: list[Bank]
