# pyright: strict
"""The agent loop as a state machine (pure: no I/O, no Temporal).

``next_step(state, event)`` decides what a query does next from its loop state and the last
thing that happened: request the model, answer a reply's tool calls, compact the
conversation, take the steers a person sent into the conversation, continue as a new run, or
finish with a result subtype. ``AgentWorkflow``
executes the steps (activities, timers, child workflows) and reports each outcome as the
next event. Every step carries the loop state it leaves behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ._loop import batch_rejection, rejected_results, truncated_results
from ._messages import ErrorInfo, ErrorKind, ModelMessage, ResultSubtype, ToolResultBlock, Usage
from .history._compaction import is_context_overflow
from .tools._batches import BatchDecision
from .tools._tool import SUBMIT_OUTPUT_TOOL_NAME

__all__ = [
    "ABORTED",
    "CONTEXT_WINDOW_EXCEEDED",
    "BatchDone",
    "BatchFailed",
    "Compact",
    "Compacted",
    "ContinueAsNew",
    "Event",
    "Finish",
    "LoopState",
    "ModelFailed",
    "ModelReplied",
    "RequestModel",
    "RunBatch",
    "Started",
    "SteersTaken",
    "Step",
    "TakeSteers",
    "input_tokens",
    "next_step",
]

# the stop reason of a reply whose request did not fit the model's context window
CONTEXT_WINDOW_EXCEEDED = "model_context_window_exceeded"

ABORTED = ErrorInfo(
    type=ErrorKind.ABORT, message="the query was aborted (cancelled or past its deadline)"
)


# Events: what just happened.


@dataclass(frozen=True)
class Started:
    """The run begins: a new query, or a long one picked up after continue-as-new."""


@dataclass(frozen=True)
class ModelReplied:
    message: ModelMessage
    # the host's batch policy rejected the reply's tool calls
    policy_rejection: BatchDecision | dict[str, Any] | None = None


@dataclass(frozen=True)
class ModelFailed:
    """The model request failed, was given up on its budget, or was cancelled."""

    error: ErrorInfo


@dataclass(frozen=True)
class Compacted:
    ok: bool  # False: nothing safe to summarize, or the summary failed


@dataclass(frozen=True)
class BatchDone:
    """Every tool call of the reply has its result in the conversation."""

    end_turn: bool = False  # a result ended the turn (``submit_output`` accepted)
    result: str | None = None
    structured_result: object = None
    steered: bool = False  # steers joined the results: the model answers them first


@dataclass(frozen=True)
class BatchFailed:
    """Host code of the batch (a hook, a strict tracer) failed: the query stops."""

    error: ErrorInfo


@dataclass(frozen=True)
class SteersTaken:
    """The waiting steers are in the conversation (a user message of their own)."""


Event = Started | ModelReplied | ModelFailed | Compacted | BatchDone | BatchFailed | SteersTaken


# State.


@dataclass(frozen=True)
class LoopState:
    max_turns: int
    turns_per_run: int = 200
    compaction_threshold: int | None = None  # None: no auto_compact
    requires_output: bool = False
    turns: int = 0  # model requests of the query (all its runs)
    turns_this_run: int = 0
    last_input_tokens: int = 0  # what the last reply's request read (the compaction trigger)
    recovered: bool = False  # overflow recovery is attempted once per query
    # what the workflow learnt from outside: signals, and Temporal's hint that the history
    # is long
    interrupted: bool = False
    aborted: bool = False
    continue_as_new_suggested: bool = False
    # a recovery compaction under way: the event it answers, which stands if it fails
    recovering: ModelReplied | ModelFailed | None = None
    # max_budget_usd (None: no budget), and what the query's model requests cost so far
    # (those with a known price; its delegated runs' and team members' included, as they
    # reported them): the workflow observes it
    max_budget_usd: float | None = None
    spent_usd: float = 0.0
    # the budget of a query this run was started under (delegated, or a team member's work),
    # the one with the least left when several, and what that query had spent when it last
    # said (the workflow asks before each model request)
    outer_budget_usd: float | None = None
    outer_spent_usd: float = 0.0
    # steers a person sent wait for the next model request (the workflow observes it)
    steered: bool = False


# Steps: what to do next.


@dataclass(frozen=True)
class RequestModel:
    """Send the conversation to the model (turn ``state.turns``)."""

    state: LoopState = field(kw_only=True)


@dataclass(frozen=True)
class RunBatch:
    """Answer the reply's tool calls: run them, or, when ``refused`` is set, answer each
    with these results instead (the reply was cut off at max_tokens, or its batch
    rejected)."""

    refused: tuple[ToolResultBlock, ...] = ()
    reason: Literal["run", "max_tokens", "rejected"] = "run"
    state: LoopState = field(kw_only=True)


@dataclass(frozen=True)
class Compact:
    """Summarize the older part of the conversation: past the threshold, or (``recovery``)
    to retry a request that overflowed the context window."""

    recovery: bool = False
    state: LoopState = field(kw_only=True)


@dataclass(frozen=True)
class TakeSteers:
    """Add the waiting steers to the conversation as a user message, after the reply the
    loop holds (a final answer they came during: the run goes on to answer them)."""

    state: LoopState = field(kw_only=True)


@dataclass(frozen=True)
class ContinueAsNew:
    """Hand the query to a fresh run before its history grows long."""

    state: LoopState = field(kw_only=True)


@dataclass(frozen=True)
class Finish:
    subtype: ResultSubtype
    result: str | None = None
    structured_result: object = None
    error: ErrorInfo | None = None
    state: LoopState = field(kw_only=True)


Step = RequestModel | RunBatch | Compact | TakeSteers | ContinueAsNew | Finish


def next_step(state: LoopState, event: Event) -> Step:
    """What the query does after ``event``, in loop state ``state``."""
    if isinstance(event, ModelReplied):
        return _on_reply(state, event)
    if isinstance(event, ModelFailed):
        return _on_failure(state, event)
    if isinstance(event, Compacted):
        return _on_compacted(state, event)
    if isinstance(event, BatchFailed):
        return Finish("error_during_execution", error=event.error, state=state)
    if isinstance(event, BatchDone):
        if state.aborted:  # every tool_use is answered in history, then the run ends
            return Finish("error_abort", error=ABORTED, state=state)
        if event.end_turn and not (event.steered and _can_answer_steer(state)):
            return Finish(
                "success",
                result=event.result,
                structured_result=event.structured_result,
                state=state,
            )
    return _turn(state)


def _turn(state: LoopState) -> Step:
    """The top of the loop: a signal, max_turns, a long history or the compaction
    threshold come before the next model request."""
    if state.aborted:
        return Finish("error_abort", error=ABORTED, state=state)
    if state.interrupted:
        return Finish("interrupted", state=state)
    if state.turns >= state.max_turns:
        return Finish(
            "error_max_turns",
            error=ErrorInfo(
                type=ErrorKind.MAX_TURNS,
                message=f"reached max_turns ({state.max_turns}) without a final answer",
            ),
            state=state,
        )
    if _over_budget(state):
        return _budget_spent(state)
    if state.steered:  # before a new run: the steers carry over in the conversation
        return TakeSteers(state=state)
    if state.turns_this_run >= state.turns_per_run or state.continue_as_new_suggested:
        return ContinueAsNew(state=state)
    threshold = state.compaction_threshold
    if threshold is not None and state.last_input_tokens > threshold:
        # an interrupt or abort during compaction is honoured first
        return Compact(state=replace(state, last_input_tokens=0))
    return RequestModel(
        state=replace(state, turns=state.turns + 1, turns_this_run=state.turns_this_run + 1)
    )


def _over_budget(state: LoopState) -> bool:
    """The next model request would start past a budget, the query's own or one it was
    started under (a compaction is a request too)."""
    return _over_own_budget(state) or (
        state.outer_budget_usd is not None and state.outer_spent_usd >= state.outer_budget_usd
    )


def _over_own_budget(state: LoopState) -> bool:
    return state.max_budget_usd is not None and state.spent_usd >= state.max_budget_usd


def _budget_spent(state: LoopState) -> Finish:
    if _over_own_budget(state):
        message = (
            f"spent ${state.spent_usd:.4f} of max_budget_usd "
            f"(${state.max_budget_usd:g}) without a final answer"
        )
    else:
        message = (
            f"the query this run works for spent ${state.outer_spent_usd:.4f} of its "
            f"max_budget_usd (${state.outer_budget_usd:g}) without a final answer"
        )
    return Finish(
        "error_max_budget",
        error=ErrorInfo(type=ErrorKind.MAX_BUDGET, message=message),
        state=state,
    )


def _can_answer_steer(state: LoopState) -> bool:
    """Whether a final answer may give way to one more request that answers a steer: not
    when the query is stopping or has no turn or budget left for it (the answer stands)."""
    return not (
        state.aborted or state.interrupted or state.turns >= state.max_turns or _over_budget(state)
    )


def _can_recover(state: LoopState) -> bool:
    return state.compaction_threshold is not None and not state.recovered


def _recover(state: LoopState, event: ModelReplied | ModelFailed) -> Compact | Finish:
    if _over_budget(state):  # the summary would be a request past the budget
        return _budget_spent(state)
    return Compact(
        recovery=True,
        state=replace(state, recovered=True, last_input_tokens=0, recovering=event),
    )


def _on_reply(state: LoopState, event: ModelReplied) -> Step:
    if event.message.stop_reason == CONTEXT_WINDOW_EXCEEDED and _can_recover(state):
        return _recover(state, event)  # the reply is dropped if the compaction succeeds
    return _reply(state, event)


def _reply(state: LoopState, event: ModelReplied) -> Step:
    """The reply stands: finish on a final answer, else answer its tool calls."""
    reply = event.message
    if reply.usage is not None:
        state = replace(state, last_input_tokens=input_tokens(reply.usage))
    if not reply.tool_uses and state.steered and _can_answer_steer(state):
        return TakeSteers(state=state)  # a steer came while the model answered: answer it too
    if not reply.tool_uses:
        if state.requires_output:
            return Finish(
                "error_missing_output",
                error=ErrorInfo(
                    type=ErrorKind.MISSING_OUTPUT,
                    message=f"the run ended without calling {SUBMIT_OUTPUT_TOOL_NAME}",
                ),
                state=state,
            )
        return Finish("success", result=reply.text, state=state)
    if reply.stop_reason == "max_tokens":
        return RunBatch(tuple(truncated_results(reply)), reason="max_tokens", state=state)
    rejection = batch_rejection(reply, event.policy_rejection, state.requires_output)
    if rejection is not None:
        return RunBatch(tuple(rejected_results(reply, rejection)), reason="rejected", state=state)
    return RunBatch(state=state)


def _on_failure(state: LoopState, event: ModelFailed) -> Step:
    if state.aborted:
        return Finish("error_abort", error=ABORTED, state=state)
    if state.interrupted:
        return Finish("interrupted", state=state)
    info = event.error
    if (
        info.type == ErrorKind.API_ERROR
        and is_context_overflow(info.status_code, info.message)
        and _can_recover(state)
    ):
        return _recover(state, event)
    return _failed(state, info)


def _failed(state: LoopState, info: ErrorInfo) -> Finish:
    if info.type == ErrorKind.TIMEOUT:  # the request ran past request_timeout_ms
        return Finish("error_timeout", error=info, state=state)
    return Finish("error_during_execution", error=info, state=state)


def _on_compacted(state: LoopState, event: Compacted) -> Step:
    answered = state.recovering
    state = replace(state, recovering=None)
    if answered is None or event.ok:
        if answered is not None:  # the overflowed turn is taken again
            state = replace(state, turns=state.turns - 1)
        return _turn(state)
    if isinstance(answered, ModelFailed):  # the failure stands as it was
        return _failed(state, answered.error)
    return _reply(state, answered)


def input_tokens(usage: Usage) -> int:
    """Everything a request read: fresh, cache-written and cache-read input tokens."""
    return usage.total_input_tokens
