"""Team activities: a handoff to a member started, run (a host AgentLike) and reported, the
runtime's view of a message mirrored into the team's mailbox, and mailbox work: a member's
mail claimed and settled by the drain rules, a lead's mail delivered, the runtime told of
mail a tool call sent."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from temporalio import activity
from temporalio.exceptions import ApplicationError

from .._loop import text_of
from .._messages import ResultMessage, Usage
from ..teams._delegation import Delegation
from ..teams._host_member import ask_host
from ..teams._mail import mail_sent, settle_work, work_prompt
from ..teams._mailbox import TeamMessage
from ..teams._team import Team, has_mailbox_tools, team_of
from ..tools._tool import ToolResult
from ..workflows._contract import ActivityName, FailureType
from ..workflows._delegation_types import (
    AdapterFinished,
    AdapterWork,
    Handoff,
    MailboxMirrorInput,
    MemberCancelled,
    MemberFailed,
    MemberFinished,
    Report,
    TeamReportInput,
)
from ..workflows._mail_types import LeadMail, MailClaim, MailClaimed, MailNotice, MailSettled
from ..workflows._types import TraceParent
from ._base import heartbeating, quiet_when_abandoned
from ._delegation import DelegationActivities, delegation_of, mirror, to_team_stream

# a lead's mail delivered with one batch of tool results, at most
LEAD_MAIL_MAX = 20
_MAIL_NS = uuid.UUID("0e7c5a1d-2b4f-4c3e-8d9a-6f1b2c3d4e5f")


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
            cost_by_agent=output.result.cost_by_agent if output else {},
        )

    @activity.defn(name=ActivityName.TEAM_ADAPTER)
    async def team_adapter(self, handoff: Handoff) -> ResultMessage:
        """A handoff to a host AgentLike member: its ``prompt()`` runs here, heartbeating (an
        activity of the TeamWorkflow; cancelling it cancels the call)."""
        lead = self._agent(handoff.lead_key, handoff.lead_session_id)
        target = delegation_of(lead, handoff.tool_name).target
        # its messages join the team's stream through the lead's query
        forward = to_team_stream(
            handoff.lead_workflow_id, handoff.team, handoff.member, handoff.lead_session_id
        )
        async with heartbeating(), quiet_when_abandoned():
            return await ask_host(target, handoff.task, forward)

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
        if _can_reply(delegation) and not handoff.mail:  # claimed mail's prompt says it all
            task += (
                f"\n\n[team {handoff.team} · message_id {handoff.message_id} from "
                f"{handoff.from_mailbox}] Your final answer is your report; you may instead "
                "send it with team_reply."
            )
        started = await self._start_child(
            delegation,
            task,
            seed=f"{handoff.lead_workflow_id}/{handoff.tool_use_id or handoff.message_id}",
            queue=activity.info().task_queue,
            context=handoff.context,
            grants=handoff.workspace_grants,
            parent_session=handoff.lead_session_id,
            trace_parent=TraceParent(
                run_id=handoff.lead_run_id, tool_use_id=handoff.tool_use_id or None
            ),
            team_runtime_id=activity.info().workflow_id,  # its mailbox tools tell this team
        )
        if isinstance(started, ToolResult):
            raise ApplicationError(text_of(started.content), type=FailureType.MEMBER_BUSY)
        return handoff.model_copy(update={"work": started})

    @activity.defn(name=ActivityName.TEAM_CLAIM)
    async def team_claim(self, input: MailClaim) -> MailClaimed:
        """The next pending message of a member's mailbox, claimed for the team runtime, and
        the work item that runs it (the member prompted as ``drain()`` prompts it)."""
        lead = self._agent(input.lead_key, input.lead_session_id)
        team = self._registry.team_of(input.lead_key, input.lead_session_id)
        member = input.mailbox.split("::", 1)[1]
        if team is None or member not in {m.name for m in team.members}:
            return MailClaimed()  # not a member mailbox of this team: nothing to claim
        delegation = delegation_of(lead, member)  # the lead's tool for the member
        message = await team.mailbox.claim_next(input.mailbox)
        if message is None:
            return MailClaimed()
        handoff = Handoff(
            team=team.name,
            member=member,
            tool_use_id="",
            tool_name=member,
            lead_key=input.lead_key,
            lead_session_id=input.lead_session_id,
            lead_workflow_id=input.lead_workflow_id,
            message_id=message.id,
            work_item_id=f"wi_{uuid.uuid5(_MAIL_NS, message.id).hex[:20]}",
            thread_id=message.thread_id,
            from_mailbox=message.from_mailbox,
            to_mailbox=message.to_mailbox,
            task=work_prompt(team.name, message, answers_itself=not _can_reply(delegation)),
            mail=True,
        )
        return MailClaimed(message=message, handoff=handoff)

    @activity.defn(name=ActivityName.TEAM_SETTLE)
    async def team_settle(self, input: TeamReportInput) -> MailSettled:
        """Claimed mail's work ended: its message ends by the drain rules (a local activity
        of the TeamWorkflow; the rules send each answer once, so running it again is safe)."""
        ended = input.root
        handoff = ended.handoff
        lead = self._agent(handoff.lead_key, handoff.lead_session_id)
        delegation = delegation_of(lead, handoff.tool_name)
        output = ended.output if isinstance(ended, MemberFinished) else None
        if handoff.work is not None and not isinstance(handoff.work, AdapterWork):
            await self._absorb(delegation, output)  # it started: the session is free again
        team = self._registry.team_of(handoff.lead_key, handoff.lead_session_id)
        if team is None:
            raise ApplicationError(
                f"{handoff.lead_key} leads no team on this worker",
                type=FailureType.AGENT_NOT_REGISTERED,
                non_retryable=True,
            )
        message = await team.mailbox.get(handoff.message_id)
        if message is None:
            raise ApplicationError(
                f"message {handoff.message_id} is gone from team {team.name!r}'s mailbox",
                non_retryable=True,
            )
        result = (
            output.result
            if output is not None
            else ended.adapter_result
            if isinstance(ended, AdapterFinished)
            else None
        )
        stopped = result is not None and result.subtype in ("interrupted", "error_abort")
        settled = await settle_work(
            team.mailbox,
            handoff.member,
            message,
            result,
            answers_itself=not _can_reply(delegation),
            error=ended.error if isinstance(ended, MemberFailed | MemberCancelled) else None,
            cancelled=isinstance(ended, MemberCancelled) or stopped,
        )
        return MailSettled(message=settled.message, upstream=settled.upstream)

    @activity.defn(name=ActivityName.TEAM_LEAD_MAIL)
    async def team_lead_mail(self, input: LeadMail) -> list[TeamMessage]:
        """The pending messages of a team lead's mailbox, claimed and marked delivered (the
        lead's query puts them in its next model request)."""
        self._agent(input.lead_key, input.lead_session_id)  # raises when not served here
        team = self._registry.team_of(input.lead_key, input.lead_session_id)
        if team is None:
            return []
        mailbox, box = team.mailbox, team.mailbox_id("lead")
        delivered: list[TeamMessage] = []
        while len(delivered) < LEAD_MAIL_MAX:
            message = await mailbox.claim_next(box)
            if message is None:
                break
            delivered.append(
                await mailbox.set_status(message.id, "done", result="delivered to the lead")
            )
        return delivered


@asynccontextmanager
async def telling_of_mail(team_runtime_id: str | None) -> AsyncIterator[None]:
    """Around a tool call: the mail its mailbox tools send is announced to the running team
    runtime (a signal), which claims it as members are free."""
    if team_runtime_id is None:
        yield
        return
    sent: list[str] = []
    token = mail_sent.set(sent)
    try:
        yield
    finally:
        mail_sent.reset(token)
        if sent:
            try:
                handle = activity.client().get_workflow_handle(team_runtime_id)
                await handle.signal("mail", MailNotice(mailboxes=sent))
            except Exception as err:  # the run ended: the mail waits for drain() or a query
                activity.logger.info("team runtime %s not told of mail: %s", team_runtime_id, err)


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
