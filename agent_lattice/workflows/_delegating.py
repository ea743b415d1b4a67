"""The delegation part of AgentWorkflow: an agent tool's call as a child workflow, a team
member's handoff and its report, signals passed on to children and the team, and each
agent's share of the usage."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
)

with workflow.unsafe.imports_passed_through():
    from .._approvals import ApprovalAsk
    from .._messages import ResultMessage, TextBlock, ToolUseBlock, Usage
    from . import _contract as contract
    from ._children import signal_quietly, start_child
    from ._contract import HOST_FAILURES
    from ._failures import error_info
    from ._mail_types import LeadMail
    from ._outcomes import wait_condition
    from ._types import AgentRunInput, AgentRunOutput, ToolCallInput, ToolCallOutput
from ._delegation_types import CallEnded, ChildQuery, DelegateCallInput, HandedOff, Report


class Delegating:
    """AgentWorkflow's children and team; its state is set in ``AgentWorkflow.__init__`` and
    ``run``."""

    _input: AgentRunInput
    _aborted: bool
    _interrupted: bool
    _cancel_requested: bool  # from Outcomes
    _children: dict[str, workflow.ChildWorkflowHandle[Any, AgentRunOutput]]
    _cancelled_children: set[str]  # the children asked to cancel (by workflow id)
    _pending_signals: list[asyncio.Task[None]]
    _usage: Usage
    _usage_by_agent: dict[str, Usage]
    _cost_usd: float  # this agent's own requests with a known price
    _cost_unknown: bool  # one of its own requests had none
    _cost_by_agent: dict[str, float | None]  # the finished children's shares
    _handoffs: set[str]
    _reports: dict[str, Report]
    _mail_waiting: bool
    # from ToolBatch and Approvals
    _call_input: Callable[[ToolUseBlock], ToolCallInput]
    _could_not_run: Callable[[ToolUseBlock, BaseException], ToolCallOutput]
    _decided: Callable[
        [DelegateCallInput, ApprovalAsk], Awaitable[DelegateCallInput | ToolCallOutput]
    ]
    _ended_child: Callable[[ChildWorkflowError, str], AgentRunOutput | None]  # from Outcomes

    async def _call_child(self, use: ToolUseBlock) -> ToolCallOutput:
        """An agent tool call: the child agent's query runs as a child workflow of this one.
        Host code (permission, input mapping, output validation, hooks) runs in local
        activities before and after it."""
        input = self._input
        call = DelegateCallInput(
            **self._call_input(use).model_dump(), team_workflow_id=input.team_workflow_id
        )
        host = contract.host_preset(input.settings)
        try:
            call, prepared = await self._prepare(call, host)
            if isinstance(prepared, HandedOff) and input.team_workflow_id is not None:
                # the team runtime runs it; the receipt answers the call now
                team = workflow.get_external_workflow_handle(input.team_workflow_id)
                await team.signal("handoff", prepared.handoff)
                self._handoffs.add(use.id)
            if isinstance(prepared, CallEnded | HandedOff):
                return prepared.result
            output: AgentRunOutput | None = None
            error: str | None = None
            try:
                handle = await start_child(
                    prepared,  # the member is a team: its TeamWorkflow runs the query
                    input,
                    parent_id=workflow.info().workflow_id,
                    summary=f"{prepared.child.agent.name} · delegated by {input.agent.name}",
                )
                self._children[use.id] = handle
                if self._aborted or self._interrupted:  # the signal came while it started
                    self._signal_children("abort" if self._aborted else "interrupt")
                output = await handle
            except ChildWorkflowError as err:
                # a child that ended Failed with an error result, or Canceled, has its output
                output = self._ended_child(err, prepared.workflow_id)
                error = None if output is not None else str(err.cause or err)
            except WorkflowAlreadyStartedError as err:
                error = str(err)
            finally:
                self._children.pop(use.id, None)
            if output is not None:
                self._add_child_usage(output.result)
            return await contract.delegate_finish(
                call.model_copy(update={"output": output, "error": error}),
                host,
                summary=f"{input.agent.name} · delegate {use.name} · result",
            )
        except (ActivityError, ApplicationError) as err:
            if error_info(err).type in HOST_FAILURES:
                raise
            return self._could_not_run(use, err)

    async def _prepare(
        self, call: DelegateCallInput, host: contract.Preset
    ) -> tuple[DelegateCallInput, CallEnded | HandedOff | ChildQuery]:
        """The host code before the child: a call the permission callback asks a person
        about waits for the decision first (then runs as allowed, or ends denied)."""
        summary = f"{self._input.agent.name} · delegate {call.tool_use.name}"
        prepared = (await contract.delegate_prepare(call, host, summary=summary)).root
        ask = prepared.result.approval if isinstance(prepared, CallEnded) else None
        if ask is None:
            return call, prepared
        decided = await self._decided(call, ask)
        if isinstance(decided, ToolCallOutput):
            return call, CallEnded(result=decided)
        call = decided
        prepared = (
            await contract.delegate_prepare(call, host, summary=f"{summary} · approved")
        ).root
        return call, prepared

    async def _collect_reports(self, handed: list[str]) -> TextBlock:
        """The team's reports on this batch's handoffs, in handoff order, as one text block."""
        await wait_condition(
            lambda: all(i in self._reports for i in handed) or self._aborted,
            shielded=self._input.temporal_outcomes,
        )
        reports = [
            self._reports.pop(i)
            if i in self._reports
            else Report(
                tool_use_id=i,
                member="?",
                message_id="",
                status="cancelled",
                content="not finished: the run was aborted",
            )
            for i in handed
        ]
        self._handoffs.difference_update(handed)
        for r in reports:
            self._add_child_usage(
                ResultMessage(
                    subtype="success",
                    session_id="",
                    usage=r.usage,
                    usage_by_agent=r.usage_by_agent,
                    cost_by_agent=r.cost_by_agent,
                )
            )
        parts = [
            f"[report from {r.member} · {r.status} · message {r.message_id}]\n{r.content}"
            for r in reports
        ]
        return TextBlock(text="Team reports, in handoff order:\n\n" + "\n\n".join(parts))

    async def _lead_mail(self) -> TextBlock | None:
        """The messages waiting in this lead's team mailbox, claimed and delivered as one text
        block (mail that arrives after the lead's last model request stays pending)."""
        self._mail_waiting = False  # mail announced from now on is taken next time
        input = self._input
        try:
            delivered = await contract.deliver_lead_mail(
                LeadMail(lead_key=input.agent.key, lead_session_id=input.session_id),
                summary=f"{input.agent.name} · team mail",
            )
        except (ActivityError, ApplicationError) as err:
            workflow.logger.warning("team mail not delivered: %s", err)
            return None
        if not delivered:
            return None
        parts = [
            f"[{m.kind} from {m.from_mailbox} · message {m.id}"
            + (f" · re {m.reply_to}" if m.reply_to else "")
            + (f" · subject {m.subject}" if m.subject else "")
            + f"]\n{m.body}"
            for m in delivered
        ]
        box = delivered[0].to_mailbox
        return TextBlock(text=f"Team mail in your mailbox {box}:\n\n" + "\n\n".join(parts))

    def _signal_team(self, name: str) -> None:
        team_id = self._input.team_workflow_id
        if team_id:
            team = workflow.get_external_workflow_handle(team_id)
            self._pending_signals.append(asyncio.ensure_future(signal_quietly(team, name)))

    def _signal_children(self, name: str) -> None:
        """Pass a signal on to the running children; the interrupt that a Temporal cancel
        request made goes on as their own cancel requests (each ends interrupted, Canceled)."""
        for handle in list(self._children.values()):
            if name == "interrupt" and self._cancel_requested:
                if handle.id not in self._cancelled_children:  # one request each
                    self._cancelled_children.add(handle.id)
                    handle.cancel()
            else:
                self._pending_signals.append(asyncio.ensure_future(signal_quietly(handle, name)))

    def _add_child_usage(self, result: ResultMessage) -> None:
        """A child's usage is the parent's too; each agent's own share is kept apart."""
        self._usage = self._usage + result.usage
        shares = result.usage_by_agent or {"agent": result.usage}
        for name, usage in shares.items():
            self._usage_by_agent[name] = self._usage_by_agent.get(name, Usage()) + usage
            # a share without a cost (a run from before costs) is unknown unless it used nothing
            cost = result.cost_by_agent.get(name, 0.0 if usage == Usage() else None)
            self._cost_by_agent[name] = _plus(self._cost_by_agent.get(name, 0.0), cost)

    def _add_cost(self, cost: float | None) -> None:
        """One of this agent's own model requests (None: its model has no known price)."""
        if cost is None:
            self._cost_unknown = True
        else:
            self._cost_usd += cost

    def _cost_shares(self) -> dict[str, float | None]:
        """Each agent's cost, beside ``_usage_shares``: the children's, this agent's own."""
        shares = dict(self._cost_by_agent)
        name = self._input.agent.name
        own = None if self._cost_unknown else self._cost_usd
        shares[name] = _plus(shares.get(name, 0.0), own)
        return shares

    def _usage_shares(self) -> dict[str, Usage]:
        """Each agent's own usage: the children's as they reported it, this agent's the rest."""
        shares = dict(self._usage_by_agent)
        children = Usage()
        for usage in shares.values():
            children = children + usage
        name = self._input.agent.name
        own = Usage(
            input_tokens=self._usage.input_tokens - children.input_tokens,
            output_tokens=self._usage.output_tokens - children.output_tokens,
            cache_creation_input_tokens=self._usage.cache_creation_input_tokens
            - children.cache_creation_input_tokens,
            cache_read_input_tokens=self._usage.cache_read_input_tokens
            - children.cache_read_input_tokens,
        )
        shares[name] = shares.get(name, Usage()) + own
        return shares


def _plus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b
