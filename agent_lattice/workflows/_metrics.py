"""agent-lattice's own metrics, recorded through Temporal's metric meter.

Activities record with ``activity.metric_meter()`` and workflows with
``workflow.metric_meter()`` (which records nothing while a workflow replays), so these land
wherever the process's Temporal runtime sends Core's own metrics (``lattice worker
--metrics-port``: one Prometheus endpoint), with the meter's labels (``namespace``,
``task_queue``, ``activity_type`` or ``workflow_type``) beside the ones given here.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import MetricMeter

from .._messages import Usage

__all__ = [
    "record_model_error",
    "record_model_request",
    "record_model_usage",
    "record_query_outcome",
    "record_tool_call",
]

MODEL_REQUESTS = "lattice_model_requests"
MODEL_RETRIES = "lattice_model_request_retries"
MODEL_ERRORS = "lattice_model_request_errors"
TOKENS = "lattice_tokens"
COST = "lattice_cost_usd"
TOOL_CALLS = "lattice_tool_calls"
TOOL_ERRORS = "lattice_tool_errors"
QUERIES = "lattice_queries"
QUERY_DURATION = "lattice_query_duration"


def record_model_request(meter: MetricMeter, agent: str, model: str, attempt: int) -> None:
    """A model request starts: every attempt counts, and one after the first is a retry."""
    labels = {"agent": agent, "model": model}
    meter.create_counter(MODEL_REQUESTS, "Model request attempts").add(1, labels)
    if attempt > 1:
        meter.create_counter(MODEL_RETRIES, "Model request attempts after the first").add(1, labels)


def record_model_error(meter: MetricMeter, agent: str, model: str, failure: str) -> None:
    """A model request attempt failed, by failure type (``ProviderError``, ``RequestTimeout``)."""
    meter.create_counter(MODEL_ERRORS, "Model request attempts that failed").add(
        1, {"agent": agent, "model": model, "error": failure}
    )


def record_model_usage(
    meter: MetricMeter, agent: str, model: str, usage: Usage, cost_usd: float | None = None
) -> None:
    """A model reply's tokens by ``type`` (input, output, cache_read, cache_creation), and its
    cost in USD when it is known (a model without a price records none, rather than zero)."""
    tokens = meter.create_counter(TOKENS, "Tokens of model replies", "tokens")
    for kind, count in (
        ("input", usage.input_tokens),
        ("output", usage.output_tokens),
        ("cache_read", usage.cache_read_input_tokens),
        ("cache_creation", usage.cache_creation_input_tokens),
    ):
        if count:
            tokens.add(count, {"agent": agent, "model": model, "type": kind})
    if cost_usd is not None:
        # a histogram of each reply's cost: its sum is the total spent, its count the replies
        meter.create_histogram_float(COST, "Cost of model replies", "USD").record(
            cost_usd, {"agent": agent, "model": model}
        )


def record_tool_call(meter: MetricMeter, agent: str, tool: str, is_error: bool) -> None:
    """A tool call's result: every call counts, an ``is_error`` result is an error too."""
    labels = {"agent": agent, "tool": tool}
    meter.create_counter(TOOL_CALLS, "Tool calls").add(1, labels)
    if is_error:
        meter.create_counter(TOOL_ERRORS, "Tool calls whose result is an error").add(1, labels)


def record_query_outcome(
    meter: MetricMeter, agent: str, model: str, subtype: str, took: timedelta
) -> None:
    """A query ended with result ``subtype`` after ``took`` (across continue-as-new)."""
    labels = {"agent": agent, "model": model, "subtype": subtype}
    meter.create_counter(QUERIES, "Queries by result subtype").add(1, labels)
    meter.create_histogram_timedelta(QUERY_DURATION, "Query latency", "ms").record(took, labels)
