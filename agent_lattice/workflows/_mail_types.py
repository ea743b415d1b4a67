# pyright: strict
"""The payloads of a team runtime's mail: a notice that mail was sent (a signal), a claim of
a member's next message and its settling by the drain rules (activities), and the delivery
of the lead's own mail (see ``workflows/_team`` and ``activities/_team``); and what a team run
returns: its lead's output with the events that came after the lead's run had closed."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from .._messages import TeamAgentEvent, TeamMessageEvent
from ..teams._mailbox import TeamMessage
from ._delegation_types import Handoff
from ._types import AgentRunOutput

__all__ = ["LeadMail", "MailClaim", "MailClaimed", "MailNotice", "MailSettled", "TeamRunOutput"]

TeamEvent = Annotated[TeamMessageEvent | TeamAgentEvent, Field(discriminator="type")]


class MailNotice(BaseModel):
    """Mail was sent to these mailboxes (a signal to the team runtime, and to its lead)."""

    mailboxes: list[str]


class MailClaim(BaseModel):
    """Claim the next pending message of a member's mailbox for the team runtime."""

    lead_key: str
    lead_session_id: str
    lead_workflow_id: str
    mailbox: str


class MailClaimed(BaseModel):
    """A claimed message and the work item that runs it (neither: nothing was pending)."""

    message: TeamMessage | None = None
    handoff: Handoff | None = None


class MailSettled(BaseModel):
    """A claimed message after its work (see ``teams/_mail.settle_work``)."""

    message: TeamMessage
    upstream: str | None = None


class LeadMail(BaseModel):
    """Deliver the pending messages of a team lead's mailbox to its query."""

    lead_key: str
    lead_session_id: str


class TeamRunOutput(AgentRunOutput):
    """A TeamWorkflow's output: its lead's, and the team's events that came after the lead's
    run had closed (the work it left behind, ending ``cancelled``), which no longer reach the
    lead's stream: the caller puts them in the team query's stream before the result."""

    team_events: list[TeamEvent] = Field(default_factory=list[TeamEvent])
