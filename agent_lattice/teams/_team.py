"""Mailbox teams (seeds: Team Mailbox Collaboration): a lead agent with member tools.

``create_team()`` injects one tool per member into the lead. ``mode: "ask"`` runs the member
now (a child workflow of the lead's query) and returns its answer; ``mode: "handoff"``
answers at once with a receipt, and the team runtime — a ``TeamWorkflow`` that is the parent
of the lead's query — runs the accepted work as child workflows of its own, at most
``max_concurrent_work_items`` at a time (one at a time per member mailbox). The lead is not
asked again until every handoff of its last batch has reported, and the reports reach it in
handoff order. While a query runs, the runtime also claims the mail members and the host
send (``team_send``, ``team.send()``) and runs it by the drain rules (``teams/_mail``); the
lead takes its own mailbox's mail with its next tool results. A Team is an AgentLike:
``query()``, ``prompt()``, ``interrupt()``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .._errors import OptionError
from .._messages import ResultMessage, SDKMessage
from .._options import check_options
from ._mail import DrainResult, mailbox_tools, settle_work, work_prompt
from ._mailbox import TeamMailbox, TeamMessage, check_mailbox, mailbox_id

if TYPE_CHECKING:
    from .._agent import Agent

__all__ = [
    "DrainResult",
    "MailWatcher",
    "RunsTeam",
    "Team",
    "TeamMember",
    "create_team",
    "final_result",
    "register_default_mailbox",
    "register_mail_announcer",
    "team_member",
    "team_of",
    "work_item_limit",
]

# The default team mailbox, kept by Temporal: the client registers its factory on import
# (the domain never imports the client). Called with the team's name and how to find the
# lead's runtime when the mailbox is first used.
DefaultMailbox = Callable[[str, Callable[[], Any]], TeamMailbox]
_default_mailbox: list[DefaultMailbox] = []
# each team's lead (the view create_team() makes) to its team: how workers find a team's
# mailbox from the lead's runs (weak both ways: a team the host drops is collected)
_teams: weakref.WeakKeyDictionary[Any, weakref.ref[Team]] = weakref.WeakKeyDictionary()
log = logging.getLogger("agent_lattice.team")


def register_default_mailbox(factory: DefaultMailbox) -> None:
    """Install the factory of a team's default mailbox (``agent_lattice.client`` does)."""
    _default_mailbox[:] = [factory]


# How a send that no query of this process watches reaches a query running elsewhere (the
# client registers it): called with the team and the mailboxes that got mail.
MailAnnouncer = Callable[["Team", list[str]], Awaitable[None]]
_mail_announcer: list[MailAnnouncer] = []


def register_mail_announcer(announce: MailAnnouncer) -> None:
    """Install how ``team.send()`` tells the team's queries running in other processes."""
    _mail_announcer[:] = [announce]


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
        self._watchers: list[MailWatcher] = []

    def mailbox_id(self, member: str) -> str:
        return mailbox_id(self.name, member)

    def watch_mail(self, notify: MailWatcher) -> Callable[[], None]:
        """Tell ``notify`` of the mailboxes :meth:`send` puts messages in (a running query's
        team runtime claims them); returns the function that stops telling it."""
        self._watchers.append(notify)
        return lambda: self._watchers.remove(notify) if notify in self._watchers else None

    def query(self, prompt: Any, **options: Any) -> AsyncIterator[SDKMessage]:
        """The lead's messages, and ``team_message`` / ``team_agent`` / ``agent_message``
        events as the team works."""
        from .._agent import start_query

        return start_query(self.lead, prompt, options, team=self).messages()

    async def prompt(self, prompt: Any, **options: Any) -> ResultMessage:
        """Run the team and return the lead's final result (team-wide usage)."""
        return await final_result(self.query(prompt, **{"stream": False, **options}))

    def interrupt(self) -> bool:
        """Interrupt the team's running query (it reaches the lead and the members' work)."""
        return self.lead.interrupt()

    async def send(
        self, to: str, body: str, *, from_: str = "user", subject: str | None = None
    ) -> TeamMessage:
        """Put a message in a member's mailbox (``to``: a member name or a mailbox id). While
        a query of this team runs, its team runtime claims it (a query of another process is
        told through Temporal, when this process is connected: a runtime bound to the lead,
        or the process runtime)."""
        target = to if "::" in to else self.mailbox_id(to)
        if target.split("::", 1)[1] not in {"lead", *(m.name for m in self.members)}:
            raise OptionError(f"team {self.name!r} has no member mailbox {target!r}")
        sender = from_ if "::" in from_ or from_ == "user" else self.mailbox_id(from_)
        sent = await self.mailbox.send(
            TeamMessage(from_mailbox=sender, to_mailbox=target, body=body, subject=subject)
        )
        # a query of this process watches its team's mail; else one may run elsewhere
        notifiers = list(self._watchers) or [
            functools.partial(announce, self) for announce in _mail_announcer
        ]
        for notify in notifiers:
            try:
                await notify([sent.to_mailbox])
            except Exception as err:  # the message is sent; drain() can still take it
                log.warning(
                    "team %s: a running query was not told of %s: %s", self.name, sent.id, err
                )
        return sent

    async def drain(
        self, *, max_rounds: int = 5, max_messages: int = 20, **query: Any
    ) -> DrainResult:
        """Advance already-routed work: each round, every member claims the next pending
        message of its own mailbox and is prompted with it. Nothing is re-routed. A member
        that ends without ``team_reply`` or ``team_followup`` fails the message, and a
        diagnostic follow-up goes to the sender's mailbox. A member that takes no tools (a
        team, a host AgentLike) answers with its final result: that is its reply. A reply or
        follow-up delivered to a member needs no answer."""
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
        from .._agent import Agent, AgentSpec

        # a team or a host AgentLike takes no tools: its final answer is its reply
        answers_itself = not isinstance(member.agent, Agent | AgentSpec)
        prompt = work_prompt(self.name, message, answers_itself=answers_itself)
        target = member.agent.spawn() if isinstance(member.agent, AgentSpec) else member.agent
        outcome = await target.prompt(prompt, **query)
        result.processed.append(message)
        settled = await settle_work(
            self.mailbox, member.name, message, outcome, answers_itself=answers_itself
        )
        if settled.message.status == "failed":
            result.failed.append(settled.message)


MailWatcher = Callable[[list[str]], Awaitable[None]]


class RunsTeam(Protocol):
    """What runs a team's query (a Team, or a TeamRunner with a limit of its own)."""

    @property
    def name(self) -> str: ...

    @property
    def max_concurrent_work_items(self) -> int: ...

    def watch_mail(self, notify: MailWatcher) -> Callable[[], None]: ...


async def final_result(messages: AsyncIterator[Any]) -> ResultMessage:
    """The result of a team query's stream (``prompt()`` of a Team or TeamRunner)."""
    result: ResultMessage | None = None
    async for message in messages:
        if isinstance(message, ResultMessage):
            result = message
    assert result is not None
    return result


def work_item_limit(value: Any, where: str) -> int:
    """``max_concurrent_work_items``: a positive integer."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise OptionError(
            f"{where}: max_concurrent_work_items must be a positive integer; got {value!r}"
        )
    return value


def create_team(**options: Any) -> Team:
    """A team: ``name``, ``lead`` (an Agent), ``members`` (``team_member(...)``), ``mailbox``
    (default: ``create_workflow_mailbox(name)``, kept by Temporal; the TeamWorkflow keeps a
    run's own work durable whatever the backend),
    ``runner={"max_concurrent_work_items": N}`` (default 1), ``expose_lead_mailbox_tools``,
    ``observer`` (the host runtime's observation support for members' ``mode: "observe"``)."""
    from .._agent import Agent
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
    limit = work_item_limit(runner.get("max_concurrent_work_items", 1), f"create_team({name!r})")
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
    from .._agent import Agent, AgentSpec

    if isinstance(agent, Agent):
        return agent.tool("team_reply") is not None
    if isinstance(agent, AgentSpec):
        return any(
            getattr(t, "name", None) == "team_reply" for t in agent.options.get("tools") or []
        )
    return False


def _with_mailbox_tools(team: Team, member: TeamMember) -> TeamMember:
    from .._agent import Agent, AgentSpec

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
