"""Host code around a tool call, run by the tool activities: its context, the permission
callback, the threads that run sync handlers off the worker's event loop, and the record of
each call's result that answers a retry without running the tool again."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from .._approvals import ApprovalAsk
from .._errors import ConfigurationError
from .._messages import ToolResultBlock
from ..tools._tool import PermissionRequest, ToolContext, ToolResult, run_off_loop
from ..workflows._delegation_types import DelegateCallInput
from ..workflows._failures import WORKER_LOST, did_not_finish, past_timeout
from ..workflows._types import ToolCallInput, ToolCallOutput

if TYPE_CHECKING:
    from .._agent import Agent
    from .._messages import ToolUseBlock
    from ..history._transcripts import TranscriptStore

__all__ = [
    "DEFAULT_TOOL_THREADS",
    "CallRecord",
    "ToolThreads",
    "approval_ask",
    "awaiting_approval",
    "invalid_input",
    "permission_verdict",
]

T = TypeVar("T")

# sync tool handlers (and permission callbacks) a worker runs at once; more wait for a thread
DEFAULT_TOOL_THREADS = 32


class ToolThreads:
    """The threads of one worker's sync tool handlers, started on first use."""

    def __init__(self, size: int = DEFAULT_TOOL_THREADS) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigurationError(f"tool_threads must be a positive integer; got {size!r}")
        self.size = size
        self._pool: ThreadPoolExecutor | None = None

    @property
    def executor(self) -> Executor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.size, thread_name_prefix="lattice-tool")
        return self._pool


def tool_context(agent: Agent, input: ToolCallInput | DelegateCallInput) -> ToolContext:
    use, info = input.tool_use, activity.info()
    return ToolContext(
        session_id=input.session_id,
        tool_use_id=use.id,
        tool_name=use.name,
        agent_name=agent.config.name,
        context=input.context,
        run_id=input.run_id,
        workspace_grants=tuple(input.workspace_grants),
        workflow_id=info.workflow_id,
        attempt=info.attempt,
    )


def invalid_input(use: ToolUseBlock) -> ToolResult | None:
    """The model's input was no JSON object: the call is answered at once, never run."""
    if use.input_error is None:
        return None
    return ToolResult(
        content=f"Invalid input for tool {use.name!r}: {use.input_error}", is_error=True
    )


def awaiting_approval(use: ToolUseBlock, ask: ApprovalAsk) -> ToolCallOutput:
    """A call that did not run: its run waits for a person's decision (``block`` is only a
    placeholder; the workflow answers the call once it is decided)."""
    placeholder = ToolResultBlock(tool_use_id=use.id, content="awaiting approval", is_error=True)
    return ToolCallOutput(block=placeholder, approval=ask)


def approval_ask(agent: Agent, tool_name: str, message: str | None = None) -> ApprovalAsk:
    """A call that waits for a person: who may decide is the tool's ``approvers``, else the
    agent's (None: anyone), as this worker's code says when the call asks."""
    definition = agent.tool(tool_name)
    approvers = definition.approvers if definition is not None else None
    if approvers is None:
        approvers = agent.config.approvers
    return ApprovalAsk(message=message, approvers=list(approvers) if approvers else None)


async def permission_verdict(
    agent: Agent, tool_name: str, tool_input: object, ctx: ToolContext, executor: Executor
) -> ToolResult | ApprovalAsk | None:
    """The host's permission callback on a call: None (allow), a denial as an error result
    for the model, or an :class:`ApprovalAsk` (the call waits for a person's decision). A
    sync callback runs in a tool thread (it may block)."""
    permission = agent.config.permission
    if permission is None:
        return None
    decision = await run_off_loop(
        permission,
        PermissionRequest(
            tool_name=tool_name,
            input=tool_input,
            tool_use_id=ctx.tool_use_id,
            session_id=ctx.session_id,
            context=ctx.context,
        ),
        executor=executor,
    )

    def field(name: str) -> Any:
        if isinstance(decision, dict):
            return decision.get(name)  # pyright: ignore[reportUnknownMemberType]
        return getattr(decision, name, None)

    behavior = field("behavior")
    if behavior == "allow":
        return None
    if behavior == "ask":
        return approval_ask(agent, tool_name, field("message"))
    message = field("message") or (f"Permission to use {tool_name!r} was denied.")
    return ToolResult(content=message, is_error=True)


class CallRecord:
    """A tool call's result kept in the transcript store under its idempotency key, written as
    soon as the handler returns (before the ``on_tool_result`` hook and the trace event).

    The record's key adds the workflow run and the activity's id in it to the call's
    idempotency key: a provider that numbers its tool_use ids (``functions.name:0``) repeats
    one after a compaction, and a workflow id comes back once the server has forgotten its
    run (retention, a new dev server) while the store remembers. Both stay the same for every
    attempt of one call, and for a local activity replayed after a crash (its id is its
    sequence number; its 1 s retry is well under the minute after which Temporal would give
    it a new one).

    A worker can die, or lose the server past the heartbeat timeout, after the handler ran
    and before Temporal recorded the call's completion; the call's second attempt then finds
    the result here and answers with it. A local activity (a ``cheap`` tool) has no attempt
    of its own in the history: a crash before its workflow task completed runs it again from
    attempt 1, so every cheap call looks here first, and a cheap tool that is not idempotent
    also marks its start, so that a run found started but unfinished is not run again.
    """

    def __init__(self, store: TranscriptStore, ctx: ToolContext, *, idempotent: bool) -> None:
        self._store, self._ctx, self._idempotent = store, ctx, idempotent
        info = activity.info()
        self._info = info
        self._key = f"{ctx.idempotency_key}@{info.workflow_run_id}/{info.activity_id}"
        self._marks_start = info.is_local and not idempotent

    async def answer(self) -> ToolResult | None:
        """The call's answer without running its tool (None: run it)."""
        info = self._info
        if not (info.is_local or info.attempt > 1):
            return None
        started, recorded = await self._store.tool_call(self._key)
        if recorded is not None:
            return ToolResult.model_validate_json(recorded)
        if self._idempotent or not (info.attempt > 1 or started):
            return None
        why = WORKER_LOST if info.attempt == 1 else _first_attempt_cut_off(info)
        return ToolResult(content=did_not_finish(self._ctx.tool_name, why), is_error=True)

    async def run(self, call: Callable[[], Awaitable[ToolResult]]) -> ToolResult:
        """``call``'s result, recorded. A tool that is not idempotent never gets another
        attempt that could run it: a failure around its handler (the permission callback, the
        record) is final, and the workflow tells the model the call did not finish."""
        key = self._key

        async def recorded() -> ToolResult:
            if self._marks_start:
                await self._store.tool_call_started(key)
            result = await call()
            # ensure_ascii=False: text the transcript could not keep fails here, not later;
            # structured_result only where it is used (with end_turn): the call ran, and a
            # value JSON cannot hold that nothing reads must not fail it
            kept = None if result.end_turn else {"structured_result"}
            data = json.dumps(result.model_dump(mode="json", exclude=kept), ensure_ascii=False)
            await self._store.tool_call_finished(key, data)
            return result

        return await self.guard(recorded)

    async def guard(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``; a failure of a tool that is not idempotent is final (no attempt that
        could run the tool follows)."""
        try:
            return await call()
        except ApplicationError:
            raise
        except Exception as err:
            if self._idempotent:
                raise
            raise ApplicationError(str(err), type=type(err).__name__, non_retryable=True) from err


def _first_attempt_cut_off(info: activity.Info) -> str:
    """Why the first attempt ended, as well as its retry can tell: Temporal hands an attempt
    no failure of the one before. The first attempt took the time from the call's scheduling
    to this attempt's (a local activity's retry has only its start), less the retry's wait;
    about the timeout means the timeout cut it, less means its worker was lost (a heartbeat
    timeout, or a worker that stopped)."""
    timeout = info.start_to_close_timeout
    if timeout is None:
        return WORKER_LOST
    now = info.started_time if info.is_local else info.current_attempt_scheduled_time
    took = now - info.scheduled_time
    if info.retry_policy is not None:
        took -= info.retry_policy.initial_interval
    seconds = timeout.total_seconds()
    # 5 % off for clocks: a timeout fires at its deadline or after
    return past_timeout(seconds) if took.total_seconds() >= 0.95 * seconds else WORKER_LOST
