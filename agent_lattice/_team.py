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
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._errors import OptionError
from ._mailbox import TeamMailbox, check_mailbox, create_memory_mailbox, mailbox_id
from ._messages import ResultMessage, SDKMessage
from ._options import check_options

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["Team", "TeamMember", "create_team", "team_member"]

_TEAM_OPTIONS = frozenset(
    {"name", "lead", "members", "mailbox", "runner", "expose_lead_mailbox_tools"}
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

    def mailbox_id(self, member: str) -> str:
        return mailbox_id(self.name, member)

    def query(self, prompt: Any, **options: Any) -> AsyncIterator[SDKMessage]:
        """The lead's messages, and ``team_message`` / ``team_agent`` events as the team works."""
        return self.lead._query_as_team(self, prompt, options)

    async def prompt(self, prompt: Any, **options: Any) -> ResultMessage:
        """Run the team and return the lead's final result (team-wide usage)."""
        result: ResultMessage | None = None
        async for message in self.query(prompt, stream=False, **options):
            if isinstance(message, ResultMessage):
                result = message
        assert result is not None
        return result

    def interrupt(self) -> bool:
        """Interrupt the team's running query (it reaches the lead and the members' work)."""
        return self.lead.interrupt()


def create_team(**options: Any) -> Team:
    """A team: ``name``, ``lead`` (an Agent), ``members`` (``team_member(...)``), ``mailbox``
    (default: in-memory; the TeamWorkflow keeps the run's work durable either way),
    ``runner={"max_concurrent_work_items": N}`` (default 1), ``expose_lead_mailbox_tools``."""
    from ._agent import Agent
    from ._delegation import member_tool

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
    if options.get("expose_lead_mailbox_tools"):
        raise OptionError(
            "create_team(): expose_lead_mailbox_tools is not available yet in this version"
        )
    mailbox = options.get("mailbox")
    mailbox = (
        check_mailbox(mailbox, "create_team()") if mailbox is not None else create_memory_mailbox()
    )
    taken = {t.name for t in lead.config.tools}
    clash = [m.name for m in members if m.name in taken]
    if clash:
        raise OptionError(f"create_team({name!r}): the lead already has tools named {clash}")
    tools = tuple(member_tool(name, m) for m in members)
    lead.config = dataclasses.replace(lead.config, tools=(*lead.config.tools, *tools))
    return Team(
        name=name,
        lead=lead,
        members=members,
        mailbox=mailbox,
        max_concurrent_work_items=limit,
    )
