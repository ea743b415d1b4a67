"""The spans and metrics of model requests and tool calls, recorded where they run.

Spans follow the OpenTelemetry GenAI semantic conventions (``chat <model>``, ``execute_tool
<tool>``). They are made through the OpenTelemetry API, which records nothing until a tracer
provider is set (``otel=True`` sets one): without tracing they cost a no-op span. Inside an
activity the tracing interceptor has made the activity's span current, so these are its
children, in the query's trace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from .._messages import ModelMessage, Usage
from ..providers import ModelRequest
from ..tools._tool import ToolResult
from ..workflows._metrics import (
    record_model_error,
    record_model_request,
    record_model_usage,
    record_tool_call,
)

try:
    from opentelemetry import trace
except ImportError:  # the API comes with the anthropic SDK; without it, no spans
    trace = None  # type: ignore[assignment]

__all__ = ["ModelSpan", "StreamedUsage", "ToolSpan", "model_span", "tool_span"]

SCOPE = "agent_lattice"
GEN_AI_SYSTEM = "anthropic"


def _span(
    name: str, kind: str, attributes: dict[str, Any]
) -> contextlib.AbstractContextManager[Any]:
    """A current span of this process's tracer provider; None without the OpenTelemetry API."""
    if trace is None:
        return contextlib.nullcontext(None)
    return trace.get_tracer(SCOPE).start_as_current_span(
        name, kind=trace.SpanKind[kind], attributes=attributes
    )


class ModelSpan:
    """What a model request reports when its reply arrives."""

    def __init__(self, span: Any, agent: str, model: str) -> None:
        self._span, self._agent, self._model = span, agent, model

    def reply(self, message: ModelMessage, cost_usd: float | None = None) -> None:
        usage = message.usage
        if usage is not None:  # a cost of None (an unpriced model) records no cost
            record_model_usage(activity.metric_meter(), self._agent, self._model, usage, cost_usd)
        if self._span is None:
            return
        attributes: dict[str, Any] = {
            "gen_ai.response.model": message.model or self._model,
            "gen_ai.response.finish_reasons": [message.stop_reason or ""],
        }
        if message.provider_response_id:
            attributes["gen_ai.response.id"] = message.provider_response_id
        if usage is not None:
            attributes |= {
                # the conventions count cache reads and writes in the input tokens
                "gen_ai.usage.input_tokens": usage.total_input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
                "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
            }
        self._span.set_attributes(attributes)

    def cut_off(self, usage: Usage | None, cost_usd: float | None) -> None:
        """The request was cut off mid-stream: the tokens the provider reported so far count
        (in the metrics and on the span, marked ``lattice.cut_off``)."""
        if usage is None:
            return
        record_model_usage(activity.metric_meter(), self._agent, self._model, usage, cost_usd)
        if self._span is None:
            return
        self._span.set_attributes(
            {
                "gen_ai.usage.input_tokens": usage.total_input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
                "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
                "lattice.cut_off": True,
            }
        )


class StreamedUsage:
    """The usage a streamed reply reported so far: ``message_start``'s (the input tokens,
    cache reads and writes), then each ``message_delta``'s (cumulative output tokens). A
    request cut off mid-stream (an interrupt, a stopping worker) is paid for that far."""

    def __init__(self) -> None:
        self._usage: dict[str, Any] | None = None

    def watching(self, sink: Any) -> Any:
        """An event sink that notes usage, then hands each event on to ``sink`` (if any)."""

        async def watch(event: dict[str, Any]) -> None:
            kind = event.get("type")
            if kind == "message_start":
                self._usage = dict(event.get("message", {}).get("usage") or {})
            elif kind == "message_delta" and self._usage is not None:
                self._usage.update(event.get("usage") or {})
            if sink is not None:
                await sink(event)

        return watch

    @property
    def usage(self) -> Usage | None:
        return Usage.model_validate(self._usage) if self._usage is not None else None


@contextlib.contextmanager
def model_span(
    agent: str, session_id: str, request: ModelRequest, turn: int
) -> Iterator[ModelSpan]:
    """The span of one model request attempt (``chat <model>``) and its metrics: requests,
    retries and failures by agent and model, the reply's tokens."""
    attempt = activity.info().attempt
    meter = activity.metric_meter()
    record_model_request(meter, agent, request.model, attempt)
    try:
        with _span(
            f"chat {request.model}",
            "CLIENT",
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.system": GEN_AI_SYSTEM,
                "gen_ai.provider.name": GEN_AI_SYSTEM,
                "gen_ai.request.model": request.model,
                "gen_ai.request.max_tokens": request.max_tokens,
                "gen_ai.agent.name": agent,
                "gen_ai.conversation.id": session_id,
                "lattice.turn": turn,
                "lattice.attempt": attempt,
            },
        ) as span:
            yield ModelSpan(span, agent, request.model)
    except ApplicationError as err:
        record_model_error(meter, agent, request.model, err.type or "ApplicationError")
        raise
    except Exception as err:
        record_model_error(meter, agent, request.model, type(err).__name__)
        raise


class ToolSpan:
    """What a tool call reports when its result is known."""

    def __init__(self, span: Any, agent: str, tool: str) -> None:
        self._span, self._agent, self._tool = span, agent, tool
        self.reported = False

    def result(self, result: ToolResult) -> None:
        self.reported = True
        record_tool_call(activity.metric_meter(), self._agent, self._tool, result.is_error)
        if result.is_error and self._span is not None and trace is not None:
            self._span.set_status(trace.StatusCode.ERROR, "the tool's result is an error")
            self._span.set_attribute("error.type", "tool_error")


@contextlib.contextmanager
def tool_span(agent: str, tool: str, tool_use_id: str) -> Iterator[ToolSpan]:
    """The span of one tool call (``execute_tool <tool>``) and its metrics: calls and error
    results by tool (a call cut off or failing outside its handler is an error)."""
    with _span(
        f"execute_tool {tool}",
        "INTERNAL",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": tool_use_id,
            "gen_ai.agent.name": agent,
        },
    ) as span:
        reporter = ToolSpan(span, agent, tool)
        try:
            yield reporter
        finally:
            if not reporter.reported:
                record_tool_call(activity.metric_meter(), agent, tool, is_error=True)
