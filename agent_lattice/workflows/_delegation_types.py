# pyright: strict
"""Inputs and outputs of delegation and teams: a delegated query (an agent tool call and
the child workflow it starts), a team's hand-offs to its members, and their reports.

Like ``_types``, fields are only ever added at the end with defaults, and payloads recorded
before a ``kind`` tag existed still decode."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, Discriminator, Field, RootModel, Tag, model_validator

from .._messages import ResultMessage, Usage
from ..teams._mailbox import TeamMessage
from ._types import AgentRunInput, AgentRunOutput, ToolCallInput, ToolCallOutput

__all__ = [
    "AdapterFinished",
    "AdapterWork",
    "AgentChild",
    "CallEnded",
    "ChildQuery",
    "DelegateCallInput",
    "DelegatePrepared",
    "HandedOff",
    "Handoff",
    "HandoffWork",
    "MailboxMirrorInput",
    "MemberCancelled",
    "MemberFailed",
    "MemberFinished",
    "Report",
    "TeamChild",
    "TeamReportInput",
    "TeamRunInput",
]


class DelegateCallInput(ToolCallInput):
    """An agent tool call, before (prepare) or after (finish) its child workflow."""

    # finish only: how the child query ended (None: it could not run, see ``error``)
    output: AgentRunOutput | None = None
    error: str | None = None
    # the TeamWorkflow of a team lead's query (handoffs go there)
    team_workflow_id: str | None = None


class TeamRunInput(BaseModel):
    team: str
    lead: AgentRunInput
    lead_workflow_id: str
    lead_task_queue: str
    max_concurrent_work_items: int = 1


class AgentChild(BaseModel):
    """A delegated query that runs as the target agent's ``AgentWorkflow``."""

    kind: Literal["agent"] = "agent"
    child: AgentRunInput
    workflow_id: str
    task_queue: str | None = None


class TeamChild(BaseModel):
    """A delegated query whose target leads a team: its ``TeamWorkflow`` runs it (the
    query is ``team.lead``)."""

    kind: Literal["team"] = "team"
    # recorded as ``team_child`` before the tag existed (beside a ``child`` equal to its lead)
    team: TeamRunInput = Field(validation_alias=AliasChoices("team", "team_child"))
    workflow_id: str
    task_queue: str | None = None

    @property
    def child(self) -> AgentRunInput:
        return self.team.lead


ChildQuery = AgentChild | TeamChild


class AdapterWork(BaseModel):
    """A handoff to a host AgentLike member: an activity runs its ``prompt()``."""

    kind: Literal["adapter"] = "adapter"


HandoffWork = Annotated[AgentChild | TeamChild | AdapterWork, Field(discriminator="kind")]


class Handoff(BaseModel):
    """One accepted handoff: the member work a TeamWorkflow runs for its lead."""

    team: str
    member: str
    tool_use_id: str
    tool_name: str
    lead_key: str
    lead_session_id: str
    lead_workflow_id: str = ""
    lead_run_id: str = ""  # the lead's run, for tracing (a member's run nests beneath it)
    message_id: str
    work_item_id: str
    thread_id: str
    from_mailbox: str
    to_mailbox: str
    task: str
    context: Any = None
    # accepted write grants (the caller's permissions cover them)
    workspace_grants: list[str] = Field(default_factory=list[str])
    # set when the work starts: what runs it (the member's session as it is then)
    work: HandoffWork | None = None
    # a message of the member's mailbox the team runtime claimed (not a lead's handoff): it
    # ends by the drain rules, and no report goes to the lead
    mail: bool = False

    @model_validator(mode="before")
    @classmethod
    def _untagged(cls, data: Any) -> Any:
        """A handoff recorded before ``work``: ``child``/``workflow_id``/``task_queue``,
        ``team_child`` (the member is a team) or ``adapter`` (a host AgentLike), flat."""
        if not isinstance(data, dict) or "work" in data:
            return data  # pyright: ignore[reportUnknownVariableType]
        flat: dict[str, Any] = dict(data)  # pyright: ignore[reportUnknownArgumentType]
        child = flat.pop("child", None)
        team_child = flat.pop("team_child", None)
        adapter = flat.pop("adapter", False)
        workflow_id = flat.pop("workflow_id", "")
        task_queue = flat.pop("task_queue", None)
        if adapter:
            flat["work"] = {"kind": "adapter"}
        elif team_child is not None:
            flat["work"] = {
                "kind": "team",
                "team": team_child,
                "workflow_id": workflow_id,
                "task_queue": task_queue,
            }
        elif child is not None:
            flat["work"] = {
                "kind": "agent",
                "child": child,
                "workflow_id": workflow_id,
                "task_queue": task_queue,
            }
        return flat

    @property
    def workflow_id(self) -> str:
        """The member's workflow ("" before the work starts, and for a host AgentLike)."""
        work = self.work
        return "" if work is None or isinstance(work, AdapterWork) else work.workflow_id


class Report(BaseModel):
    """A member's report on one handoff, for the lead."""

    tool_use_id: str
    member: str
    message_id: str
    status: Literal["completed", "failed", "cancelled"]
    content: str
    usage: Usage = Field(default_factory=Usage)
    usage_by_agent: dict[str, Usage] = Field(default_factory=dict)
    cost_by_agent: dict[str, float | None] = Field(default_factory=dict)


class MailboxMirrorInput(BaseModel):
    """The TeamWorkflow's mailbox state, mirrored to the team's mailbox backend."""

    lead_key: str
    lead_session_id: str
    message: TeamMessage


class _ReportOn(BaseModel):
    handoff: Handoff


class MemberFinished(_ReportOn):
    """The member's query ended (its result says how)."""

    kind: Literal["output"] = "output"
    output: AgentRunOutput


class AdapterFinished(_ReportOn):
    """What a host AgentLike member answered."""

    kind: Literal["adapter_result"] = "adapter_result"
    adapter_result: ResultMessage


class MemberFailed(_ReportOn):
    """The work could not run, or failed outside the member's query."""

    kind: Literal["error"] = "error"
    error: str


class MemberCancelled(_ReportOn):
    """The run stopped before this work started (or stopped a host AgentLike's call)."""

    kind: Literal["cancelled"] = "cancelled"
    error: str


def _report_kind(value: Any) -> str:
    """The variant of a report input; recorded before the tag: the field that is set."""
    if not isinstance(value, dict):
        return str(getattr(value, "kind", ""))
    data: dict[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
    if "kind" in data:
        return str(data["kind"])
    if data.get("output") is not None:
        return "output"
    if data.get("adapter_result") is not None:
        return "adapter_result"
    return "cancelled" if data.get("cancelled") else "error"


class TeamReportInput(
    RootModel[
        Annotated[
            Annotated[MemberFinished, Tag("output")]
            | Annotated[AdapterFinished, Tag("adapter_result")]
            | Annotated[MemberFailed, Tag("error")]
            | Annotated[MemberCancelled, Tag("cancelled")],
            Discriminator(_report_kind),
        ]
    ]
):
    """How one work item ended, for its report."""


class CallEnded(BaseModel):
    """The call ends here (permission denied, invalid input, unsupported mode, busy
    session): ``result`` answers it."""

    kind: Literal["result"] = "result"
    result: ToolCallOutput


class HandedOff(BaseModel):
    """The team runtime runs the work; ``result`` is the receipt that answers the call now."""

    kind: Literal["handoff"] = "handoff"
    result: ToolCallOutput
    handoff: Handoff


def _prepared_kind(value: Any) -> str:
    """The variant of a prepared call; recorded before the tag: the fields that are set."""
    if not isinstance(value, dict):
        return str(getattr(value, "kind", ""))
    data: dict[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
    if "kind" in data:
        return str(data["kind"])
    if data.get("handoff") is not None:
        return "handoff"
    if data.get("result") is not None:
        return "result"
    return "team" if data.get("team_child") is not None else "agent"


class DelegatePrepared(
    RootModel[
        Annotated[
            Annotated[CallEnded, Tag("result")]
            | Annotated[HandedOff, Tag("handoff")]
            | Annotated[AgentChild, Tag("agent")]
            | Annotated[TeamChild, Tag("team")],
            Discriminator(_prepared_kind),
        ]
    ]
):
    """An agent tool call after its host code ran: answered here, handed off to the team
    runtime, or the child query to start."""
