"""What a process reports about its runs: the Temporal Core runtime (with its Prometheus
endpoint) and OpenTelemetry tracing (one tracer provider, one interceptor, OTLP export)."""

from __future__ import annotations

import ctypes
from typing import Any

from temporalio.runtime import LoggingConfig, PrometheusConfig, TelemetryConfig, TelemetryFilter
from temporalio.runtime import Runtime as TemporalRuntime

from .. import _settings
from .._errors import ConfigurationError
from ..workflows._metrics import HISTOGRAM_BUCKETS

__all__ = ["flush_tracing", "temporal_runtime", "tracing_interceptor"]

_TEMPORAL_RUNTIME: TemporalRuntime | None = None
_METRICS_PORT: int | None = None


def temporal_runtime(metrics_port: int | None = None) -> TemporalRuntime:
    """One Temporal Core runtime per process that prints only Core's errors, and serves
    Prometheus metrics on ``metrics_port`` (default ``LATTICE_METRICS_PORT``) when set: Core's
    own (polls, task latencies, slots) and agent-lattice's, recorded through the same meter.

    Durations are in seconds, named so (Core's ``temporal_request_latency_seconds``, ...:
    ``durations_as_seconds`` with ``unit_suffix``, which suffixes histograms only, and only
    Core's, whose units are set; agent-lattice's give no unit and carry theirs in the name).
    agent-lattice's histograms get buckets that fit them (``HISTOGRAM_BUCKETS``), and every
    series the process's service name (``service_name``: ``OTEL_SERVICE_NAME``, as its spans)
    rather than Core's ``temporal-core-sdk``.

    Core's warnings at this level are expected here (an interrupt closes its run before the
    aborted request completes: "activity not found on completion"). Core's logs are not
    forwarded to Python logging: forwarding calls into Python from Core's threads, which can
    abort the interpreter while it finalizes at the end of a script. Nor are its retries of
    an unreachable server: a worker's polls retried for long print an error line (on stdout)
    every 10 s, where the runtime's ServerWatch says it once on stderr.
    """
    global _TEMPORAL_RUNTIME, _METRICS_PORT
    if _TEMPORAL_RUNTIME is not None:
        if metrics_port is not None and metrics_port != _METRICS_PORT:
            raise ConfigurationError(
                f"metrics_port={metrics_port}: this process's Temporal runtime was made "
                + (f"with metrics on port {_METRICS_PORT}" if _METRICS_PORT else "without metrics")
                + "; give the port to the first Runtime.connect() (or LATTICE_METRICS_PORT)"
            )
        return _TEMPORAL_RUNTIME
    port = metrics_port if metrics_port is not None else _settings.metrics_port()
    errors = TelemetryFilter(core_level="ERROR", other_level="ERROR").formatted()
    _TEMPORAL_RUNTIME = TemporalRuntime(
        telemetry=TelemetryConfig(
            logging=LoggingConfig(filter=f"{errors},temporalio_client::retry=off"),
            metrics=PrometheusConfig(
                bind_address=f"0.0.0.0:{port}",
                durations_as_seconds=True,
                unit_suffix=True,
                histogram_bucket_overrides=HISTOGRAM_BUCKETS,
            )
            if port
            else None,
            attach_service_name=False,
            global_tags={"service_name": _settings.service_name()},
        )
    )
    _METRICS_PORT = port
    # Never freed: Core may finish abandoned work (an RPC, a worker shutdown) after a
    # script ends, blocking its thread on the GIL; freeing the runtime while Python
    # finalizes waits for that thread forever (temporalio/sdk-python#300).
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(_TEMPORAL_RUNTIME))
    return _TEMPORAL_RUNTIME


_INTERCEPTOR: Any = None
OTEL_EXTRA = "pip install 'agent-lattice[otel]'"


def tracing_interceptor() -> Any:
    """The process's OpenTelemetry interceptor, its tracer provider set up on first use.

    One instance per process: on a client it reaches every worker made from that client, and
    a worker's own plugin carrying the same instance is skipped there (so nothing is traced
    twice). Spans go over OTLP/HTTP where the standard ``OTEL_EXPORTER_OTLP_*`` variables
    say (default ``http://localhost:4318``). A tracer provider the host set already is used
    when workflows can use it (made by temporalio's ``create_tracer_provider()``)."""
    global _INTERCEPTOR
    if _INTERCEPTOR is not None:
        return _INTERCEPTOR
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from temporalio.contrib.opentelemetry import (
            OpenTelemetryInterceptor,
            ReplaySafeTracerProvider,
            create_tracer_provider,
        )
    except ImportError as err:
        raise ConfigurationError(
            f"OpenTelemetry tracing (otel=True, --otel, LATTICE_OTEL) needs the `otel` extra: "
            f"{OTEL_EXTRA} ({err})"
        ) from None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):  # none set yet: ours
        resource = Resource.create()
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": _settings.DEFAULT_SERVICE_NAME}))
        provider = create_tracer_provider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
    elif not isinstance(provider, ReplaySafeTracerProvider):
        raise ConfigurationError(
            f"OpenTelemetry tracing: this process set a tracer provider already "
            f"({type(provider).__name__}) that workflow code cannot use; make it with "
            "temporalio.contrib.opentelemetry.create_tracer_provider(), or let agent-lattice "
            "make it (connect with otel=True before setting one)"
        )
    _INTERCEPTOR = _without_stream_polls(OpenTelemetryInterceptor)(add_temporal_spans=True)
    return _INTERCEPTOR


# A reader follows a run's messages by polling its stream (an update, or a query) every
# 50 ms: traced, each poll would be a trace of its own, three spans, outside the query's.
STREAM_POLLS = "__temporal_workflow_stream"


def _without_stream_polls(traced: Any) -> Any:
    """The tracing interceptor class, with the message-stream polls left untraced."""
    from temporalio import client

    class Interceptor(traced):
        def intercept_client(self, next: client.OutboundInterceptor) -> client.OutboundInterceptor:
            return _UntracedPolls(super().intercept_client(next), next)

        def workflow_interceptor_class(self, input: Any) -> Any:
            class Inbound(super().workflow_interceptor_class(input)):
                def handle_update_validator(self, input: Any) -> None:
                    if input.update.startswith(STREAM_POLLS):
                        return self.next.handle_update_validator(input)
                    return super().handle_update_validator(input)

                async def handle_update_handler(self, input: Any) -> Any:
                    if input.update.startswith(STREAM_POLLS):
                        return await self.next.handle_update_handler(input)
                    return await super().handle_update_handler(input)

                async def handle_query(self, input: Any) -> Any:
                    if input.query.startswith(STREAM_POLLS):
                        return await self.next.handle_query(input)
                    return await super().handle_query(input)

            return Inbound

    class _UntracedPolls(client.OutboundInterceptor):
        def __init__(self, traced: client.OutboundInterceptor, plain: client.OutboundInterceptor):
            super().__init__(traced)
            self._plain = plain

        async def start_workflow_update(self, input: client.StartWorkflowUpdateInput) -> Any:
            if input.update.startswith(STREAM_POLLS):
                return await self._plain.start_workflow_update(input)
            return await super().start_workflow_update(input)

        async def query_workflow(self, input: client.QueryWorkflowInput) -> Any:
            if input.query.startswith(STREAM_POLLS):
                return await self._plain.query_workflow(input)
            return await super().query_workflow(input)

    return Interceptor


def flush_tracing() -> None:
    """Export the spans this process still holds (a script ends soon after its query)."""
    if _INTERCEPTOR is None:
        return
    from opentelemetry import trace

    flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if callable(flush):
        flush(5000)
