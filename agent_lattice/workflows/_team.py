# pyright: strict
"""TeamWorkflow: the runtime of one ``team.query()``.

It starts the lead's query as a child ``AgentWorkflow`` and runs the work the lead hands off:
each accepted handoff arrives as a signal, becomes a mailbox message, and runs as a child
``AgentWorkflow`` of the member — at most ``max_concurrent_work_items`` at a time, one at a
time per member mailbox. Progress goes to the lead as ``team_message``/``team_agent`` events
(published on the lead's stream, so readers see one stream in progress order), and each
member's report goes back as a ``report`` signal; the lead collects its batch's reports in
handoff order. The mailbox state lives here, durable through Temporal; ``mailbox`` reads it.

Mail sent while it runs (a member's ``team_send``, the host's ``team.send()``) arrives as a
``mail`` signal naming its mailbox: a member's mailbox is claimed from the team's backend in
an activity when the member is free (within the same limits, after queued handoffs), and the
message runs as a work item settled by the drain rules; mail for the lead's mailbox is passed
on to the lead, which takes it with its next tool results.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from .._messages import ResultMessage, TeamAgentEvent, TeamMessageEvent
    from ..teams._mailbox import TeamMessage
    from . import _contract as contract
    from ._approval_types import ForwardedApproval
    from ._children import signal_quietly, start_child, start_query
    from ._mail_types import (
        MailClaim,
        MailClaimed,
        MailNotice,
        MailSettled,
        TeamEvent,
        TeamRunOutput,
    )
    from ._outcomes import CHILD_OUTPUT_SIGNAL, ChildOutput, Outcomes, wait_condition
    from ._types import AgentRunOutput
from ._delegation_types import (
    AdapterFinished,
    AdapterWork,
    Handoff,
    MailboxMirrorInput,
    MemberCancelled,
    MemberFailed,
    MemberFinished,
    TeamChild,
    TeamReportInput,
    TeamRunInput,
)

# Runs recorded before this change ended as soon as the lead did (left work stayed open).
SETTLE_LEFT_WORK = "team-settle-left-work"
SETTLE_TIMEOUT_S = 120.0
# Runs recorded before this signalled every event to the lead, closed or not (those that came
# after its close were lost); now they travel in the team's output (TeamRunOutput).
LATE_EVENTS = "team-late-events"
_EVENTS = ("team_message", "team_agent")
# A signal that reaches the lead while its closing workflow task runs is taken after its
# output was made, and its reader never sees it: the events signalled this long before the
# close go in the output too (the caller skips those it has shown).
LATE_WINDOW = timedelta(seconds=5)
# how a team run stops its work, the weakest first: a Temporal cancel request is an interrupt
# passed on as the runs' own cancel requests
_STOPS = ("interrupt", "cancel", "abort")


@workflow.defn(name="TeamWorkflow")
class TeamWorkflow:
    @workflow.init
    def __init__(self, input: TeamRunInput) -> None:
        self._input = input
        self._queue: list[Handoff] = []
        # member mailboxes that may hold pending mail, in the order it was announced
        self._mail: dict[str, None] = {}
        self._messages: dict[str, TeamMessage] = {}
        self._busy: set[str] = set()  # member mailboxes with a work item running
        self._working = 0  # work items started and not yet reported and mirrored
        self._running: dict[str, workflow.ChildWorkflowHandle[Any, AgentRunOutput]] = {}
        self._adapters: dict[str, workflow.ActivityHandle[ResultMessage]] = {}  # host AgentLike
        self._lead: workflow.ChildWorkflowHandle[Any, AgentRunOutput] | None = None
        self._stopping: str | None = None  # one of _STOPS once asked
        self._last_send: asyncio.Future[None] | None = None
        self._lead_closed = False
        self._late: list[TeamEvent] | None = None  # None: a run recorded before LATE_EVENTS
        self._recent: list[tuple[datetime, TeamEvent]] = []  # signalled within LATE_WINDOW
        self._tasks: set[asyncio.Future[None]] = set()
        self._outcomes = Outcomes(self._on_cancel)  # how the run ends as Temporal shows it

    @workflow.signal
    def handoff(self, handoff: Handoff) -> None:
        self._queue.append(handoff)
        self._messages[handoff.message_id] = TeamMessage(
            id=handoff.message_id,
            from_mailbox=handoff.from_mailbox,
            to_mailbox=handoff.to_mailbox,
            kind="task",
            body=handoff.task,
            thread_id=handoff.thread_id,
            metadata={
                "work_item_id": handoff.work_item_id,
                "tool_use_id": handoff.tool_use_id,
                # the accepted write grants, enforced by the member's built-in write tools
                "workspace_grants": list(handoff.workspace_grants),
            },
            created_at=workflow.now().timestamp(),
            updated_at=workflow.now().timestamp(),
        )
        self._event_message(handoff, "sent", handoff.task)

    @workflow.signal
    def mail(self, notice: MailNotice) -> None:
        """Mail was sent to these mailboxes (by a member's mailbox tools, or the host's
        ``team.send()``): the runtime claims it as members are free."""
        for box in notice.mailboxes:
            self._announce(box)

    @workflow.signal
    def interrupt(self) -> None:
        self._stop("interrupt")

    @workflow.signal
    def abort(self) -> None:
        self._stop("abort")

    @workflow.signal(name="approval_request")
    def approval_request(self, forwarded: ForwardedApproval) -> None:
        """An approval request of a run of this team: a member's goes to the lead (the team
        query's stream), the lead's on to the run this team works for, if any."""
        if forwarded.via != self._input.lead_workflow_id:
            self._to_lead("approval_request", forwarded.model_copy(update={"via": ""}))
            return
        parent = workflow.info().parent
        if parent is not None:
            handle = workflow.get_external_workflow_handle(parent.workflow_id)
            onward = forwarded.model_copy(update={"via": workflow.info().workflow_id})
            self._tasks.add(
                asyncio.ensure_future(signal_quietly(handle, "approval_request", onward))
            )

    @workflow.signal(name=CHILD_OUTPUT_SIGNAL)
    def child_output(self, ended: ChildOutput) -> None:
        """A run this one started (the lead, a member's work) is ending Canceled: its
        output."""
        self._outcomes.child_output(ended)

    @workflow.query
    def mailbox(self) -> list[TeamMessage]:
        return list(self._messages.values())

    @workflow.run
    async def run(self, input: TeamRunInput) -> AgentRunOutput:
        if input.lead.temporal_outcomes:  # Temporal shows the outcome (see _outcomes)
            return await self._outcomes.run(self._run(input))
        return await self._run(input)

    def _on_cancel(self) -> None:
        """A Temporal cancel request: the lead's query and the running work get cancel
        requests of their own (each ends interrupted), queued work ends cancelled."""
        self._stop("cancel")

    async def _run(self, input: TeamRunInput) -> AgentRunOutput:
        info = workflow.info()
        if workflow.patched(LATE_EVENTS):
            self._late = []
        # a team aborted before its lead started (a signal set already) starts it aborted:
        # told after its start, the lead could finish its first request and succeed
        update: dict[str, object] = {"team_workflow_id": info.workflow_id}
        if self._stopping == "abort":
            update["aborted"] = True
        lead_input = input.lead.model_copy(update=update)
        self._lead = await start_query(
            lead_input,
            None,
            id=input.lead_workflow_id,
            task_queue=input.lead_task_queue,
            summary=f"{input.lead.agent.name} · lead of team {input.team}",
        )
        if self._stopping is not None:
            self._forward(self._lead, self._stopping)
        runner = asyncio.ensure_future(self._run_work())
        try:
            output = await self._lead
        except ChildWorkflowError as err:
            # a lead that ended Failed with an error result, or Canceled, has its output
            output = self._outcomes.ended_child(err, input.lead_workflow_id)
            if output is None:
                raise
        finally:
            self._close_lead()
            if (self._queue or self._working) and workflow.patched(SETTLE_LEFT_WORK):
                await self._settle_left_work()
            runner.cancel()
        if self._late is None:
            return output
        if self._last_send is not None:
            await self._last_send  # every event has reached the lead, or is late
        return TeamRunOutput(**dict(output), team_events=self._late)

    async def _settle_left_work(self) -> None:
        """The lead has its result (or failed) with handed-off work still queued or running:
        that work ends as cancelled, its reports and mailbox states written, before the team
        run ends (seeds: an abort marks the current and remaining accepted work cancelled)."""
        if self._stopping is None:
            self._stop("abort")
        try:
            await wait_condition(
                lambda: not self._queue and not self._working,
                timeout=timedelta(seconds=SETTLE_TIMEOUT_S),
                shielded=self._input.lead.temporal_outcomes,
            )
        except TimeoutError:
            workflow.logger.warning(
                "team %s: %d work item(s) still running after the lead ended",
                self._input.team,
                self._working,
            )

    def _close_lead(self) -> None:
        """The lead's run closed: the events signalled just before may be lost to its stream."""
        self._lead_closed = True
        if self._late is not None:
            since = workflow.now() - LATE_WINDOW
            self._late[:0] = [event for at, event in self._recent if at >= since]

    def _stop(self, how: str) -> None:
        if self._stopping is not None and _STOPS.index(self._stopping) >= _STOPS.index(how):
            return  # already stopping (the lead echoes what it was told)
        self._stopping = how
        if self._lead is not None:
            self._forward(self._lead, how)
        for handle in self._running.values():
            self._forward(handle, how)
        for call in self._adapters.values():
            call.cancel()  # the activity is cancelled; the host's prompt() with it

    def _forward(
        self, handle: workflow.ChildWorkflowHandle[Any, AgentRunOutput], name: str
    ) -> None:
        if name == "cancel":  # the run's own cancel request (see _outcomes)
            handle.cancel()
            return
        self._tasks.add(asyncio.ensure_future(signal_quietly(handle, name)))

    def _announce(self, box: str) -> None:
        """Mail in ``box``: the lead's goes to the lead (it takes it with its next tool
        results); a member's is claimed when the member is free (not once the run stops)."""
        team = self._input.team
        if box == f"{team}::lead":
            self._to_lead("mail", MailNotice(mailboxes=[box]))
        elif box.startswith(f"{team}::") and self._stopping is None:
            self._mail[box] = None

    def _startable(self) -> Handoff | str | None:
        """The next work to start: a queued handoff (the lead waits for those), else a
        member mailbox to claim mail from; within the limit, one at a time per mailbox."""
        if len(self._busy) >= self._input.max_concurrent_work_items:
            return None
        handoff = next((h for h in self._queue if h.to_mailbox not in self._busy), None)
        if handoff is not None or self._stopping is not None:
            return handoff
        return next((box for box in self._mail if box not in self._busy), None)

    async def _run_work(self) -> None:
        while True:
            await wait_condition(
                lambda: self._startable() is not None,
                shielded=self._input.lead.temporal_outcomes,
            )
            work = self._startable()
            assert work is not None
            if isinstance(work, Handoff):
                self._queue.remove(work)
                box, job = work.to_mailbox, self._work_item(work)
            else:
                del self._mail[work]
                box, job = work, self._claimed_work(work)
            self._busy.add(box)
            self._working += 1  # counted at once: the item is never in neither place
            task = asyncio.ensure_future(self._work(job))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _work(self, job: Coroutine[Any, Any, None]) -> None:
        """One work item: the member's query as a child workflow, then its report."""
        try:
            await job
        finally:
            self._working -= 1

    async def _claimed_work(self, box: str) -> None:
        """Claim the next pending message of a member's mailbox and run it as a work item
        (the member's mailbox stays busy throughout)."""
        input = self._input
        try:
            claimed = await contract.claim_mail(
                MailClaim(
                    lead_key=input.lead.agent.key,
                    lead_session_id=input.lead.session_id,
                    lead_workflow_id=input.lead_workflow_id,
                    mailbox=box,
                ),
                summary=f"team {input.team} · claim mail of {box}",
            )
        except (ActivityError, ApplicationError) as err:
            workflow.logger.warning("team %s: mail of %s not claimed: %s", input.team, box, err)
            claimed = MailClaimed()
        if claimed.message is None or claimed.handoff is None:
            self._busy.discard(box)
            return
        lead_run = self._lead.first_execution_run_id if self._lead is not None else None
        handoff = claimed.handoff.model_copy(
            update={"context": input.lead.context, "lead_run_id": lead_run or ""}
        )
        self._messages[handoff.message_id] = claimed.message
        self._event_message(handoff, "sent", claimed.message.body)
        await self._work_item(handoff)
        self._announce(box)  # more may be waiting: claim again once this one is done

    async def _work_item(self, handoff: Handoff) -> None:
        output: AgentRunOutput | None = None
        adapter_result: ResultMessage | None = None
        error: str | None = None
        cancelled = False
        self._set_status(handoff.message_id, "processing")
        if not handoff.mail:  # claimed mail is processing in the backend already
            await self._mirror(handoff)
        try:
            if self._stopping is None:
                handoff = await contract.start_work(
                    handoff, summary=f"team {handoff.team} · start work for {handoff.member}"
                )
            work = handoff.work
            if self._stopping is not None:
                error = f"the team run was stopped ({self._stopping}) before this work started"
                cancelled = True
            elif isinstance(work, AdapterWork):
                adapter_result = await self._run_adapter(handoff)
            else:
                assert work is not None
                handle = await start_child(
                    work,  # a nested team: its TeamWorkflow
                    self._input.lead,  # the member draws from the lead's budget
                    parent_id=self._input.lead_workflow_id,
                    summary=f"{handoff.member} · team {handoff.team} · {handoff.work_item_id}",
                )
                self._running[handoff.work_item_id] = handle
                self._event_agent(handoff, "started", None)
                if self._stopping is not None:
                    self._forward(handle, self._stopping)
                output = await handle
        except ChildWorkflowError as err:
            # a member that ended Failed with an error result, or Canceled, has its output
            output = self._outcomes.ended_child(err, handoff.workflow_id)
            if output is None:
                error = str(err.cause or err)
        except (ActivityError, ApplicationError) as err:
            error = str(err.cause or err)
            cancelled = self._stopping is not None and isinstance(handoff.work, AdapterWork)
        finally:
            self._running.pop(handoff.work_item_id, None)
            self._adapters.pop(handoff.work_item_id, None)
        ended = (
            MemberFinished(handoff=handoff, output=output)
            if output is not None
            else AdapterFinished(handoff=handoff, adapter_result=adapter_result)
            if adapter_result is not None
            else MemberCancelled(handoff=handoff, error=error or "")
            if cancelled
            else MemberFailed(handoff=handoff, error=error or "")
        )
        if handoff.mail:
            finished = output.result if output is not None else adapter_result
            await self._settle_mail(TeamReportInput(ended), finished)
            return
        report = await contract.report_work(
            TeamReportInput(ended), summary=f"team {handoff.team} · report from {handoff.member}"
        )
        self._busy.discard(handoff.to_mailbox)
        status = {"completed": "done", "failed": "failed", "cancelled": "cancelled"}[report.status]
        self._set_status(handoff.message_id, status, report.content)
        await self._mirror(handoff)
        finished = output.result if output is not None else adapter_result
        if finished is not None:
            self._event_agent(handoff, "finished", finished.subtype)
        self._event_message(handoff, report.status, report.content)
        sent = self._to_lead("report", report)
        if sent is not None:
            await sent

    async def _settle_mail(self, ended: TeamReportInput, finished: ResultMessage | None) -> None:
        """Claimed mail's work ended: the drain rules say how its message ends (no report:
        the lead did not hand it off); an answer they sent upstream is mail in turn."""
        handoff = ended.root.handoff
        try:
            settled = await contract.settle_mail(
                ended, summary=f"team {handoff.team} · mail of {handoff.member}"
            )
        except (ActivityError, ApplicationError) as err:
            workflow.logger.warning("team mail %s not settled: %s", handoff.message_id, err)
            settled = MailSettled(message=self._messages[handoff.message_id])
        self._busy.discard(handoff.to_mailbox)
        self._messages[handoff.message_id] = settled.message
        if finished is not None:
            self._event_agent(handoff, "finished", finished.subtype)
        status = settled.message.status
        event = {"done": "completed", "failed": "failed", "cancelled": "cancelled"}.get(status)
        if event is not None:  # a follow-up keeps the message open: it has not ended
            self._event_message(handoff, event, settled.message.result)
        if settled.upstream is not None:
            self._announce(settled.upstream)

    async def _run_adapter(self, handoff: Handoff) -> ResultMessage:
        """A host AgentLike member's work: its ``prompt()`` in a heartbeating activity (run
        once; a run-wide stop cancels it)."""
        call = contract.start_team_adapter(
            handoff,
            contract.adapter_preset(self._input.lead.settings),
            summary=f"{handoff.member} · team {handoff.team} · {handoff.work_item_id}",
        )
        self._adapters[handoff.work_item_id] = call
        self._event_agent(handoff, "started", None)
        try:
            return await call
        except asyncio.CancelledError:  # cancelled by a run-wide stop (see _stop)
            raise ApplicationError(f"the team run was stopped ({self._stopping})") from None

    async def _mirror(self, handoff: Handoff) -> None:
        """Best effort: the team's own mailbox backend shows the runtime's work too."""
        try:
            await contract.mirror_mailbox(
                MailboxMirrorInput(
                    lead_key=handoff.lead_key,
                    lead_session_id=handoff.lead_session_id,
                    message=self._messages[handoff.message_id],
                ),
                summary=f"team {handoff.team} · mailbox",
            )
        except (ActivityError, ApplicationError) as err:
            workflow.logger.warning("team mailbox backend not updated: %s", err)

    def _set_status(self, message_id: str, status: Any, result: str | None = None) -> None:
        message = self._messages[message_id]
        self._messages[message_id] = message.model_copy(
            update={
                "status": status,
                "result": result if result is not None else message.result,
                "updated_at": workflow.now().timestamp(),
            }
        )

    def _event_message(self, handoff: Handoff, event: Any, body: str | None) -> None:
        self._to_lead(
            "team_message",
            TeamMessageEvent(
                team=handoff.team,
                event=event,
                message_id=handoff.message_id,
                work_item_id=handoff.work_item_id,
                thread_id=handoff.thread_id,
                from_mailbox=handoff.from_mailbox,
                to_mailbox=handoff.to_mailbox,
                body=body,
                session_id=self._input.lead.session_id,
            ),
        )

    def _event_agent(self, handoff: Handoff, event: Any, subtype: str | None) -> None:
        self._to_lead(
            "team_agent",
            TeamAgentEvent(
                team=handoff.team,
                member=handoff.member,
                mailbox=handoff.to_mailbox,
                event=event,
                work_item_id=handoff.work_item_id,
                workflow_id=handoff.workflow_id,
                subtype=subtype,
                session_id=self._input.lead.session_id,
                lead_workflow_id=handoff.work.team.lead_workflow_id
                if isinstance(handoff.work, TeamChild)
                else None,
            ),
        )

    def _to_lead(self, signal: str, event: Any) -> asyncio.Future[None] | None:
        """Send an event to the lead (in order: each send waits for the one before). A team
        event the lead's closed run can no longer take is late: it goes in the team's output."""
        if self._lead is None:
            return None
        lead, before = self._lead, self._last_send
        late = self._late if signal in _EVENTS else None

        async def send() -> None:
            if before is not None:
                await before
            if self._late is None:  # a run recorded before LATE_EVENTS
                await signal_quietly(lead, signal, event)
                return
            try:
                if not self._lead_closed:
                    await lead.signal(signal, event)
                    if late is not None and not self._lead_closed:
                        now = workflow.now()
                        self._recent = [r for r in self._recent if r[0] >= now - LATE_WINDOW]
                        self._recent.append((now, event))
                        return
            except Exception as err:  # it closed meanwhile
                workflow.logger.debug("signal %s failed: %s", signal, err)
            if late is not None:
                late.append(event)

        self._last_send = asyncio.ensure_future(send())
        return self._last_send
