# pyright: strict
"""The payloads of durable approval: a decision sent to a run (an update), a request passed
up to the top-level query's stream (a signal), an updated input checked against its tool's
schema (a local activity)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .._approvals import ApprovalDecision, PendingApproval

__all__ = [
    "ApprovalDecision",
    "ForwardedApproval",
    "InputProblem",
    "PendingApproval",
    "ToolInputCheck",
]


class ForwardedApproval(BaseModel):
    """A request of this run or of a run beneath it, passed to the parent run (``via``: the
    run that sends it on), so the top-level query's stream shows it."""

    request: PendingApproval
    via: str


class ToolInputCheck(BaseModel):
    """An ``updated_input`` to check against its tool's schema before the decision holds."""

    agent_key: str
    session_id: str
    tool_name: str
    input: dict[str, Any]


class InputProblem(BaseModel):
    """What the tool's schema found wrong with the input (None: nothing)."""

    problem: str | None = None
