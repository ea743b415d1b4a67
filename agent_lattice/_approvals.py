"""Durable human approval of tool calls: what a waiting call asks, what a decision says.

A call of a tool declared ``tool(..., requires_approval=True)``, or one the ``permission``
callback answers with ``{"behavior": "ask", "message": ...}``, does not run: its run publishes
a ``system`` message of subtype ``approval_request`` and waits, in workflow state (no activity
runs and no worker slot is held while it waits), for a decision: ``allow`` runs the tool (with
``updated_input`` when given), ``deny`` gives the model an error tool_result with the
decision's message. ``approval_timeout_s`` turns an undecided request into a denial ("approval
timed out"). Decisions come from ``agent.approve()``/``agent.deny()``, from
``resolve_approval()`` in any process, or from ``lattice approve``/``lattice deny``.

Every decision names its ``approver`` (given, else the deciding client's Temporal identity):
the ``approval_resolved`` message, the update in the run's history and the run's memo
(``APPROVAL_HISTORY_MEMO``) keep it. ``approvers`` (an agent's, or a tool's, which wins) is an
allow-list the run checks before it accepts a decision: anyone else's is refused, unrecorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

from ._errors import OptionError

__all__ = [
    "APPROVAL_HISTORY_MEMO",
    "APPROVAL_MEMO",
    "ApprovalAsk",
    "ApprovalDecision",
    "PendingApproval",
    "ResolvedApproval",
    "check_approvers",
    "check_decision",
]

# the memo key under which a run keeps its pending requests: readable with no worker up
# (describe, list), so pending approvals are listed even while every worker is down
APPROVAL_MEMO = "lattice_approvals"
# the memo key under which a run keeps how its requests ended, newest last (the last
# HISTORY_KEPT of them: a memo travels with every describe and list)
APPROVAL_HISTORY_MEMO = "lattice_approval_history"
HISTORY_KEPT = 100
TIMED_OUT = "approval timed out"
# the longest approver name a decision or an allow-list may carry
APPROVER_MAX = 200

Behavior = Literal["allow", "deny"]
Ending = Literal["allow", "deny", "timed_out", "cancelled"]


class ApprovalAsk(BaseModel):
    """A tool call that waits for a decision (the tool activity's answer instead of running
    the tool): why, in the permission callback's words when it asked."""

    message: str | None = None
    # who may decide (the tool's ``approvers``, else the agent's); None: anyone
    approvers: list[str] | None = None


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
    # who may decide it (the allow-list of its tool or agent); None: anyone
    approvers: list[str] | None = None

    def ended(
        self, behavior: Ending, at: datetime, decision: ApprovalDecision | None
    ) -> ResolvedApproval:
        """How it ended: by ``decision`` (a person's, if any) at ``at``."""
        return ResolvedApproval(
            **self.model_dump(exclude={"tool_input", "message", "approvers"}),
            decided_at=at,
            behavior=behavior,
            approver=decision.approver if decision is not None else None,
            message=decision.message if decision is not None else None,
            edited=decision is not None and decision.updated_input is not None,
        )


class ApprovalDecision(BaseModel):
    """A decision on one request: ``allow`` (with ``updated_input`` replacing the model's
    input) or ``deny`` (``message`` goes to the model), by ``approver`` (None: a decision
    sent by something other than a lattice client, or recorded before approvers were)."""

    approval_id: str
    behavior: Behavior
    message: str | None = None
    updated_input: dict[str, Any] | None = None
    approver: str | None = None


class ResolvedApproval(BaseModel):
    """How one request ended, as ``list_resolved_approvals()`` and ``lattice approvals
    --history`` list it: ``behavior`` allow or deny (a person's decision, by ``approver``),
    timed_out or cancelled (no one decided: ``approver`` is None); ``edited``: allowed with an
    ``updated_input``."""

    approval_id: str
    workflow_id: str
    agent: str
    tool_name: str
    tool_use_id: str
    requested_at: datetime
    decided_at: datetime
    behavior: Ending
    approver: str | None = None
    message: str | None = None
    edited: bool = False


def check_approver(name: Any, where: str) -> str:
    """One approver's name: a non-empty string, without surrounding spaces."""
    if not isinstance(name, str) or not name.strip():
        raise OptionError(f"{where} must be a non-empty string; got {name!r}")
    if name != name.strip() or len(name) > APPROVER_MAX:
        raise OptionError(
            f"{where} must have no surrounding spaces and at most {APPROVER_MAX} characters; "
            f"got {name!r}"
        )
    return name


def check_approvers(value: Any, where: str) -> tuple[str, ...] | None:
    """An ``approvers`` option: None (anyone may decide) or a non-empty list of names."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise OptionError(
            f'{where} must be a list of approver names (e.g. ["alice"]); got {value!r}'
        )
    items: Sequence[Any] = value  # pyright: ignore[reportUnknownVariableType]
    names = tuple(check_approver(v, f"{where}: each approver") for v in items)
    if not names:
        raise OptionError(
            f"{where} is empty: no one could decide; leave it out to let anyone decide"
        )
    return names


def check_decision(
    approval_id: Any, behavior: Any, message: Any, updated_input: Any, approver: Any = None
) -> ApprovalDecision:
    """A decision's arguments, checked before anything is sent (``approver`` None: the
    deciding client's identity, filled in as it is sent)."""
    if approver is not None:
        check_approver(approver, "approver")
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
        approval_id=approval_id,
        behavior=behavior,
        message=message,
        updated_input=updated_input,
        approver=approver,
    )
