# pyright: strict
"""agent-lattice's own metrics, recorded through Temporal's metric meter.

Activities record with ``activity.metric_meter()`` and workflows with
``workflow.metric_meter()`` (which records nothing while a workflow replays), so these land
wherever the process's Temporal runtime sends Core's own metrics (``lattice worker
--metrics-port``: one Prometheus endpoint), with the meter's labels (``namespace``,
``task_queue``, ``activity_type`` or ``workflow_type``) beside the ones given here.

Units are in the names, in Prometheus' base units (``_seconds``, ``_usd``), and none is given
to the meter (a Prometheus endpoint with ``unit_suffix`` would append it again). Durations
are recorded as float seconds, not timedeltas: a timedelta histogram is in milliseconds
unless the runtime says otherwise. Tokens follow the OpenTelemetry GenAI conventions:
``input`` counts every input token a request read, cache reads and writes included (the
``chat`` span's ``gen_ai.usage.input_tokens``, the ``LatticeInputTokens`` search attribute,
``Usage.total_input_tokens``); ``lattice_cache_tokens`` tells how many of them the prompt
cache served or took.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import MetricMeter

from .._messages import Usage

__all__ = [
    "HISTOGRAM_BUCKETS",
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
CACHE_TOKENS = "lattice_cache_tokens"
COST = "lattice_cost_usd"
TOOL_CALLS = "lattice_tool_calls"
TOOL_ERRORS = "lattice_tool_errors"
QUERIES = "lattice_queries"
QUERY_DURATION = "lattice_query_duration_seconds"

# A model reply costs from a hundredth of a cent to dollars; a query lasts from a second to
# hours (a person approving a call, a long tool). Core's default buckets (latencies of 50 ms
# to 10 s) would put every reply's cost in the first bucket and most queries in the last.
COST_BUCKETS = (0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
DURATION_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200)
HISTOGRAM_BUCKETS: dict[str, list[float]] = {
    COST: list(COST_BUCKETS),
    QUERY_DURATION: list(DURATION_BUCKETS),
}
"""The buckets of agent-lattice's histograms, for the runtime's Prometheus endpoint."""


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
    """A model reply's tokens by ``type`` (input, cache reads and writes included; output),
    the part of its input the prompt cache served (``cache_read``) or took
    (``cache_creation``), and its cost in USD when it is known (a model without a price
    records none, rather than zero)."""
    labels = {"agent": agent, "model": model}
    tokens = meter.create_counter(TOKENS, "Tokens of model replies (input: cache included)")
    for kind, count in (("input", usage.total_input_tokens), ("output", usage.output_tokens)):
        if count:
            tokens.add(count, labels | {"type": kind})
    cached = meter.create_counter(CACHE_TOKENS, "Input tokens read from or written to the cache")
    for kind, count in (
        ("cache_read", usage.cache_read_input_tokens),
        ("cache_creation", usage.cache_creation_input_tokens),
    ):
        if count:
            cached.add(count, labels | {"type": kind})
    if cost_usd is not None:
        # a histogram of each reply's cost: its sum is the total spent, its count the replies
        meter.create_histogram_float(COST, "Cost of model replies in USD").record(cost_usd, labels)


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
    meter.create_histogram_float(QUERY_DURATION, "Query latency in seconds").record(
        took.total_seconds(), labels
    )
