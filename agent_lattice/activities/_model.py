"""Model activities: a model request, and the summary that compacts a transcript."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from .._hooks import ModelRequestContext
from .._loop import alternating
from .._messages import ModelMessage, Usage
from .._pricing import request_cost
from ..history._compaction import compacted_history, cut_point, summary_request
from ..live._channel import StreamSender
from ..live._feeds import live_feeds, live_key
from ..providers import ModelRequest, ProviderError
from ..tools._batches import (
    CONCURRENCY_HINT,
    BatchPolicyRequest,
    ToolCallInfo,
    evaluate_batch_policy,
)
from ..tools._skills import skills_prompt
from ..workflows._contract import ActivityName, FailureType
from ..workflows._types import CompactInput, CompactOutput, ModelCallInput, ModelCallOutput
from ..workspace._tools import workspace_prompt
from ._base import ActivitiesBase, heartbeating, hook, quiet_when_abandoned
from ._telemetry import StreamedUsage, model_span

if TYPE_CHECKING:
    from .._agent import Agent

OnEvent = Callable[[dict[str, Any]], Awaitable[None]]


class ModelActivities(ActivitiesBase):
    """The activities that call the agent's model."""

    @activity.defn(name=ActivityName.MODEL_REQUEST)
    async def model_request(self, input: ModelCallInput) -> ModelCallOutput:
        agent = self._agent(input.agent_key, input.session_id)
        config = agent.config
        tracer = self._tracer(agent, input.session_id, input.run_id, input.trace_seq)
        # user code (a hook, a tracer, a model client of its own) gets copies of the messages
        shared = (
            config.hooks is None
            and not tracer.enabled
            and getattr(agent.model_client, "reads_messages_only", False) is True
        )
        encoded: dict[int, str] = {}  # a message's wire JSON by id(), where the cache has it
        transcript = await self._transcript(
            input.head,
            input.unsent,
            copies=not shared,
            encoded=encoded if shared and input.stream else None,
        )
        shaped = ModelRequestContext(
            messages=transcript,
            system_prompt=_system_prompt(agent),
            turn=input.turn,
        )
        if config.hooks is not None:
            shaped = await hook(config.hooks.model_request(shaped))
        if tracer.enabled:  # the whole transcript, serialized: only for a tracer
            await tracer.emit(
                "model_request",
                turn=input.turn,
                model=config.model,
                system=shaped.system_prompt,
                messages=[m.to_wire() for m in shaped.messages],
            )
        messages = alternating(shaped.messages)
        request = ModelRequest(
            model=config.model,
            messages=messages,
            # the transcript cache's own messages keep their encoding (merged ones are new)
            wire_messages=[encoded.get(id(m)) or m.wire_json() for m in messages]
            if encoded
            else None,
            system=shaped.system_prompt,
            tools=[t.spec() for t in config.tools],
            max_tokens=config.max_tokens,
            stream=input.stream,
            thinking=_thinking(input.request.thinking, config.max_tokens),
            reasoning_effort=input.request.reasoning_effort,
            output_format=_output_format(input.request.output_format),
            timeout_ms=input.request.timeout_ms,
        )
        span = model_span(agent.name, input.session_id, request, input.turn)
        streamed = StreamedUsage()
        async with heartbeating(), quiet_when_abandoned(), _live_events(input) as on_event:
            with span as reply:
                sink = streamed.watching(on_event) if input.stream else on_event
                if sink is not None:
                    sink = self._drill.watching(sink)
                self._drill.model_request(input.turn)
                try:
                    message = await _call_model(agent, request, sink, input)
                except asyncio.CancelledError:  # cut off: what it streamed is paid for
                    cut = streamed.usage
                    cost = request_cost(cut, None, config.model, config.pricing)
                    reply.cut_off(cut, cost)
                    if cut is None or not _cancel_requested():
                        raise
                    # the workflow asked (an interrupt, a cancel request) and waits for the
                    # outcome: it gets the paid-for usage, the transcript keeps nothing
                    return _cut_off(input, cut, cost, config.model)
                cost = _cost(agent, message)
                reply.reply(message, cost)
        if tracer.enabled:
            await tracer.emit(
                "assistant_message",
                turn=input.turn,
                message=message.to_wire(),
                stop_reason=message.stop_reason,
                usage=message.usage.model_dump() if message.usage else None,
                cost_usd=cost,
                provider_response_id=message.provider_response_id,
                model=message.model,
            )
        rejection = None
        if message.tool_uses and config.tool_batch_policy is not None:
            calls = [
                ToolCallInfo(id=u.id, name=u.name, input=u.input, kind=_call_kind(agent, u.name))
                for u in message.tool_uses
            ]
            rejection = await evaluate_batch_policy(
                config.tool_batch_policy, BatchPolicyRequest(calls)
            )
        # the request's unsent messages and the reply in one write (none before the call: a
        # failed request stores nothing, and its retry has the same input)
        heads = await self._transcripts.append_each(input.head, [*input.unsent, message])
        return ModelCallOutput(
            request_head=heads[-2] if len(heads) > 1 else input.head,
            head=heads[-1],
            message=message,
            concurrency_safe=_concurrency_safe(agent, message),
            batch_rejection=rejection,
            cost_usd=cost,
        )

    @activity.defn(name=ActivityName.COMPACT)
    async def compact(self, input: CompactInput) -> CompactOutput:
        """Summarize the older part of the transcript; the new transcript's head (a durable
        step: the workflow records the outcome, so a crash never compacts twice)."""
        agent = self._agent(input.agent_key, input.session_id)
        config = agent.config
        transcript = await self._transcript(input.head, input.unsent)
        cut = cut_point(transcript, input.keep_recent_messages)
        if cut is None:
            return CompactOutput()
        request = ModelRequest(
            model=config.model,
            messages=summary_request(transcript[:cut], input.prompt),
            system=config.system_prompt,
            # the summarized turns may hold tool calls: the provider wants their definitions
            tools=[t.spec() for t in config.tools],
            max_tokens=config.max_tokens,
            stream=False,
            timeout_ms=input.timeout_ms,
        )
        async with heartbeating(), quiet_when_abandoned():
            message = await _call_model(agent, request, None)
        if not message.text.strip():
            raise ApplicationError(
                "compaction produced no summary",
                type=FailureType.COMPACTION_FAILED,
                non_retryable=True,
            )
        compacted = compacted_history(transcript, cut, message.text)
        return CompactOutput(
            head=await self._transcripts.append(None, compacted),
            compacted_messages=cut,
            usage=message.usage,
            cost_usd=_cost(agent, message),
        )


def _cost(agent: Agent, message: ModelMessage) -> float | None:
    config = agent.config
    return request_cost(message.usage, message.model, config.model, config.pricing)


@contextlib.asynccontextmanager
async def _live_events(input: ModelCallInput) -> AsyncIterator[OnEvent | None]:
    """Where a streamed request's events go: to the query's caller over the side channel,
    and to this process's live feed for whoever attaches to the run (``live/_feeds``)."""
    feeds = live_feeds()
    info = activity.info()
    if not input.stream:
        yield None
        return
    async with contextlib.AsyncExitStack() as stack:
        sender = None
        if input.stream_to and input.stream_channel:
            sender = await stack.enter_async_context(
                StreamSender(
                    input.stream_to,
                    input.stream_channel,
                    turn=input.turn,
                    attempt=info.attempt,
                    after=input.after,
                )
            )
        feed = None
        if feeds is not None and feeds.serving and info.workflow_run_id:
            key = live_key(info.workflow_run_id, info.activity_id)
            feed = stack.enter_context(
                feeds.feed(key, turn=input.turn, attempt=info.attempt, after=input.after)
            )
        if feed is None:
            yield sender.send if sender is not None else None
            return

        async def send(event: dict[str, Any]) -> None:
            feed.publish(event)
            if sender is not None:
                await sender.send(event)

        yield send


def _thinking(thinking: dict[str, object] | None, max_tokens: int) -> dict[str, object] | None:
    """A fixed budget is capped at ``max_tokens - 1`` (the API requires budget < max_tokens)."""
    if thinking and thinking.get("type") == "enabled":
        budget = int(thinking.get("budget_tokens", 1))  # type: ignore[call-overload]
        return {**thinking, "budget_tokens": min(budget, max_tokens - 1)}
    return thinking


def _output_format(fmt: object) -> dict[str, object] | None:
    """``"json"`` asks for any JSON object; a json_schema format is sent as given."""
    if fmt is None:
        return None
    if fmt == "json":
        return {"type": "json_schema", "schema": {"type": "object"}}
    return dict(fmt)  # type: ignore[call-overload]


def _cancel_requested() -> bool:
    """Whether the running activity was cancelled because its workflow asked (rather than
    its worker stopping, its heartbeat timing out, or its run being gone)."""
    details = activity.cancellation_details()
    return details is not None and details.cancel_requested


def _cut_off(
    input: ModelCallInput, usage: Usage, cost: float | None, model: str
) -> ModelCallOutput:
    """The outcome of a request its workflow cancelled mid-stream: an empty reply carrying
    what the provider reported so far, marked ``cut_off``. The cancel is swallowed (the
    task is told it is no longer being cancelled) so the activity completes with it."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
    return ModelCallOutput(
        message=ModelMessage(role="assistant", content=[], model=model, usage=usage),
        request_head=input.head,
        head=input.head,
        cost_usd=cost,
        cut_off=True,
    )


def _system_prompt(agent: Agent) -> str | None:
    """The agent's system prompt with its skills, told to batch independent calls when they
    can overlap. Built per request: none of it enters the stored conversation."""
    config = agent.config
    base = config.system_prompt
    if agent.workspace is not None:
        section = workspace_prompt(agent.workspace)
        base = f"{base}\n\n{section}" if base else section
    if config.skills:
        section = skills_prompt(config.skills, config.skills_mode)
        base = f"{base}\n\n{section}" if base else section
    mode = config.tool_concurrency.mode
    overlapping = mode == "all" or (
        mode == "safe" and any(t.is_concurrency_safe is not None for t in config.tools)
    )
    if not (overlapping and config.tools):
        return base
    return f"{base}\n\n{CONCURRENCY_HINT}" if base else CONCURRENCY_HINT


def _concurrency_safe(agent: Agent, message: ModelMessage) -> list[str]:
    """Ids of the tool calls that may run beside others: all of them in mode "all", none in
    "sequential", and in "safe" those whose tool says so for this input (host code,
    evaluated here so the workflow can plan the batch without another round trip)."""
    mode = agent.config.tool_concurrency.mode
    if mode != "safe":
        return [u.id for u in message.tool_uses] if mode == "all" else []
    safe = []
    for use in message.tool_uses:
        definition = agent.tool(use.name)
        if definition is None or definition.is_concurrency_safe is None:
            continue
        try:
            if definition.is_concurrency_safe(definition.parse_input(use.input)):
                safe.append(use.id)
        except Exception:  # invalid input or a failing predicate: run it alone
            continue
    return safe


async def _call_model(
    agent: Agent,
    request: ModelRequest,
    on_event: object,
    input: ModelCallInput | None = None,
) -> ModelMessage:
    warm_up = getattr(agent.model_client, "warm_up", None)
    if callable(warm_up) and not getattr(agent.model_client, "warmed", False):
        await asyncio.to_thread(warm_up)  # a thread hop per request only until it is warm
    try:
        call = agent.model_client.create(request, on_event=on_event)  # type: ignore[arg-type]
        if request.timeout_ms is None:
            return await call
        # Raced here too, so a client that ignores timeout_ms cannot stall the loop.
        return await asyncio.wait_for(call, request.timeout_ms / 1000)
    except TimeoutError:
        raise ApplicationError(
            f"model request exceeded request_timeout_ms ({request.timeout_ms} ms)",
            type=FailureType.REQUEST_TIMEOUT,
            non_retryable=True,
            category=ApplicationErrorCategory.BENIGN,  # the configured outcome, not a fault
        ) from None
    except ProviderError as err:
        if err.error_type == "connection" and input and input.unreachable_give_up_s is not None:
            raise _unreachable(err, input.unreachable_give_up_s, input.retry_initial_s) from None
        if err.error_type == "timeout" and request.timeout_ms is not None:
            raise ApplicationError(
                f"model request exceeded request_timeout_ms ({request.timeout_ms} ms)",
                type=FailureType.REQUEST_TIMEOUT,
                non_retryable=True,
                category=ApplicationErrorCategory.BENIGN,
            ) from None
        raise ApplicationError(
            err.message,
            {"status_code": err.status_code, "error_type": err.error_type},
            type=FailureType.PROVIDER_ERROR if err.retryable else FailureType.PROVIDER_REJECTED,
            non_retryable=not err.retryable,
            next_retry_delay=timedelta(seconds=err.retry_after)
            if err.retry_after is not None
            else None,
        ) from None


def _unreachable(err: ProviderError, give_up_s: float, initial_s: float) -> ApplicationError:
    """The provider cannot be reached at all (a wrong base_url, a server that is down): retried
    with short waits for ``give_up_s`` from the first attempt, then final, naming the URL
    (the message does) rather than waiting out every attempt of a 5xx."""
    info = activity.info()
    waited = (datetime.now(UTC) - info.scheduled_time).total_seconds()
    left = give_up_s - waited
    if left <= 0:
        return ApplicationError(
            f"{err.message} (gave up after {info.attempt} attempt"
            f"{'s' if info.attempt != 1 else ''} in {waited:.0f} s; "
            "see ActivitySettings.model_unreachable_give_up_s)",
            {"status_code": None, "error_type": "connection"},
            type=FailureType.PROVIDER_UNREACHABLE,
            non_retryable=True,
        )
    return ApplicationError(
        err.message,
        {"status_code": None, "error_type": "connection"},
        type=FailureType.PROVIDER_ERROR,
        # the retry policy's backoff, cut to end at the budget
        next_retry_delay=timedelta(seconds=min(initial_s * 2.0 ** (info.attempt - 1), left)),
    )


def _call_kind(agent: Agent, tool_name: str) -> str:
    """What a batch policy sees as a call's ``kind``: ``"agent_tool"`` for a call that
    delegates (agent_tool, delegate_tool, a team's member tool), else ``"tool"``."""
    definition = agent.tool(tool_name)
    return "agent_tool" if definition is not None and definition.delegation is not None else "tool"
