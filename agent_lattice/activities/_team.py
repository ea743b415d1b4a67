"""Team activities: a handoff to a member started, run (a host AgentLike) and reported, and
the runtime's view of a message mirrored into the team's mailbox."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from .._delegation import Delegation
from .._loop import text_of
from .._messages import ResultMessage, Usage
from .._team import Team, has_mailbox_tools, team_of
from .._tools import ToolResult
from ..workflows._contract import ActivityName, FailureType
from ..workflows._types import (
    AdapterWork,
    Handoff,
    MailboxMirrorInput,
    MemberCancelled,
    MemberFailed,
    MemberFinished,
    Report,
    TeamReportInput,
    TraceParent,
)
from ._base import heartbeating, quiet_when_abandoned
from ._delegation import DelegationActivities, delegation_of, mirror


class TeamActivities(DelegationActivities):
    """The activities of a TeamWorkflow (a member's query starts as a delegated one does)."""

    @activity.defn(name=ActivityName.TEAM_REPORT)
    async def team_report(self, input: TeamReportInput) -> Report:
        """A member's work item ended: its report for the lead (a local activity of the
        TeamWorkflow)."""
        ended = input.root
        handoff = ended.handoff
        output = ended.output if isinstance(ended, MemberFinished) else None
        lead = self._agent(handoff.lead_key, handoff.lead_session_id)
        delegation = delegation_of(lead, handoff.tool_name)
        if handoff.work is not None and not isinstance(handoff.work, AdapterWork):
            await self._absorb(delegation, output)  # it started: the session is free again
        if isinstance(ended, MemberFailed | MemberCancelled):
            status = "cancelled" if isinstance(ended, MemberCancelled) else "failed"
            content = f"agent {handoff.member!r} could not run: {ended.error}"
        else:
            finished = (
                ended.output.result if isinstance(ended, MemberFinished) else ended.adapter_result
            )
            result = delegation.result_of(finished)
            # the member's team_reply to this message, when it sent one, is its report
            replied = await _reply_to(team_of(lead), handoff) if _can_reply(delegation) else None
            content = replied or text_of(result.content)
            status = "failed" if result.is_error else "completed"
            if finished.subtype in ("interrupted", "error_abort"):
                status = "cancelled"
        return Report(
            tool_use_id=handoff.tool_use_id,
            member=handoff.member,
            message_id=handoff.message_id,
            status=status,
            content=content,
            # a host AgentLike's usage is its own business: only agent runs are rolled up
            usage=output.result.usage if output else Usage(),
            usage_by_agent=output.result.usage_by_agent if output else {},
        )

    @activity.defn(name=ActivityName.TEAM_ADAPTER)
    async def team_adapter(self, handoff: Handoff) -> ResultMessage:
        """A handoff to a host AgentLike member: its ``prompt()`` runs here, heartbeating (an
        activity of the TeamWorkflow; cancelling it cancels the call)."""
        lead = self._agent(handoff.lead_key, handoff.lead_session_id)
        target = delegation_of(lead, handoff.tool_name).target
        async with heartbeating(), quiet_when_abandoned():
            return await target.prompt(handoff.task)

    @activity.defn(name=ActivityName.TEAM_MAILBOX)
    async def team_mailbox(self, input: MailboxMirrorInput) -> None:
        """Write the runtime's view of one message to the team's mailbox backend (claimed
        work shows as ``processing`` there, so a host's drain never takes it twice)."""
        self._agent(input.lead_key, input.lead_session_id)  # raises when not served here
        team = self._registry.team_of(input.lead_key, input.lead_session_id)
        if team is not None:
            await mirror(team.mailbox, input.message)

    @activity.defn(name=ActivityName.TEAM_START)
    async def team_start(self, handoff: Handoff) -> Handoff:
        """A queued handoff starts: the member's query on its session as it is now (a local
        activity of the TeamWorkflow; a member busy with an ``ask`` is waited for)."""
        lead = self._agent(handoff.lead_key, handoff.lead_session_id)
        delegation = delegation_of(lead, handoff.tool_name)
        if delegation.kind == "adapter":  # a host AgentLike: lattice.team_adapter runs it
            return handoff.model_copy(update={"work": AdapterWork()})
        task = handoff.task
        if _can_reply(delegation):
            task += (
                f"\n\n[team {handoff.team} · message_id {handoff.message_id} from "
                f"{handoff.from_mailbox}] Your final answer is your report; you may instead "
                "send it with team_reply."
            )
        started = await self._start_child(
            delegation,
            task,
            seed=f"{handoff.lead_workflow_id}/{handoff.tool_use_id}",
            queue=activity.info().task_queue,
            context=handoff.context,
            grants=handoff.workspace_grants,
            parent_session=handoff.lead_session_id,
            trace_parent=TraceParent(run_id=handoff.lead_run_id, tool_use_id=handoff.tool_use_id),
        )
        if isinstance(started, ToolResult):
            raise ApplicationError(text_of(started.content), type=FailureType.MEMBER_BUSY)
        return handoff.model_copy(update={"work": started})


def _can_reply(delegation: Delegation) -> bool:
    """A handoff's member can answer with team_reply: its task names the message id."""
    return delegation.inner_team is None and has_mailbox_tools(delegation.target)


async def _reply_to(team: Team | None, handoff: Handoff) -> str | None:
    """The body of the member's ``team_reply`` to a handoff (the last, if several); it is
    delivered to the lead as the report, so it leaves the lead's mailbox as ``done``."""
    if team is None:
        return None
    mailbox = team.mailbox
    try:
        replies = [
            m
            for m in await mailbox.thread(handoff.thread_id)
            if m.kind == "reply" and m.reply_to == handoff.message_id
        ]
        if not replies:
            return None
        for reply in replies:
            if reply.status == "pending":
                await mailbox.set_status(reply.id, "done", result="delivered to the lead")
        return replies[-1].body
    except Exception as err:
        activity.logger.warning("team mailbox not read for %s: %s", handoff.message_id, err)
        return None
