# pyright: strict
"""The ``invoke_agent <agent>`` span of a query (OpenTelemetry GenAI conventions): made in
workflow code around the run, so the run's activity spans (``chat <model>``,
``execute_tool <tool>``) and child runs are beneath it.

Only where the process traces workflows (``otel=True``: its tracer provider is temporalio's
``ReplaySafeTracerProvider``): that provider gives workflow spans ids from the run's
deterministic random, re-makes a span with the same id when a run is replayed (a worker that
evicted it from its cache) and ends it only once, when it is not replaying. Elsewhere there is
no span: a host's own provider is not replay-safe. A span records nothing in the history.

A query continued as new has one such span, its first run's: the next runs carry its context
(their ``RunWorkflow`` spans are beneath it), so a query is one ``invoke_agent`` span whatever
the number of its runs; the span's length is the first run's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import Any

from .._messages import ResultMessage
from ._types import AgentRunInput

try:
    from opentelemetry import trace
    from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider
except ImportError:  # without the `otel` extra: no workflow spans
    trace = None  # type: ignore[assignment]
    ReplaySafeTracerProvider = None  # type: ignore[assignment,misc]

__all__ = ["agent_span", "end_agent_span"]

SCOPE = "agent_lattice"


@contextlib.contextmanager
def agent_span(input: AgentRunInput) -> Generator[Any]:
    """The query's ``invoke_agent`` span, current while the run runs; None when the process
    does not trace workflows, or in a run continued from another (its first run has it)."""
    agent = input.agent
    if (
        input.continuation is not None
        or trace is None
        or ReplaySafeTracerProvider is None
        or not isinstance(trace.get_tracer_provider(), ReplaySafeTracerProvider)
    ):
        yield None
        return
    with trace.get_tracer(SCOPE).start_as_current_span(
        f"invoke_agent {agent.name}",
        kind=trace.SpanKind.INTERNAL,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent.name,
            "gen_ai.request.model": agent.model,
            "gen_ai.conversation.id": input.session_id,
        },
    ) as span:
        yield span


def end_agent_span(span: Any, result: ResultMessage) -> None:
    """What the query came to: its usage (the result's: every input token, cache reads and
    writes included, children's too), cost, turns and outcome (an error result fails it)."""
    if span is None or trace is None:
        return
    usage = result.usage
    attributes: dict[str, Any] = {
        "gen_ai.usage.input_tokens": usage.total_input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
        "lattice.result.subtype": result.subtype,
        "lattice.turns": result.num_turns,
    }
    if result.stop_reason:
        attributes["gen_ai.response.finish_reasons"] = [result.stop_reason]
    if result.total_cost_usd is not None:
        attributes["lattice.cost_usd"] = result.total_cost_usd
    span.set_attributes(attributes)
    if result.is_error:
        span.set_status(trace.StatusCode.ERROR, result.subtype)
        span.set_attribute("error.type", result.subtype)
