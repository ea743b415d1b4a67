# pyright: strict
"""AgentWorkflow's delegates: the child runs its agent tools start, the team a lead hands work
to (its reports, its mailbox), and the signals passed on to both."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
)

with workflow.unsafe.imports_passed_through():
    from .._messages import ModelMessage, ResultMessage, TextBlock
    from . import _contract as contract
    from ._books import Books
    from ._children import signal_quietly, start_child
    from ._mail_types import LeadMail
    from ._outcomes import Outcomes, wait_condition
    from ._stop import Stop
    from ._types import AgentRunInput, AgentRunOutput
from ._delegation_types import ChildQuery, HandedOff, Report

__all__ = ["Delegates"]


class Delegates:
    """Owned by an AgentWorkflow: the runs its query started and the team it leads."""

    def __init__(self, input: AgentRunInput, stop: Stop, outcomes: Outcomes, books: Books) -> None:
        self._input = input
        self._stop = stop
        self._outcomes = outcomes
        self._books = books
        # the running children by tool_use id, and those asked to cancel (by workflow id)
        self._children: dict[str, workflow.ChildWorkflowHandle[Any, AgentRunOutput]] = {}
        self._cancelled: set[str] = set()
        self._handoffs: set[str] = set()  # tool_use ids whose team report is awaited
        self._reports: dict[str, Report] = {}
        self.mail_waiting = False  # mail arrived in this (lead's) team mailbox
        self._sent: list[asyncio.Task[None]] = []  # signals passed on

    async def run_child(
        self, tool_use_id: str, prepared: ChildQuery
    ) -> tuple[AgentRunOutput | None, str | None]:
        """Run a delegated query (the member is a team: its TeamWorkflow runs it) as a child
        workflow to its output, or the error that it has none; its usage is this query's."""
        input = self._input
        output: AgentRunOutput | None = None
        error: str | None = None
        try:
            handle = await start_child(
                prepared,
                input,
                parent_id=workflow.info().workflow_id,
                summary=f"{prepared.child.agent.name} · delegated by {input.agent.name}",
            )
            self._children[tool_use_id] = handle
            if self._stop.stopping:  # the signal came while it started
                self.signal_children("abort" if self._stop.aborted else "interrupt")
            output = await handle
        except ChildWorkflowError as err:
            # a child that ended Failed with an error result, or Canceled, has its output
            output = self._outcomes.ended_child(err, prepared.workflow_id)
            error = None if output is not None else str(err.cause or err)
        except WorkflowAlreadyStartedError as err:
            error = str(err)
        finally:
            self._children.pop(tool_use_id, None)
        if output is not None:
            self._books.add_child(output.result)
        return output, error

    async def hand_off(self, tool_use_id: str, handed: HandedOff) -> None:
        """A team member's handoff: the team's runtime runs it, and reports back."""
        team_id = self._input.team_workflow_id
        assert team_id is not None
        await workflow.get_external_workflow_handle(team_id).signal("handoff", handed.handoff)
        self._handoffs.add(tool_use_id)

    def handed(self, reply: ModelMessage) -> list[str]:
        """The calls of ``reply`` handed off to the team, whose reports are awaited."""
        return [u.id for u in reply.tool_uses if u.id in self._handoffs]

    def report(self, report: Report) -> None:
        """The ``report`` signal: a team member's report on a handoff."""
        self._reports[report.tool_use_id] = report

    async def collect_reports(self, handed: list[str]) -> TextBlock:
        """The team's reports on this batch's handoffs, in handoff order, as one text block."""
        await wait_condition(
            lambda: all(i in self._reports for i in handed) or self._stop.aborted,
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
            self._books.add_child(
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

    async def lead_mail(self) -> TextBlock | None:
        """The messages waiting in this lead's team mailbox, claimed and delivered as one text
        block (mail that arrives after the lead's last model request stays pending)."""
        self.mail_waiting = False  # mail announced from now on is taken next time
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

    def signal_team(self, name: str) -> None:
        team_id = self._input.team_workflow_id
        if team_id:
            team = workflow.get_external_workflow_handle(team_id)
            self._sent.append(asyncio.ensure_future(signal_quietly(team, name)))

    def signal_children(self, name: str) -> None:
        """Pass a signal on to the running children; the interrupt that a Temporal cancel
        request made goes on as their own cancel requests (each ends interrupted, Canceled)."""
        for handle in list(self._children.values()):
            if name == "interrupt" and self._outcomes.cancel_requested:
                if handle.id not in self._cancelled:  # one request each
                    self._cancelled.add(handle.id)
                    handle.cancel()
            else:
                self._sent.append(asyncio.ensure_future(signal_quietly(handle, name)))
