# pyright: strict
"""Inputs and outputs of the workflows and activities (one pydantic model per call).

Fields are only ever added at the end with defaults, so histories already recorded keep
replaying. A payload that is one of several shapes is a discriminated union (a ``kind``
tag); the shapes recorded before the tag existed still decode: the variant is inferred from
the fields that are set."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field
from temporalio.contrib.workflow_streams import WorkflowStreamState

from .._approvals import ApprovalAsk, ResolvedApproval
from .._messages import (
    ContentBlock,
    ErrorInfo,
    ModelMessage,
    ResultMessage,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from ..tools._batches import BatchDecision
from ._budget_types import Bank

__all__ = [
    "ActivitySettings",
    "AgentRef",
    "AgentRunInput",
    "AgentRunOutput",
    "CompactInput",
    "CompactOutput",
    "CompactionRef",
    "Continuation",
    "LandInput",
    "Landing",
    "ModelCallInput",
    "ModelCallOutput",
    "RequestOptions",
    "ToolCallInput",
    "ToolCallOutput",
    "ToolResultsHookInput",
    "TraceInput",
    "TraceItem",
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
    # the agent's default limit on how long an approval request waits (None: none)
    approval_timeout_s: float | None = None
    max_budget_usd: float | None = None  # the agent's default budget (US dollars)


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
    # a running query's tokens and cost attributes are upserted this long apart (0: every turn)
    index_every_s: float = Field(default=30.0, ge=0)


class RequestOptions(BaseModel):
    """Per-query model parameters (query values over agent defaults), no secrets."""

    output_format: Any = None
    thinking: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    timeout_ms: int | None = None


class Landing(BaseModel):
    """Where a delegated run's messages stand in its agent's history store: the run writes
    each as it lands (``lattice.land_message``), and its end writes only what did not land."""

    landed: int = 0  # the run's messages written so far, the prompt first
    synced: bool = True  # the store holds the conversation up to them
    # the store, bound to fail_on_error, failed: nothing more is written and the run stops
    error: ErrorInfo | None = None


class LandInput(BaseModel):
    """One message of a delegated run, for its agent's history store."""

    agent_key: str
    session_id: str
    index: int  # its place among the run's messages (the prompt is 0)
    message: ModelMessage | None  # None: the last of the conversation (a large prompt)
    # the conversation up to and including ``message``: the transcript at ``head``, then
    # ``unsent`` (read only when this process cannot tell what the store holds)
    head: str | None = None
    unsent: list[ModelMessage] = Field(default_factory=list[ModelMessage])
    synced: bool = True


class Continuation(BaseModel):
    """A query's state carried across continue-as-new (the conversation stays by reference)."""

    head: str | None
    unsent: list[ModelMessage] = Field(default_factory=list[ModelMessage])
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
    landing: Landing | None = None
    # what the query's own requests cost so far (those with a price), whether any had none,
    # and its finished children's shares
    cost_usd: float = 0.0
    cost_unknown: bool = False
    cost_by_agent: dict[str, float | None] = Field(default_factory=dict)
    ledger: dict[str, float] = Field(default_factory=dict)  # a bank's books (see Bank)
    # how the query's approval requests ended so far (the memo's history; see _approvals)
    approvals: list[ResolvedApproval] = Field(default_factory=list[ResolvedApproval])


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
    history: list[ModelMessage] = Field(default_factory=list[ModelMessage])
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
    deadline_s: float | None = None  # whole-query deadline (s): passing it ends in error_abort
    # traced by a per-query tracer (``query(tracer=...)``, bound in the caller's process),
    # and, for a delegated run, the run and tool call it was delegated from
    traced: bool = False
    trace_parent: TraceParent | None = None
    # the query's limit on how long an approval request waits (None: the agent's)
    approval_timeout_s: float | None = None
    # the TeamWorkflow told of the mail this run's mailbox tools send (a team member's work
    # or ask; a lead tells its own, ``team_workflow_id``)
    team_runtime_id: str | None = None
    # a delegated run whose agent has a history store: its messages are written as they land
    landing: Landing | None = None
    max_budget_usd: float | None = None  # this query's budget (None: the agent's)
    aborted: bool = False  # started aborted: a lead whose team was told before it started
    # the server has the Lattice search attributes: the run upserts them (see _visibility)
    search_attributes: bool = False
    # settings.index_every_s; None: a run recorded before it, which upserts at every tool turn
    index_every_s: float | None = None
    # the queries with a budget this run works for (delegated, a member's work), outermost first
    banks: list[Bank] = Field(default_factory=list[Bank])
    temporal_outcomes: bool = False  # Failed by an error, Canceled by a cancel (_outcomes)


class AgentRunOutput(BaseModel):
    result: ResultMessage
    # legacy runs: the new messages by value
    new_messages: list[ModelMessage] = Field(default_factory=list[ModelMessage])
    # the transcript after the run: ``head`` plus ``unsent`` (messages made after the last
    # model request, tool results by reference); the run added the last ``new_count``
    head: str | None = None
    unsent: list[ModelMessage] = Field(default_factory=list[ModelMessage])
    new_count: int = 0
    # the run compacted the conversation: the transcript replaces the history
    compacted: bool = False
    # what of the run its history store got as its messages landed (a delegated run)
    landing: Landing | None = None
    tail_from: int = 0  # the stream's messages the run's last workflow task published, from here
    tail: list[Any] = Field(default_factory=list[Any])


class ModelCallInput(BaseModel):
    agent_key: str
    session_id: str
    turn: int
    # the transcript: ``head`` (by reference) then ``unsent`` (by value, not yet stored)
    head: str | None = None
    unsent: list[ModelMessage] = Field(default_factory=list[ModelMessage])
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
    batch_rejection: BatchDecision | None = None
    cost_usd: float | None = None  # what the request cost (None: its model's price unknown)
    # the workflow cancelled the request mid-stream: ``message`` is empty but for the usage
    # reported so far (paid for), and nothing was stored
    cut_off: bool = False


class ToolCallInput(BaseModel):
    agent_key: str
    session_id: str
    tool_use: ToolUseBlock
    run_id: str | None = None
    context: Any = None
    trace_seq: int = 0
    workspace_grants: list[str] = Field(default_factory=list)
    # a person allowed this call: it runs without the permission callback or approval again
    approved: bool = False
    # the running TeamWorkflow to tell of mail the call's mailbox tools sent
    team_runtime_id: str | None = None


class ToolResultsHookInput(BaseModel):
    """Results the workflow made itself (unknown tool, truncation, rejected batch, failed
    call), sent through the agent's ``on_tool_result`` hook."""

    agent_key: str
    session_id: str
    calls: list[ToolUseBlock]
    results: list[ToolResultBlock]


class TraceItem(BaseModel):
    """One trace event the workflow produced: its sequence number, kind and data. A large
    prompt's content is not in ``data`` but read from the transcript (``content_head``)."""

    seq: int
    type: str
    data: dict[str, Any] = Field(default_factory=dict[str, Any])


class TraceInput(BaseModel):
    """Trace events the workflow produces itself (run start, its own results, the result)."""

    agent_key: str
    session_id: str
    run_id: str
    events: list[TraceItem]


class ToolCallOutput(BaseModel):
    block: ToolResultBlock
    end_turn: bool = False
    structured_result: Any = None
    # the call did not run: it waits for a person's decision (``block`` is a placeholder)
    approval: ApprovalAsk | None = None


class CompactInput(BaseModel):
    agent_key: str
    session_id: str
    head: str | None
    unsent: list[ModelMessage] = Field(default_factory=list[ModelMessage])
    keep_recent_messages: int
    prompt: str
    timeout_ms: int | None = None


class CompactOutput(BaseModel):
    # None: nothing could be summarized (no safe cut); the transcript is unchanged
    head: str | None = None
    compacted_messages: int = 0
    usage: Usage | None = None
    cost_usd: float | None = None
