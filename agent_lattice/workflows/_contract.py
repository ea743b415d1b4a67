# pyright: strict
"""The contract between the workflows and the activities: the activities' names, the failure
types that cross the boundary, how each call is timed and retried, and one typed helper per
activity, so that no workflow names an activity by a bare string or passes loose options.

The names are the ones histories were recorded with: an activity's name is in its scheduling
command and its local-activity marker, so a renamed member would stop old histories replaying.
Importable in the workflow sandbox (workflows import it passed through).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityCancellationType

from .._messages import ErrorKind, ResultMessage, ToolResultBlock

# ErrorKind (the types of the error results a failure maps to) lives beside ErrorInfo: the
# loop's pure decisions read it too
from ..teams._mailbox import TeamMessage
from ._approval_types import InputProblem, ToolInputCheck
from ._budget_types import SpendReport, Statement
from ._delegation_types import (
    DelegateCallInput,
    DelegatePrepared,
    Handoff,
    MailboxMirrorInput,
    Report,
    TeamReportInput,
)
from ._mail_types import LeadMail, MailClaim, MailClaimed, MailSettled
from ._types import (
    ActivitySettings,
    CompactInput,
    CompactOutput,
    LandInput,
    ModelCallInput,
    ModelCallOutput,
    ToolCallInput,
    ToolCallOutput,
    ToolResultsHookInput,
    TraceInput,
)

__all__ = [
    "HOST_FAILURES",
    "LAND",
    "MAIL_CLAIM",
    "MAIL_SETTLE",
    "PROVIDER_FAILURES",
    "SPEND",
    "SPEND_UPDATE",
    "TEAM_MAILBOX",
    "TEAM_REPORT",
    "TEAM_START",
    "TRACE",
    "ActivityName",
    "ErrorKind",
    "FailureType",
    "Preset",
    "adapter_preset",
    "call_tool",
    "check_tool_input",
    "claim_mail",
    "compact",
    "compaction_preset",
    "delegate_finish",
    "delegate_prepare",
    "deliver_lead_mail",
    "hook_results",
    "hooks_preset",
    "host_preset",
    "land_message",
    "mirror_mailbox",
    "model_preset",
    "report_spend",
    "report_work",
    "request_model",
    "settle_mail",
    "start_team_adapter",
    "start_work",
    "tool_preset",
    "trace",
]

T = TypeVar("T")


class ActivityName(StrEnum):
    """Every activity of the package, by the name it is registered and scheduled under."""

    MODEL_REQUEST = "lattice.model_request"
    COMPACT = "lattice.compact"
    TOOL_CALL = "lattice.tool_call"
    TOOL_RESULT_HOOKS = "lattice.tool_result_hooks"
    TRACE = "lattice.trace"
    DELEGATE_PREPARE = "lattice.delegate_prepare"
    DELEGATE_FINISH = "lattice.delegate_finish"
    TEAM_START = "lattice.team_start"
    TEAM_ADAPTER = "lattice.team_adapter"
    TEAM_REPORT = "lattice.team_report"
    TEAM_MAILBOX = "lattice.team_mailbox"
    CHECK_TOOL_INPUT = "lattice.check_tool_input"
    TEAM_CLAIM = "lattice.team_claim"
    TEAM_SETTLE = "lattice.team_settle"
    TEAM_LEAD_MAIL = "lattice.team_lead_mail"
    LAND_MESSAGE = "lattice.land_message"
    REPORT_SPEND = "lattice.report_spend"


class FailureType(StrEnum):
    """The ``ApplicationError`` types the activities raise; the workflows decide on them
    (retry or not, a result or a stopped query) and map them to an error result."""

    # the worker does not serve the agent (or the agent tool) the workflow names
    AGENT_NOT_REGISTERED = "AgentNotRegistered"
    # host code failed: the query stops, the caller's query()/prompt() raises
    HOOK_ERROR = "HookError"
    TRACER_ERROR = "TracerError"
    # the transcript store lost a head the workflow holds
    TRANSCRIPT_MISSING = "TranscriptMissing"
    # the call was cut off (its query ended or its worker stopped): retried, quietly
    ABANDONED = "Abandoned"
    # the model provider: retryable, final, or not reachable within its budget
    PROVIDER_ERROR = "ProviderError"
    PROVIDER_REJECTED = "ProviderRejected"
    PROVIDER_UNREACHABLE = "ProviderUnreachable"
    # the request ran past request_timeout_ms
    REQUEST_TIMEOUT = "RequestTimeout"
    COMPACTION_FAILED = "CompactionFailed"
    # a team member's session is busy with another query (the start is retried)
    MEMBER_BUSY = "MemberBusy"
    # a decision on an approval request was refused (an ApprovalError for its caller)
    APPROVAL_REFUSED = "ApprovalError"
    # a steer the run cannot take (it is ending, or the text is not one): False for its caller
    STEER_REFUSED = "SteerRefused"
    # a delegated run's history store, bound to fail_on_error, failed: the run stops
    HISTORY_STORE_ERROR = "HistoryStoreError"


# host code failed: the query stops (such a failure never becomes a tool result)
HOST_FAILURES = frozenset({FailureType.HOOK_ERROR, FailureType.TRACER_ERROR})
# the provider failed: an ``APIError`` result
PROVIDER_FAILURES = frozenset(
    {FailureType.PROVIDER_ERROR, FailureType.PROVIDER_REJECTED, FailureType.PROVIDER_UNREACHABLE}
)


@dataclass(frozen=True, kw_only=True)
class Preset:
    """How an activity call runs: as a local activity or not, its timeouts, its retries and
    what a cancellation waits for."""

    local: bool = False
    start_to_close: timedelta
    heartbeat: timedelta | None = None
    schedule_to_close: timedelta | None = None
    retry: RetryPolicy
    cancellation: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL

    def __post_init__(self) -> None:
        if self.local and self.heartbeat is not None:
            raise ValueError("a local activity has no heartbeat timeout")


def _final(*types: FailureType) -> list[str]:
    return [t.value for t in types]


def _model_retries(s: ActivitySettings, *final: FailureType) -> RetryPolicy:
    """Retries of a model call: Temporal owns them (the provider client's are off)."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=s.retry_initial_s),
        maximum_interval=timedelta(seconds=s.retry_max_interval_s),
        maximum_attempts=s.model_max_attempts,
        non_retryable_error_types=_final(
            FailureType.PROVIDER_REJECTED, FailureType.AGENT_NOT_REGISTERED, *final
        ),
    )


def model_preset(
    s: ActivitySettings, timeout_ms: int | None, *, wait_cancelled: bool = False
) -> Preset:
    """A model request: given up ``model_give_up_s`` after it was first scheduled. With
    ``wait_cancelled`` a cancelled request (an interrupt, an abort) is waited for until its
    worker stopped it, so a closed run leaves no pending activity behind."""
    return Preset(
        start_to_close=timedelta(
            seconds=s.model_timeout_s
            if timeout_ms is None
            # the activity enforces the deadline itself; this bounds a stuck worker
            else timeout_ms / 1000 + s.model_heartbeat_s
        ),
        heartbeat=timedelta(seconds=s.model_heartbeat_s),
        schedule_to_close=timedelta(seconds=s.model_give_up_s),
        retry=_model_retries(s, FailureType.HOOK_ERROR),
        cancellation=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
        if wait_cancelled
        else ActivityCancellationType.TRY_CANCEL,
    )


def compaction_preset(s: ActivitySettings) -> Preset:
    return Preset(
        start_to_close=timedelta(seconds=s.model_timeout_s),
        heartbeat=timedelta(seconds=s.model_heartbeat_s),
        schedule_to_close=timedelta(seconds=s.model_give_up_s),
        retry=_model_retries(s, FailureType.COMPACTION_FAILED, FailureType.REQUEST_TIMEOUT),
    )


def tool_preset(s: ActivitySettings, timeout_s: float, *, cheap: bool) -> Preset:
    """A tool call: tried twice at most (a call cut off may have had its side effect; its
    second attempt looks for the result it recorded). A cheap tool runs as a local activity.
    An abort waits for a started handler to settle."""
    final = _final(FailureType.AGENT_NOT_REGISTERED, FailureType.HOOK_ERROR)
    wait = ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
    if cheap:
        return Preset(
            local=True,
            start_to_close=timedelta(seconds=timeout_s),
            retry=RetryPolicy(maximum_attempts=2, non_retryable_error_types=final),
            cancellation=wait,
        )
    return Preset(
        start_to_close=timedelta(seconds=timeout_s),
        heartbeat=timedelta(seconds=s.tool_heartbeat_s),
        retry=RetryPolicy(
            initial_interval=timedelta(seconds=s.retry_initial_s),
            maximum_interval=timedelta(seconds=s.retry_max_interval_s),
            maximum_attempts=2,
            non_retryable_error_types=final,
        ),
        cancellation=wait,
    )


def host_preset(s: ActivitySettings) -> Preset:
    """Host code before and after an agent tool's child workflow (local activities)."""
    return Preset(
        local=True,
        start_to_close=timedelta(seconds=s.tool_timeout_s),
        retry=RetryPolicy(
            non_retryable_error_types=_final(
                FailureType.AGENT_NOT_REGISTERED, FailureType.HOOK_ERROR, FailureType.TRACER_ERROR
            )
        ),
    )


def hooks_preset(s: ActivitySettings) -> Preset:
    """``on_tool_result`` for results the workflow made itself (a local activity)."""
    return Preset(
        local=True,
        start_to_close=timedelta(seconds=s.tool_timeout_s),
        retry=RetryPolicy(
            non_retryable_error_types=_final(
                FailureType.HOOK_ERROR, FailureType.AGENT_NOT_REGISTERED
            )
        ),
    )


def adapter_preset(s: ActivitySettings) -> Preset:
    """A host AgentLike member's ``prompt()``: run once, heartbeating; a stop cancels it."""
    return Preset(
        start_to_close=timedelta(seconds=s.tool_timeout_s),
        heartbeat=timedelta(seconds=s.tool_heartbeat_s),
        retry=RetryPolicy(maximum_attempts=1),
        cancellation=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    )


TRACE = Preset(
    local=True,
    start_to_close=timedelta(seconds=60),
    retry=RetryPolicy(
        non_retryable_error_types=_final(FailureType.TRACER_ERROR, FailureType.AGENT_NOT_REGISTERED)
    ),
)
# a member busy with an ``ask`` is waited for (MemberBusy is retried)
TEAM_START = Preset(
    local=True,
    start_to_close=timedelta(seconds=60),
    retry=RetryPolicy(
        initial_interval=timedelta(seconds=0.5),
        maximum_interval=timedelta(seconds=5),
        non_retryable_error_types=_final(FailureType.AGENT_NOT_REGISTERED),
    ),
)
TEAM_REPORT = Preset(
    local=True,
    start_to_close=timedelta(seconds=60),
    retry=RetryPolicy(non_retryable_error_types=_final(FailureType.AGENT_NOT_REGISTERED)),
)
# an approval's updated_input against its tool's schema (the decision waits for it)
CHECK_INPUT = Preset(
    local=True,
    start_to_close=timedelta(seconds=30),
    retry=RetryPolicy(non_retryable_error_types=_final(FailureType.AGENT_NOT_REGISTERED)),
)
# a delegated run's message into its agent's history store (local: no history but the marker)
LAND = Preset(
    local=True,
    start_to_close=timedelta(seconds=60),
    retry=RetryPolicy(
        maximum_attempts=3,
        non_retryable_error_types=_final(
            FailureType.HISTORY_STORE_ERROR, FailureType.AGENT_NOT_REGISTERED
        ),
    ),
)
# the update a bank's run (an AgentWorkflow with a budget) takes a run's spending with
SPEND_UPDATE = "spend"
# a run's spending told to the banks it draws from (local: a marker). A bank whose query ended
# is left out of the answer; one that does not answer (its worker is down) is asked again
SPEND = Preset(
    local=True,
    start_to_close=timedelta(seconds=60),
    retry=RetryPolicy(maximum_interval=timedelta(seconds=10)),
)
# best effort: the team's own mailbox backend
TEAM_MAILBOX = Preset(
    local=True, start_to_close=timedelta(seconds=30), retry=RetryPolicy(maximum_attempts=3)
)

# A claim takes a message from the backend and cannot be taken back: a regular activity, so
# its result is recorded once (a local one runs again when the workflow task carrying its
# result is lost, and the first message would stay claimed for nobody).
MAIL_CLAIM = Preset(
    start_to_close=timedelta(seconds=60),
    retry=RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_attempts=3,
        non_retryable_error_types=_final(FailureType.AGENT_NOT_REGISTERED),
    ),
)

# the drain rules on a claimed message: host I/O, tried a few times (then the message stays
# processing in the backend, and the run goes on)
MAIL_SETTLE = Preset(
    local=True,
    start_to_close=timedelta(seconds=60),
    retry=RetryPolicy(
        maximum_attempts=5, non_retryable_error_types=_final(FailureType.AGENT_NOT_REGISTERED)
    ),
)


def _start(
    name: ActivityName,
    arg: object,
    result_type: type[T] | None,
    preset: Preset,
    summary: str,
) -> workflow.ActivityHandle[T]:
    if preset.local:
        handle: workflow.ActivityHandle[Any] = workflow.start_local_activity(
            name.value,
            arg,
            result_type=result_type,
            start_to_close_timeout=preset.start_to_close,
            schedule_to_close_timeout=preset.schedule_to_close,
            retry_policy=preset.retry,
            cancellation_type=preset.cancellation,
            summary=summary,
        )
        return handle
    handle = workflow.start_activity(
        name.value,
        arg,
        result_type=result_type,
        start_to_close_timeout=preset.start_to_close,
        heartbeat_timeout=preset.heartbeat,
        schedule_to_close_timeout=preset.schedule_to_close,
        retry_policy=preset.retry,
        cancellation_type=preset.cancellation,
        summary=summary,
    )
    return handle


async def request_model(input: ModelCallInput, preset: Preset, *, summary: str) -> ModelCallOutput:
    return await _start(ActivityName.MODEL_REQUEST, input, ModelCallOutput, preset, summary)


async def compact(input: CompactInput, preset: Preset, *, summary: str) -> CompactOutput:
    return await _start(ActivityName.COMPACT, input, CompactOutput, preset, summary)


async def call_tool(input: ToolCallInput, preset: Preset, *, summary: str) -> ToolCallOutput:
    return await _start(ActivityName.TOOL_CALL, input, ToolCallOutput, preset, summary)


async def hook_results(
    input: ToolResultsHookInput, preset: Preset, *, summary: str
) -> list[ToolResultBlock]:
    blocks: list[ToolResultBlock] = await _start(
        ActivityName.TOOL_RESULT_HOOKS, input, list[ToolResultBlock], preset, summary
    )
    return blocks


async def trace(input: TraceInput, preset: Preset = TRACE, *, summary: str) -> None:
    await _start(ActivityName.TRACE, input, None, preset, summary)


async def delegate_prepare(
    input: DelegateCallInput, preset: Preset, *, summary: str
) -> DelegatePrepared:
    return await _start(ActivityName.DELEGATE_PREPARE, input, DelegatePrepared, preset, summary)


async def delegate_finish(
    input: DelegateCallInput, preset: Preset, *, summary: str
) -> ToolCallOutput:
    return await _start(ActivityName.DELEGATE_FINISH, input, ToolCallOutput, preset, summary)


async def start_work(handoff: Handoff, preset: Preset = TEAM_START, *, summary: str) -> Handoff:
    """A queued handoff starts: the handoff with its ``work`` set."""
    return await _start(ActivityName.TEAM_START, handoff, Handoff, preset, summary)


def start_team_adapter(
    handoff: Handoff, preset: Preset, *, summary: str
) -> workflow.ActivityHandle[ResultMessage]:
    """A host AgentLike member's work, started (the handle cancels it)."""
    return _start(ActivityName.TEAM_ADAPTER, handoff, ResultMessage, preset, summary)


async def report_work(
    input: TeamReportInput, preset: Preset = TEAM_REPORT, *, summary: str
) -> Report:
    return await _start(ActivityName.TEAM_REPORT, input, Report, preset, summary)


async def mirror_mailbox(
    input: MailboxMirrorInput, preset: Preset = TEAM_MAILBOX, *, summary: str
) -> None:
    await _start(ActivityName.TEAM_MAILBOX, input, None, preset, summary)


async def check_tool_input(
    input: ToolInputCheck, preset: Preset = CHECK_INPUT, *, summary: str
) -> InputProblem:
    """What the tool's schema finds wrong with an updated input."""
    return await _start(ActivityName.CHECK_TOOL_INPUT, input, InputProblem, preset, summary)


async def claim_mail(input: MailClaim, preset: Preset = MAIL_CLAIM, *, summary: str) -> MailClaimed:
    """The next pending message of a member's mailbox, claimed (if there is one)."""
    return await _start(ActivityName.TEAM_CLAIM, input, MailClaimed, preset, summary)


async def settle_mail(
    input: TeamReportInput, preset: Preset = MAIL_SETTLE, *, summary: str
) -> MailSettled:
    """A claimed message's work ended: the drain rules applied (they send each answer once, so
    a local activity may run them again)."""
    return await _start(ActivityName.TEAM_SETTLE, input, MailSettled, preset, summary)


async def deliver_lead_mail(
    input: LeadMail, preset: Preset = MAIL_CLAIM, *, summary: str
) -> list[TeamMessage]:
    """The pending messages of a lead's mailbox, claimed and marked delivered."""
    delivered: list[TeamMessage] = await _start(
        ActivityName.TEAM_LEAD_MAIL, input, list[TeamMessage], preset, summary
    )
    return delivered


async def land_message(input: LandInput, preset: Preset = LAND, *, summary: str) -> bool:
    """Whether the store holds the conversation up to the message, after writing it."""
    synced: bool = await _start(ActivityName.LAND_MESSAGE, input, bool, preset, summary)
    return synced


async def report_spend(
    input: SpendReport, preset: Preset = SPEND, *, summary: str
) -> list[Statement]:
    """What each bank that answered says its query spent, after this run's spending."""
    said: list[Statement] = await _start(
        ActivityName.REPORT_SPEND, input, list[Statement], preset, summary
    )
    return said
