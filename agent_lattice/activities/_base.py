"""What every activity shares: the registry it resolves agents in, the transcript store, the
session's tracer, hooks, and heartbeats and quiet ends for long calls."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from .._hooks import ToolResultContext
from .._keys import keys_of
from .._loop import text_of
from .._messages import ModelMessage, ToolResultBlock, ToolUseBlock
from ..history._transcripts import (
    TranscriptMissing,
    TranscriptStore,
    hydrate,
    open_transcript_store,
)
from ..tools._tool import ToolResult
from ..tracing._logs import serving
from ..tracing._tracers import ContextTracer, TraceEvent
from ..workflows._contract import FailureType
from ..workflows._types import ToolCallOutput
from ._drill import drill_probe
from ._tools import DEFAULT_TOOL_THREADS, ToolThreads

if TYPE_CHECKING:
    from .._agent import Agent
    from ._registry import AgentRegistry


T = TypeVar("T")


class ActivitiesBase:
    """The state all activities share, and the steps more than one of them takes."""

    def __init__(
        self,
        registry: AgentRegistry,
        transcripts: TranscriptStore | None = None,
        *,
        tool_threads: int = DEFAULT_TOOL_THREADS,
    ) -> None:
        self._registry = registry
        self._transcript_store = transcripts
        self._opened: tuple[object, TranscriptStore] | None = None  # (codec, its store)
        self._threads = ToolThreads(tool_threads)
        self._drill = drill_probe()  # a durability drill's hooks, when one runs this worker

    @property
    def _transcripts(self) -> TranscriptStore:
        """The store given, else this process's, encrypted with the keys of the worker's
        data converter (its payload codec's, if it has keys)."""
        if self._transcript_store is not None:
            return self._transcript_store
        codec = activity.client().data_converter.payload_codec
        opened = self._opened
        if opened is None or opened[0] is not codec:
            opened = self._opened = (codec, open_transcript_store(keys=keys_of(codec)))
        return opened[1]

    async def _transcript(
        self,
        head: str | None,
        unsent: list[ModelMessage],
        *,
        copies: bool = True,
        encoded: dict[int, str] | None = None,
    ) -> list[ModelMessage]:
        """The whole transcript: the messages up to ``head`` and the unsent ones after them
        (not stored here: the caller stores them with what it adds, in one write).
        ``copies=False``: shared with the store's cache and the input, to be read only.
        ``encoded`` (shared, as with ``copies=False``): filled with the wire JSON the cache
        keeps of the stored messages, by ``id()`` (valid while the returned list holds them)."""
        store = self._transcripts
        try:
            if encoded is not None:
                stored, wire = await store.encoded(head)
                encoded.update(zip(map(id, stored), wire, strict=True))
            else:  # resolved once, then cached
                stored = await store.resolved(head, copies=copies)
            after = [m.model_copy(deep=True) for m in unsent] if copies else unsent
            return [*stored, *await hydrate(after, store)]
        except TranscriptMissing as err:
            raise ApplicationError(
                str(err), type=FailureType.TRANSCRIPT_MISSING, non_retryable=True
            ) from None

    def _tracer(self, agent: Agent, session_id: str, run_id: str | None, seq: int) -> Tracer:
        """The session's trace events go to its query's tracer (``query(tracer=)``, bound in
        this process) when it has one, else to the agent's own."""
        bound = self._registry.tracer_of(session_id)
        tracer = bound[0] if bound is not None else agent.config.tracer
        return Tracer(tracer, agent.name, session_id, run_id, seq)

    def _agent(self, key: str, session_id: str) -> Agent:
        agent = self._registry.get(key, session_id)
        if agent is None:
            raise ApplicationError(
                self._registry.refusal(key, activity.info().task_queue),
                type=FailureType.AGENT_NOT_REGISTERED,
                non_retryable=True,
            )
        info = activity.info()  # the activity's log records name it and its agent
        serving(
            agent.name,
            {
                "workflow_id": info.workflow_id,
                "workflow_run_id": info.workflow_run_id,
                "workflow_type": info.workflow_type,
                "activity_type": info.activity_type,
                "activity_id": info.activity_id,
                "attempt": info.attempt,
                "task_queue": info.task_queue,
            },
        )
        return agent

    async def _settle(
        self, agent: Agent, use: ToolUseBlock, result: ToolResult, tracer: Tracer
    ) -> ToolCallOutput:
        """A tool result on its way to the model: hooks, then the trace event; a large result
        enters workflow history as a reference."""
        block = await hooked(
            agent,
            use,
            ToolResultBlock(tool_use_id=use.id, content=result.content, is_error=result.is_error),
        )
        await tracer.emit(
            "tool_result", **block.model_dump(mode="json", exclude={"type", "content_ref"})
        )
        if not result.end_turn:
            block = await self._transcripts.externalize(block)
        return ToolCallOutput(
            block=block,
            end_turn=result.end_turn,
            structured_result=result.structured_result if result.end_turn else None,
        )


async def hooked(agent: Agent, use: ToolUseBlock, block: ToolResultBlock) -> ToolResultBlock:
    """``block`` after the agent's ``on_tool_result`` hook (unchanged without one)."""
    hooks = agent.config.hooks
    if hooks is None:
        return block
    error = text_of(block.content) if block.is_error else None
    context = ToolResultContext(
        tool_name=use.name, tool_use_id=use.id, input=use.input, result=block, error=error
    )
    return await hook(hooks.tool_result(context))


class Tracer:
    """Emits an agent's trace events with consecutive ``seq`` from the workflow's base."""

    def __init__(
        self,
        tracer: ContextTracer | None,
        source: str,
        session_id: str,
        run_id: str | None,
        seq: int,
    ) -> None:
        self._tracer = tracer
        self._source = source
        self._session_id, self._run_id, self._seq = session_id, run_id or "", seq

    @property
    def enabled(self) -> bool:
        """Whether events go anywhere (build a costly event only then)."""
        return self._tracer is not None

    async def emit(self, kind: str, **data: object) -> None:
        if self._tracer is None:
            return
        event = TraceEvent(
            self._session_id, self._run_id, self._seq, self._source, kind, dict(data)
        )
        self._seq += 1
        try:
            await self._tracer.emit(event)
        except Exception as err:  # only a tracer bound with fail_on_error gets here
            raise ApplicationError(
                f"tracer failed: {type(err).__name__}: {err}",
                type=FailureType.TRACER_ERROR,
                non_retryable=True,
            ) from err


async def hook(call: Awaitable[T]) -> T:
    """Run a hook; its failure stops the query (non-retryable), it never becomes a result."""
    try:
        return await call
    except Exception as err:
        raise ApplicationError(
            f"hook failed: {type(err).__name__}: {err}",
            type=FailureType.HOOK_ERROR,
            non_retryable=True,
        ) from err


@contextlib.asynccontextmanager
async def quiet_when_abandoned() -> AsyncIterator[None]:
    """End a model request or tool call cut off by anything but a cancellation request quietly.

    An interrupt closes its run without waiting for the aborted request, and a stopping
    worker cancels what it runs. Either way the request fails as *retryable* and *benign*:
    a closed run ignores it, a live one retries it on another worker, and nothing is logged
    as a warning. A real cancellation request stays a cancellation.
    """
    try:
        yield
    except asyncio.CancelledError:
        details = activity.cancellation_details()
        if details is None or not details.cancel_requested:
            raise ApplicationError(
                "cut off: its query ended or its worker stopped",
                type=FailureType.ABANDONED,
                category=ApplicationErrorCategory.BENIGN,
            ) from None
        raise


@contextlib.asynccontextmanager
async def heartbeating() -> AsyncIterator[None]:
    """Heartbeat in the background (half the heartbeat timeout) so cancellation gets through."""
    info = activity.info()
    if info.is_local or not info.heartbeat_timeout:
        yield
        return
    interval = max(info.heartbeat_timeout.total_seconds() / 2, 0.05)
    loop = asyncio.get_running_loop()

    def beat() -> None:  # in the activity's context (call_later copies it)
        nonlocal timer
        activity.heartbeat()
        timer = loop.call_later(interval, beat)

    # Starting counts as alive; the first beat is due one interval later. A timer, not a
    # task: most activities end long before it, and a task cost each one a start and a cancel.
    timer = loop.call_later(interval, beat)
    try:
        yield
    finally:
        timer.cancel()
