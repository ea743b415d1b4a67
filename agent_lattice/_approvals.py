"""Durable human approval of tool calls: what a waiting call asks, what a decision says.

A call of a tool declared ``tool(..., requires_approval=True)``, or one the ``permission``
callback answers with ``{"behavior": "ask", "message": ...}``, does not run: its run publishes
a ``system`` message of subtype ``approval_request`` and waits, in workflow state (no activity
runs and no worker slot is held while it waits), for a decision: ``allow`` runs the tool (with
``updated_input`` when given), ``deny`` gives the model an error tool_result with the
decision's message. ``approval_timeout_s`` turns an undecided request into a denial ("approval
timed out"). Decisions come from ``agent.approve()``/``agent.deny()``, from
``resolve_approval()`` in any process, or from ``lattice approve``/``lattice deny``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

from ._errors import OptionError

__all__ = [
    "APPROVAL_MEMO",
    "ApprovalAsk",
    "ApprovalDecision",
    "PendingApproval",
    "check_decision",
]

# the memo key under which a run keeps its pending requests: readable with no worker up
# (describe, list), so pending approvals are listed even while every worker is down
APPROVAL_MEMO = "lattice_approvals"
TIMED_OUT = "approval timed out"

Behavior = Literal["allow", "deny"]


class ApprovalAsk(BaseModel):
    """A tool call that waits for a decision (the tool activity's answer instead of running
    the tool): why, in the permission callback's words when it asked."""

    message: str | None = None


class PendingApproval(BaseModel):
    """One tool call waiting for a decision, as ``list_pending_approvals()`` lists it."""

    approval_id: str
    workflow_id: str
    agent: str
    tool_name: str
    tool_input: Any = None
    tool_use_id: str
    requested_at: datetime
    message: str | None = None


class ApprovalDecision(BaseModel):
    """A decision on one request: ``allow`` (with ``updated_input`` replacing the model's
    input) or ``deny`` (``message`` goes to the model)."""

    approval_id: str
    behavior: Behavior
    message: str | None = None
    updated_input: dict[str, Any] | None = None


def check_decision(
    approval_id: Any, behavior: Any, message: Any, updated_input: Any
) -> ApprovalDecision:
    """A decision's arguments, checked before anything is sent."""
    if not isinstance(approval_id, str) or not approval_id:
        raise OptionError(f"approval_id must be a non-empty string; got {approval_id!r}")
    if behavior not in ("allow", "deny"):
        raise OptionError(f'behavior must be "allow" or "deny"; got {behavior!r}')
    if message is not None and not isinstance(message, str):
        raise OptionError(f"message must be a string; got {type(message).__name__}")
    if updated_input is not None:
        if behavior != "allow":
            raise OptionError("updated_input goes with behavior='allow' only")
        if not isinstance(updated_input, dict):
            raise OptionError(
                f"updated_input must be a dict (the tool's input); got {type(updated_input).__name__}"
            )
    return ApprovalDecision(
        approval_id=approval_id, behavior=behavior, message=message, updated_input=updated_input
    )
