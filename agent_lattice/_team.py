"""Mailbox teams (seeds: Team Mailbox Collaboration): a lead agent with member tools.

``create_team()`` injects one tool per member into the lead. ``mode: "ask"`` runs the member
now (a child workflow of the lead's query) and returns its answer; ``mode: "handoff"``
answers at once with a receipt, and the team runtime — a ``TeamWorkflow`` that is the parent
of the lead's query — runs the accepted work as child workflows of its own, at most
``max_concurrent_work_items`` at a time (one at a time per member mailbox). The lead is not
asked again until every handoff of its last batch has reported, and the reports reach it in
handoff order. A Team is an AgentLike: ``query()``, ``prompt()``, ``interrupt()``.
"""

from __future__ import annotations

import dataclasses
import json
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from ._errors import OptionError
from ._mailbox import (
    FINAL_STATUSES,
    MessageKind,
    TeamMailbox,
    TeamMessage,
    check_mailbox,
    mailbox_id,
)
from ._messages import ResultMessage, SDKMessage
from ._options import check_options
from ._tools import ToolDefinition, ToolResult, tool

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = [
    "DrainResult",
    "Team",
    "TeamMember",
    "create_team",
    "register_default_mailbox",
    "team_member",
    "team_of",
]

# The default team mailbox, kept by Temporal: the client registers its factory on import
# (the domain never imports the client). Called with the team's name and how to find the
# lead's runtime when the mailbox is first used.
DefaultMailbox = Callable[[str, Callable[[], Any]], TeamMailbox]
_default_mailbox: list[DefaultMailbox] = []
# each team's lead (the view create_team() makes) to its team: how workers find a team's
# mailbox from the lead's runs (weak both ways: a team the host drops is collected)
_teams: weakref.WeakKeyDictionary[Any, weakref.ref[Team]] = weakref.WeakKeyDictionary()


def register_default_mailbox(factory: DefaultMailbox) -> None:
    """Install the factory of a team's default mailbox (``agent_lattice.client`` does)."""
    _default_mailbox[:] = [factory]


def team_of(lead: Any) -> Team | None:
    """The team ``lead`` leads (the ``team.lead`` of a :func:`create_team` team), or None."""
    ref = _teams.get(lead)
    return ref() if ref is not None else None


_TEAM_OPTIONS = frozenset(
    {"name", "lead", "members", "mailbox", "runner", "expose_lead_mailbox_tools", "observer"}
)
_MEMBER_OPTIONS = frozenset({"name", "role", "focus", "agent"})
_RUNNER_OPTIONS = frozenset({"max_concurrent_work_items"})


@dataclass(frozen=True)
class TeamMember:
    name: str
    agent: Any
    role: str | None = None
    focus: str | None = None


def team_member(**options: Any) -> TeamMember:
    """A member of a team: ``name``, ``agent`` (an Agent, AgentSpec or AgentLike), and
    optionally ``role`` and ``focus`` (shown to the lead in the member's tool)."""
    check_options("TeamMemberOptions", options, _MEMBER_OPTIONS)
    name = options.get("name")
    if not isinstance(name, str) or not name or "::" in name:
        raise OptionError("team_member(): name must be a non-empty string without '::'")
    if options.get("agent") is None:
        raise OptionError(f"team_member({name!r}): agent is required")
    return TeamMember(
        name=name, agent=options["agent"], role=options.get("role"), focus=options.get("focus")
    )


class Team:
    """A lead agent and its members, run by a ``TeamWorkflow``. Build one with
    :func:`create_team`."""

    def __init__(
        self,
        *,
        name: str,
        lead: Agent,
        members: Sequence[TeamMember],
        mailbox: TeamMailbox,
        max_concurrent_work_items: int,
    ) -> None:
        self.name = name
        self.lead = lead
        self.members = tuple(members)
        self.mailbox = mailbox
        self.max_concurrent_work_items = max_concurrent_work_items
        self._claims: dict[str, _Claim] = {}

    def mailbox_id(self, member: str) -> str:
        return mailbox_id(self.name, member)

    def answered(self, message_id: str, kind: MessageKind) -> None:
        """A member answered ``message_id`` (with team_reply or team_followup) while a
        drain had it claimed: the drain does not fail it."""
        claim = self._claims.get(message_id)
        if claim is None:
            return
        if kind == "reply":
            claim.replied = True
        else:
            claim.followed_up = True

    def query(self, prompt: Any, **options: Any) -> AsyncIterator[SDKMessage]:
        """The lead's messages, and ``team_message`` / ``team_agent`` events as the team works."""
        from ._agent import start_query

        return start_query(self.lead, prompt, options, team=self).messages()

    async def prompt(self, prompt: Any, **options: Any) -> ResultMessage:
        """Run the team and return the lead's final result (team-wide usage)."""
        result: ResultMessage | None = None
        async for message in self.query(prompt, **{"stream": False, **options}):
            if isinstance(message, ResultMessage):
                result = message
        assert result is not None
        return result

    def interrupt(self) -> bool:
        """Interrupt the team's running query (it reaches the lead and the members' work)."""
        return self.lead.interrupt()

    async def send(
        self, to: str, body: str, *, from_: str = "user", subject: str | None = None
    ) -> TeamMessage:
        """Put a message in a member's mailbox (``to``: a member name or a mailbox id)."""
        target = to if "::" in to else self.mailbox_id(to)
        if target.split("::", 1)[1] not in {"lead", *(m.name for m in self.members)}:
            raise OptionError(f"team {self.name!r} has no member mailbox {target!r}")
        sender = from_ if "::" in from_ or from_ == "user" else self.mailbox_id(from_)
        return await self.mailbox.send(
            TeamMessage(from_mailbox=sender, to_mailbox=target, body=body, subject=subject)
        )

    async def drain(
        self, *, max_rounds: int = 5, max_messages: int = 20, **query: Any
    ) -> DrainResult:
        """Advance already-routed work: each round, every member claims the next pending
        message of its own mailbox and is prompted with it. Nothing is re-routed. A member
        that ends without ``team_reply`` or ``team_followup`` fails the message, and a
        diagnostic follow-up goes to the sender's mailbox. A member that takes no tools (a
        team, a host AgentLike) answers with its final result: that is its reply."""
        for name, value in (("max_rounds", max_rounds), ("max_messages", max_messages)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise OptionError(f"drain(): {name} must be a positive integer; got {value!r}")
        result = DrainResult(rounds=0)
        for _ in range(max_rounds):
            progressed = False
            for member in self.members:
                if len(result.processed) >= max_messages:
                    return result
                message = await self.mailbox.claim_next(self.mailbox_id(member.name))
                if message is None:
                    continue
                progressed = True
                await self._work_on(member, message, result, query)
            result.rounds += 1
            if not progressed:
                break
        return result

    async def _work_on(
        self,
        member: TeamMember,
        message: TeamMessage,
        result: DrainResult,
        query: Mapping[str, Any],
    ) -> None:
        from ._agent import Agent, AgentSpec

        # a team or a host AgentLike takes no tools: its final answer is its reply
        answers_itself = not isinstance(member.agent, Agent | AgentSpec)
        claim = self._claims[message.id] = _Claim(message)
        prompt = (
            f"Team {self.name}: a message for you in mailbox {message.to_mailbox}.\n"
            f"message_id: {message.id}\nfrom: {message.from_mailbox}\n"
            + (f"subject: {message.subject}\n" if message.subject else "")
            + f"\n{message.body}"
            + (
                ""
                if answers_itself
                else f"\n\nWhen you are done, call team_reply with message_id {message.id} and "
                "your result (team_followup for progress)."
            )
        )
        target = member.agent.spawn() if isinstance(member.agent, AgentSpec) else member.agent
        try:
            outcome = await target.prompt(prompt, **query)
        finally:
            self._claims.pop(message.id, None)
        result.processed.append(message)
        if claim.replied or claim.followed_up:
            return
        if answers_itself and not outcome.is_error:
            await self.mailbox.send(_answer_to(message, "reply", outcome.result or ""))
            await self.mailbox.set_status(message.id, "done", result=outcome.result)
            return
        reason = (
            f"{member.name} ended ({outcome.subtype})"
            if answers_itself
            else f"{member.name} ended ({outcome.subtype}) without team_reply or team_followup"
        )
        failed = await self.mailbox.set_status(message.id, "failed", result=reason)
        result.failed.append(failed)
        diagnostic = (
            f"Message {message.id} failed: {reason}. Its final text was: "
            f"{(outcome.result or '')[:500]}"
        )
        await self.mailbox.send(_answer_to(message, "followup", diagnostic))


def _answer_to(original: TeamMessage, kind: MessageKind, body: str) -> TeamMessage:
    """A reply or follow-up to ``original``, from the mailbox it was sent to, in its thread."""
    return TeamMessage(
        from_mailbox=original.to_mailbox,
        to_mailbox=original.from_mailbox,
        kind=kind,
        body=body,
        thread_id=original.thread_id,
        reply_to=original.id,
    )


def create_team(**options: Any) -> Team:
    """A team: ``name``, ``lead`` (an Agent), ``members`` (``team_member(...)``), ``mailbox``
    (default: ``create_workflow_mailbox(name)``, kept by Temporal; the TeamWorkflow keeps a
    run's own work durable whatever the backend),
    ``runner={"max_concurrent_work_items": N}`` (default 1), ``expose_lead_mailbox_tools``,
    ``observer`` (the host runtime's observation support for members' ``mode: "observe"``)."""
    from ._agent import Agent
    from ._delegation import check_observer, member_tool

    check_options("TeamOptions", options, _TEAM_OPTIONS)
    name = options.get("name")
    if not isinstance(name, str) or not name or "::" in name:
        raise OptionError("create_team(): name must be a non-empty string without '::'")
    lead = options.get("lead")
    if not isinstance(lead, Agent):
        raise OptionError(f"create_team({name!r}): lead must be an Agent (create_agent())")
    members = list(options.get("members") or [])
    if not all(isinstance(m, TeamMember) for m in members):
        raise OptionError(f"create_team({name!r}): members must be team_member(...) objects")
    names = [m.name for m in members]
    if len(set(names)) != len(names):
        raise OptionError(f"create_team({name!r}): duplicate member names {names}")
    runner = options.get("runner") or {}
    if not isinstance(runner, Mapping):
        raise OptionError(f"create_team({name!r}): runner must be a mapping")
    check_options("TeamRunnerOptions", runner, _RUNNER_OPTIONS)
    limit = runner.get("max_concurrent_work_items", 1)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise OptionError(
            f"create_team({name!r}): max_concurrent_work_items must be a positive integer; "
            f"got {limit!r}"
        )
    mailbox = options.get("mailbox")
    if mailbox is None:  # the default: kept by Temporal, named after the team
        if not _default_mailbox:
            raise OptionError(f"create_team({name!r}): no default mailbox; pass mailbox=")
        mailbox = _default_mailbox[0](name, lambda: lead.runtime)
    else:
        mailbox = check_mailbox(mailbox, "create_team()")
    taken = {t.name for t in lead.config.tools}
    clash = [m.name for m in members if m.name in taken]
    if clash:
        raise OptionError(f"create_team({name!r}): the lead already has tools named {clash}")
    team = Team(
        name=name,
        lead=lead,
        members=members,
        mailbox=mailbox,
        max_concurrent_work_items=limit,
    )
    # members that can take tools get their mailbox tools: a session now (a view of it: the
    # host's Agent keeps its tools), a spec in every session it spawns (before the lead's
    # member tools capture the targets)
    team.members = tuple(_with_mailbox_tools(team, m) for m in members)
    observer = check_observer(options.get("observer"), f"create_team({name!r}):")
    tools = [
        member_tool(
            name,
            m,
            inner_team=m.agent if isinstance(m.agent, Team) else None,
            observer=observer,
        )
        for m in team.members
    ]
    if options.get("expose_lead_mailbox_tools"):
        tools += mailbox_tools(team, "lead")
    # the lead the team runs: the host's lead with the member tools, on the same session
    team.lead = lead.with_tools(tools)
    _teams[team.lead] = weakref.ref(team)
    return team


def has_mailbox_tools(agent: Any) -> bool:
    """Whether an Agent, or the sessions an AgentSpec spawns, have the mailbox tools."""
    from ._agent import Agent, AgentSpec

    if isinstance(agent, Agent):
        return agent.tool("team_reply") is not None
    if isinstance(agent, AgentSpec):
        return any(
            getattr(t, "name", None) == "team_reply" for t in agent.options.get("tools") or []
        )
    return False


def _with_mailbox_tools(team: Team, member: TeamMember) -> TeamMember:
    from ._agent import Agent, AgentSpec

    agent = member.agent
    if has_mailbox_tools(agent):
        return member
    extra = mailbox_tools(team, member.name)
    if isinstance(agent, Agent):
        agent = agent.with_tools(extra)
    elif isinstance(agent, AgentSpec):
        own = list(agent.options.get("tools") or [])
        agent = AgentSpec({**agent.options, "tools": [*own, *extra]})
    return dataclasses.replace(member, agent=agent)


# -- the mailbox side: send, drain, and the members' mailbox tools ------------------------


class _Send(BaseModel):
    to: str = Field(description='A member name of this team, or a full mailbox id "team::member".')
    body: str
    subject: str | None = None


class _Inbox(BaseModel):
    status: Literal["pending", "processing", "done", "failed", "cancelled"] | None = None


class _MessageRef(BaseModel):
    message_id: str


class _Answer(BaseModel):
    message_id: str = Field(description="The message you are answering.")
    body: str


@dataclass
class _Claim:
    """The message a member is working on in a drain, and what it did about it."""

    message: TeamMessage
    replied: bool = False
    followed_up: bool = False


@dataclass
class DrainResult:
    rounds: int
    processed: list[TeamMessage] = field(default_factory=list)
    failed: list[TeamMessage] = field(default_factory=list)


def mailbox_tools(team: Team, owner: str) -> list[ToolDefinition[Any]]:
    """``team_send``, ``team_inbox``, ``team_read``, ``team_reply``, ``team_followup`` and
    ``team_status`` for the mailbox ``owner`` (a member name, or ``lead``)."""
    me = mailbox_id(team.name, owner)

    def address(to: str) -> str:
        return to if "::" in to else mailbox_id(team.name, to)

    def describe(m: TeamMessage) -> dict[str, Any]:
        return {
            "message_id": m.id,
            "from": m.from_mailbox,
            "to": m.to_mailbox,
            "kind": m.kind,
            "status": m.status,
            "subject": m.subject,
            "body": m.body,
            "thread_id": m.thread_id,
            "result": m.result,
        }

    async def send(input: _Send) -> str:
        sent = await team.mailbox.send(
            TeamMessage(
                from_mailbox=me,
                to_mailbox=address(input.to),
                body=input.body,
                subject=input.subject,
            )
        )
        return json.dumps({"status": "sent", "message_id": sent.id, "to": sent.to_mailbox})

    async def inbox(input: _Inbox) -> str:
        return json.dumps([describe(m) for m in await team.mailbox.inbox(me, status=input.status)])

    async def read(input: _MessageRef) -> ToolResult:
        message = await team.mailbox.get(input.message_id)
        if message is None:
            return ToolResult(content=f"No message {input.message_id!r}.", is_error=True)
        return ToolResult(content=json.dumps(describe(message)))

    async def answer(input: _Answer, kind: MessageKind) -> ToolResult:
        original = await team.mailbox.get(input.message_id)
        if original is None or original.to_mailbox != me:
            return ToolResult(
                content=f"{input.message_id!r} is not a message in your mailbox ({me}).",
                is_error=True,
            )
        sent = await team.mailbox.send(_answer_to(original, kind, input.body))
        if kind == "reply" and original.status not in FINAL_STATUSES:
            await team.mailbox.set_status(original.id, "done", result=input.body)
        team.answered(original.id, kind)
        return ToolResult(
            content=json.dumps({"status": "sent", "message_id": sent.id, "kind": kind})
        )

    async def reply(input: _Answer) -> ToolResult:
        return await answer(input, "reply")

    async def followup(input: _Answer) -> ToolResult:
        return await answer(input, "followup")

    async def status(input: _Inbox) -> str:
        counts: dict[str, dict[str, int]] = {}
        for name in ["lead", *(m.name for m in team.members)]:
            box = mailbox_id(team.name, name)
            for m in await team.mailbox.inbox(box):
                counts.setdefault(box, {}).setdefault(m.status, 0)
                counts[box][m.status] += 1
        return json.dumps(counts)

    return [
        tool("team_send", "Send a message to a team member's mailbox.", _Send, send),
        tool(
            "team_inbox",
            "List the messages in your mailbox.",
            _Inbox,
            inbox,
            is_concurrency_safe=lambda _: True,
        ),
        tool(
            "team_read",
            "Read one message by id.",
            _MessageRef,
            read,
            is_concurrency_safe=lambda _: True,
        ),
        tool(
            "team_reply",
            "Reply to a message with your final result; it completes the message.",
            _Answer,
            reply,
        ),
        tool(
            "team_followup",
            "Send a progress update about a message upstream; the message stays open.",
            _Answer,
            followup,
        ),
        tool(
            "team_status",
            "Message counts per mailbox and status.",
            _Inbox,
            status,
            is_concurrency_safe=lambda _: True,
        ),
    ]
