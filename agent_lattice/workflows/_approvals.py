# pyright: strict
"""AgentWorkflow's approval desk: a tool call that waits for a person's decision.

The wait is workflow state: no activity runs and no worker slot is held, so it lasts minutes
or days, across worker restarts and the exit of the process that started the query. The run
keeps its waiting requests in its memo (``APPROVAL_MEMO``, readable while no worker is up)
and in its current details (the Temporal UI's "waiting for approval: <tool>"), and how each
ended, by whom, in its memo too (``APPROVAL_HISTORY_MEMO``, carried across continue-as-new).
A decision is a ``resolve_approval`` update (the workflow declares it): its validator refuses
an unknown or already decided id, and a decision whose ``approver`` is not on the request's
allow-list, before anything is written (a payload the worker cannot read was refused before
the validator ran); an ``updated_input`` is checked against the tool's schema first.
Each request is published on the run's stream and passed up to the parent run, so the
top-level query's stream shows its children's and team members' requests too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from .._approvals import (
        APPROVAL_HISTORY_MEMO,
        APPROVAL_MEMO,
        HISTORY_KEPT,
        TIMED_OUT,
        ApprovalAsk,
        ResolvedApproval,
    )
    from .._messages import SystemMessage, ToolResultBlock, ToolUseBlock
    from . import _contract as contract
    from ._approval_types import (
        ApprovalDecision,
        ForwardedApproval,
        PendingApproval,
        ToolInputCheck,
    )
    from ._children import signal_quietly
    from ._contract import FailureType
    from ._outcomes import wait_condition
    from ._progress import Progress
    from ._stop import Stop
    from ._types import AgentRunInput, ToolCallInput

__all__ = ["CARRY_APPROVAL_HISTORY", "Approvals"]

# A continued run shows the decisions of the runs before it at once (its memo starts without
# them); only runs carrying decisions do, and runs recorded before never carried any.
CARRY_APPROVAL_HISTORY = "lattice-approval-history-carried"

C = TypeVar("C", bound=ToolCallInput)


class Approvals:
    """Owned by an AgentWorkflow: its approval requests, waiting and ended."""

    def __init__(
        self,
        input: AgentRunInput,
        stop: Stop,
        publish: Callable[[object], None],
        progress: Progress,
    ) -> None:
        self._input = input
        self._stop = stop
        self._publish = publish
        self._progress = progress
        self._waiting: dict[str, PendingApproval] = {}
        self._decisions: dict[str, ApprovalDecision] = {}
        self._ended: dict[str, str] = {}  # approval id -> how it ended
        self._sent: list[asyncio.Task[None]] = []  # requests passed up to the parent run
        carried = input.continuation
        # how the query's requests ended, newest last (the memo's last HISTORY_KEPT)
        self.resolved: list[ResolvedApproval] = list(carried.approvals) if carried else []

    def carry(self) -> None:
        """A run continued as new: its memo lists the earlier runs' decisions too."""
        if self.resolved and workflow.patched(CARRY_APPROVAL_HISTORY):
            history = [r.model_dump(mode="json") for r in self.resolved]
            workflow.upsert_memo({APPROVAL_HISTORY_MEMO: history})

    async def resolve(self, decision: ApprovalDecision) -> PendingApproval:
        """The ``resolve_approval`` update: decide on a waiting request: the tool runs
        (``allow``) or the model is told (``deny``). Refused (an ``ApprovalError`` for the caller) for an unknown or already
        decided id, an approver the request's allow-list lacks, or an ``updated_input`` the
        tool's schema does not accept."""
        request = self._undecided(decision.approval_id)
        if decision.updated_input is not None:
            checked = await contract.check_tool_input(
                ToolInputCheck(
                    agent_key=self._input.agent.key,
                    session_id=self._input.session_id,
                    tool_name=request.tool_name,
                    input=decision.updated_input,
                ),
                summary=f"{self._input.agent.name} · check updated input of {request.tool_name}",
            )
            if checked.problem is not None:
                raise ApplicationError(
                    checked.problem, type=FailureType.APPROVAL_REFUSED, non_retryable=True
                )
            request = self._undecided(decision.approval_id)  # another decision came first?
        self._decisions[decision.approval_id] = decision
        return request

    def check(self, decision: ApprovalDecision) -> None:
        """The update's validator: a refusal here leaves no trace in the history."""
        request = self._undecided(decision.approval_id)
        allowed = request.approvers
        if allowed is not None and decision.approver not in allowed:
            who = (
                f"approver {decision.approver!r} is"
                if decision.approver is not None
                else "a decision that names no approver is"
            )
            raise ApplicationError(
                f"{who} not allowed to decide approval {decision.approval_id!r} "
                f"({request.tool_name}) of {workflow.info().workflow_id}: its approvers are "
                f"{', '.join(allowed)}; nothing changed",
                type=FailureType.APPROVAL_REFUSED,
                non_retryable=True,
            )

    def pending(self) -> list[PendingApproval]:
        return list(self._waiting.values())

    def forwarded(self, forwarded: ForwardedApproval) -> None:
        """A request of a run beneath this one (a delegated child, a team member)."""
        self._announce(forwarded.request)

    def _undecided(self, approval_id: str) -> PendingApproval:
        where = workflow.info().workflow_id
        ended = self._ended.get(approval_id)
        if approval_id in self._decisions or ended is not None:
            how = ended or self._decisions[approval_id].behavior
            raise ApplicationError(
                f"approval {approval_id!r} of {where} was already decided ({how}); nothing changed",
                type=FailureType.APPROVAL_REFUSED,
                non_retryable=True,
            )
        request = self._waiting.get(approval_id)
        if request is None:
            raise ApplicationError(
                f"no pending approval {approval_id!r} in {where}",
                type=FailureType.APPROVAL_REFUSED,
                non_retryable=True,
            )
        return request

    async def decided(self, call: C, ask: ApprovalAsk) -> C | ToolResultBlock:
        """``call`` as a person allowed it (approved, with their ``updated_input`` if any), or
        the result the model gets instead of the tool's."""
        decided = await self._approval(call.tool_use, ask)
        if isinstance(decided, ToolResultBlock):
            return decided
        use = call.tool_use
        if decided.updated_input is not None:
            use = use.model_copy(update={"input": decided.updated_input})
        return call.model_copy(update={"approved": True, "tool_use": use})

    async def _approval(
        self, use: ToolUseBlock, ask: ApprovalAsk
    ) -> ApprovalDecision | ToolResultBlock:
        """Wait for a person's decision on ``use``: the allowing decision, or the result the
        model gets instead of running the tool (denied, timed out, the query stopped)."""
        input, info = self._input, workflow.info()
        approval_id = f"apr_{workflow.uuid4().hex[:16]}"
        request = PendingApproval(
            approval_id=approval_id,
            workflow_id=info.workflow_id,
            agent=input.agent.name,
            tool_name=use.name,
            tool_input=use.input,
            tool_use_id=use.id,
            requested_at=workflow.now(),
            message=ask.message,
            approvers=ask.approvers,
        )
        self._waiting[approval_id] = request
        self._show_waiting()
        self._announce(request)
        limit = input.approval_timeout_s or input.agent.approval_timeout_s
        try:
            await wait_condition(
                lambda: approval_id in self._decisions or self._stop.stopping,
                timeout=timedelta(seconds=limit) if limit else None,
                timeout_summary=f"approval of {use.name} times out",
                shielded=input.temporal_outcomes,
            )
        except TimeoutError:
            pass
        decision = self._decisions.pop(approval_id, None)
        del self._waiting[approval_id]
        outcome: ApprovalDecision | ToolResultBlock
        if decision is not None and decision.behavior == "allow":
            how, outcome = "allow", decision
        elif decision is not None:
            how = "deny"
            text = decision.message or f"A person denied the call of {use.name!r}."
            outcome = ToolResultBlock(tool_use_id=use.id, content=text, is_error=True)
        elif self._stop.stopping:
            stop = self._stop.how
            how = "cancelled"
            outcome = ToolResultBlock(
                tool_use_id=use.id,
                content=f"Tool {use.name!r} was not run: the query was {stop} while the call "
                "waited for approval.",
                is_error=True,
            )
        else:
            how = "timed_out"
            outcome = ToolResultBlock(tool_use_id=use.id, content=TIMED_OUT, is_error=True)
        self._ended[approval_id] = how
        ended = request.ended(how, workflow.now(), decision)
        self.resolved.append(ended)
        del self.resolved[:-HISTORY_KEPT]
        self._show_waiting()
        self._publish(
            SystemMessage(
                subtype="approval_resolved",
                session_id=input.session_id,
                agent=input.agent.name,
                workflow_id=info.workflow_id,
                approval_id=approval_id,
                tool_name=use.name,
                tool_use_id=use.id,
                behavior=how,
                message=ended.message,
                approver=ended.approver,
            )
        )
        return outcome

    def _show_waiting(self) -> None:
        """The waiting requests where an operator and other processes see them without a
        worker: the run's memo and its current details."""
        waiting = list(self._waiting.values())
        memo: dict[str, object] = {
            APPROVAL_MEMO: [r.model_dump(mode="json") for r in waiting] if waiting else None
        }
        if self.resolved:  # one upsert as before: the same commands as runs recorded earlier
            memo[APPROVAL_HISTORY_MEMO] = [r.model_dump(mode="json") for r in self.resolved]
        workflow.upsert_memo(memo)
        self._progress.show_waiting(
            [f"waiting for approval: {r.tool_name} ({r.approval_id})" for r in waiting]
        )

    def _announce(self, request: PendingApproval) -> None:
        """On this run's stream, and to the parent run (the top-level query shows it)."""
        self._publish(
            SystemMessage(
                subtype="approval_request",
                session_id=self._input.session_id,
                agent=request.agent,
                workflow_id=request.workflow_id,
                approval_id=request.approval_id,
                tool_name=request.tool_name,
                tool_input=request.tool_input,
                tool_use_id=request.tool_use_id,
                message=request.message,
                approvers=request.approvers,
            )
        )
        info = workflow.info()
        if info.parent is None:
            return
        parent = workflow.get_external_workflow_handle(info.parent.workflow_id)
        forwarded = ForwardedApproval(request=request, via=info.workflow_id)
        self._sent.append(
            asyncio.ensure_future(signal_quietly(parent, "approval_request", forwarded))
        )
