"""Inputs and outputs of the workflows and activities (one pydantic model per call).

Fields are only ever added at the end with defaults, so histories already recorded keep
replaying.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field
from temporalio.contrib.workflow_streams import WorkflowStreamState

from .._mailbox import TeamMessage
from .._messages import (
    ContentBlock,
    ModelMessage,
    ResultMessage,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

__all__ = [
    "ActivitySettings",
    "AgentRef",
    "AgentRunInput",
    "AgentRunOutput",
    "CompactInput",
    "CompactOutput",
    "CompactionRef",
    "Continuation",
    "DelegateCallInput",
    "DelegatePrepared",
    "Handoff",
    "MailboxMirrorInput",
    "ModelCallInput",
    "ModelCallOutput",
    "Report",
    "RequestOptions",
    "TeamReportInput",
    "TeamRunInput",
    "ToolCallInput",
    "ToolCallOutput",
    "ToolResultsHookInput",
    "TraceInput",
]


class CompactionRef(BaseModel):
    """``auto_compact`` as the workflow needs it."""

    threshold_tokens: int
    keep_recent_messages: int
    prompt: str


class AgentRef(BaseModel):
    """Which agent a workflow runs: the worker resolves ``key`` to code, tools and client."""

    key: str
    name: str
    model: str
    max_turns: int
    tools: list[str] = Field(default_factory=list)
    cheap_tools: list[str] = Field(default_factory=list)
    requires_output: bool = False
    max_concurrency: int = 10
    result_hook: bool = False
    traced: bool = False
    compaction: CompactionRef | None = None
    # agent tools whose calls run as child workflows (agent_tool()/delegate_tool() on an Agent
    # session or an AgentSpec)
    delegates: list[str] = Field(default_factory=list)
    # team member tools whose target is a host AgentLike: their handoffs go to the team
    # runtime (through the delegation activities); their asks run as tool activities
    member_adapters: list[str] = Field(default_factory=list)
    # tools marked idempotent (a call cut off is tried once more) and per-tool timeouts
    idempotent_tools: list[str] = Field(default_factory=list)
    tool_timeouts: dict[str, float] = Field(default_factory=dict)


class ActivitySettings(BaseModel):
    """Timeouts and retries of the activities a query schedules (seconds)."""

    model_timeout_s: float = 600.0
    model_heartbeat_s: float = 20.0
    model_max_attempts: int = 8
    tool_timeout_s: float = 600.0
    tool_heartbeat_s: float = 20.0
    retry_initial_s: float = 1.0
    retry_max_interval_s: float = 60.0
    # a query continues-as-new after this many turns in one run (or when Temporal suggests it)
    turns_per_run: int = 200
    # A model request gives up this long after it was first scheduled, whatever its attempts
    # and retry-after waits (the activity's schedule-to-close timeout) ...
    model_give_up_s: float = 900.0
    # ... and sooner when the provider cannot be reached at all (connection refused, DNS):
    # a wrong base_url is reported within this time, naming the URL
    model_unreachable_give_up_s: float = 20.0


class RequestOptions(BaseModel):
    """Per-query model parameters (query values over agent defaults), no secrets."""

    output_format: Any = None
    thinking: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    timeout_ms: int | None = None


class Continuation(BaseModel):
    """A query's state carried across continue-as-new (the conversation stays by reference)."""

    head: str | None
    unsent: list[ModelMessage] = Field(default_factory=list)
    turns: int
    new_count: int
    usage: Usage
    usage_by_agent: dict[str, Usage] = Field(default_factory=dict)
    stop_reason: str | None = None
    last_input_tokens: int = 0
    compacted: bool = False
    recovered: bool = False
    published: int
    trace_seq: int
    started_at: datetime
    runs: int = 1
    stream: WorkflowStreamState | None = None


class TraceParent(BaseModel):
    """Where a delegated run sits in its parent's trace."""

    run_id: str
    tool_use_id: str | None = None


class AgentRunInput(BaseModel):
    agent: AgentRef
    session_id: str
    # by value; a large prompt is in the transcript only (prompt_in_head) and this is a preview
    prompt: str | list[ContentBlock]
    # the conversation before this query, by value: runs started before transcripts (legacy)
    history: list[ModelMessage] = Field(default_factory=list)
    # the transcript head: the conversation so far, this query's prompt included
    head: str | None = None
    prompt_in_head: bool = False
    # input tokens the conversation's last model response reported (the compaction trigger)
    last_input_tokens: int = 0
    # directories this query may write to beyond the agent's workspace (accepted grants)
    workspace_grants: list[str] = Field(default_factory=list)
    # the TeamWorkflow running this (lead) query's handoffs, when it is a team's lead
    team_workflow_id: str | None = None
    # set when a long query continued as new: where the previous run left off
    continuation: Continuation | None = None
    stream: bool = True
    stream_to: str | None = None
    stream_channel: str | None = None
    settings: ActivitySettings = Field(default_factory=ActivitySettings)
    request: RequestOptions = Field(default_factory=RequestOptions)
    context: Any = None
    # whole-query deadline (seconds); passing it ends the query with error_abort
    deadline_s: float | None = None
    # traced by a per-query tracer (``query(tracer=...)``, bound in the caller's process),
    # and, for a delegated run, the run and tool call it was delegated from
    traced: bool = False
    trace_parent: TraceParent | None = None


class AgentRunOutput(BaseModel):
    result: ResultMessage
    # legacy runs: the new messages by value
    new_messages: list[ModelMessage] = Field(default_factory=list)
    # the transcript after the run: ``head`` plus ``unsent`` (messages made after the last
    # model request, tool results by reference); the run added the last ``new_count``
    head: str | None = None
    unsent: list[ModelMessage] = Field(default_factory=list)
    new_count: int = 0
    # the run compacted the conversation: the transcript replaces the history
    compacted: bool = False


class ModelCallInput(BaseModel):
    agent_key: str
    session_id: str
    turn: int
    # the transcript: ``head`` (by reference) then ``unsent`` (by value, not yet stored)
    head: str | None = None
    unsent: list[ModelMessage] = Field(default_factory=list)
    stream: bool = True
    stream_to: str | None = None
    stream_channel: str | None = None
    after: int = 0
    request: RequestOptions = Field(default_factory=RequestOptions)
    run_id: str | None = None
    trace_seq: int = 0
    # see ActivitySettings.model_unreachable_give_up_s; the first wait between its attempts
    unreachable_give_up_s: float | None = None
    retry_initial_s: float = 1.0


class ModelCallOutput(BaseModel):
    message: ModelMessage
    # the transcript as sent (head plus the unsent messages), then with ``message`` appended
    request_head: str | None = None
    head: str | None = None
    # tool_use ids that may run beside others (the agent's concurrency mode applied)
    concurrency_safe: list[str] = Field(default_factory=list)
    # set when the host's batch policy rejected the batch: no call may run
    batch_rejection: dict[str, Any] | None = None


class ToolCallInput(BaseModel):
    agent_key: str
    session_id: str
    tool_use: ToolUseBlock
    run_id: str | None = None
    context: Any = None
    trace_seq: int = 0
    workspace_grants: list[str] = Field(default_factory=list)


class ToolResultsHookInput(BaseModel):
    """Results the workflow made itself (unknown tool, truncation, rejected batch, failed
    call), sent through the agent's ``on_tool_result`` hook."""

    agent_key: str
    session_id: str
    calls: list[ToolUseBlock]
    results: list[ToolResultBlock]


class TraceInput(BaseModel):
    """Trace events the workflow produces itself (run start, its own results, the result)."""

    agent_key: str
    session_id: str
    run_id: str
    events: list[dict[str, Any]]


class ToolCallOutput(BaseModel):
    block: ToolResultBlock
    end_turn: bool = False
    structured_result: Any = None


class CompactInput(BaseModel):
    agent_key: str
    session_id: str
    head: str | None
    unsent: list[ModelMessage] = Field(default_factory=list)
    keep_recent_messages: int
    prompt: str
    timeout_ms: int | None = None


class CompactOutput(BaseModel):
    # None: nothing could be summarized (no safe cut); the transcript is unchanged
    head: str | None = None
    compacted_messages: int = 0
    usage: Usage | None = None


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
    workspace_grants: list[str] = Field(default_factory=list)
    # set when the work starts (the member's session as it is then)
    child: AgentRunInput | None = None
    workflow_id: str = ""
    task_queue: str | None = None
    # the member is a team: its TeamWorkflow runs the work (``child`` is its lead's query)
    team_child: TeamRunInput | None = None
    # the member is a host AgentLike: an activity runs the work (no child workflow)
    adapter: bool = False


class Report(BaseModel):
    """A member's report on one handoff, for the lead."""

    tool_use_id: str
    member: str
    message_id: str
    status: Literal["completed", "failed", "cancelled"]
    content: str
    usage: Usage = Field(default_factory=Usage)
    usage_by_agent: dict[str, Usage] = Field(default_factory=dict)


class MailboxMirrorInput(BaseModel):
    """The TeamWorkflow's mailbox state, mirrored to the team's mailbox backend."""

    lead_key: str
    lead_session_id: str
    message: TeamMessage


class TeamReportInput(BaseModel):
    handoff: Handoff
    output: AgentRunOutput | None = None
    adapter_result: ResultMessage | None = None  # what a host AgentLike member answered
    error: str | None = None
    cancelled: bool = False  # the run stopped before this work started


class DelegatePrepared(BaseModel):
    # the call ends here (permission denied, invalid input, unsupported mode, busy session),
    # or, with ``handoff``, this is the receipt and the team runtime runs the work
    result: ToolCallOutput | None = None
    handoff: Handoff | None = None
    # the target is a team: start its TeamWorkflow (``workflow_id``) instead of ``child``
    team_child: TeamRunInput | None = None
    # else the child query to start
    child: AgentRunInput | None = None
    workflow_id: str | None = None
    task_queue: str | None = None
