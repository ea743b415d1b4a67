"""Parking: a run that waits idle leaves the worker's memory until its next step.

A worker keeps each run it has stepped in its workflow cache, so that the next workflow task
applies only the new events. A query waiting on the model, on a tool, on a human's approval,
on a child agent or on team mail holds its whole instance there while it waits: about
100 KB of worker memory per waiting query (``bench/idle_memory.py``), for nothing until the
wait ends. The SDK's only bound is the cache's size, and a cache smaller than the number of
concurrent runs evicts the least recently stepped runs whatever they do, so a busy worker
replays runs that are about to step (``max_cached_workflows``).

This module evicts, through the SDK's core, the runs that have had no activation for
``park_after`` seconds (``LATTICE_PARK_AFTER``, default 10). What such a run waits on is a
server-side fact (an activity, a timer, a child, a signal), so its next workflow task reaches
this worker (or any other) as usual, and the run is rebuilt by replaying its history, which
Temporal guarantees gives the same state: a parked run costs one replay when it wakes and no
memory while it waits. A run with a pending local activity is never parked: an eviction
cancels local activities, which would then run again.

The SDK offers eviction on its bridge worker and keeps a worker's runs in its workflow worker;
both are private there: this is the ``run_parking`` fast path of ``_sdk_internals``, off with
the others (``LATTICE_SDK_FAST_PATHS=off``, another temporalio), when runs are not parked.
``tests/test_park.py`` covers the path.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

from temporalio.runtime import Runtime
from temporalio.worker import Worker

from .. import _settings
from .._errors import ConfigurationError
from ._sdk_internals import cached_runs as _cached
from ._sdk_internals import evict

__all__ = [
    "DEFAULT_PARK_AFTER",
    "PARKED_RUNS",
    "cached_runs",
    "park_after_seconds",
    "park_idle_runs",
]

DEFAULT_PARK_AFTER = 10.0
PARKED_RUNS = "lattice_parked_runs"

log = logging.getLogger("agent_lattice.worker")


def park_after_seconds(value: float | None) -> float:
    """The idle time after which a run is parked: ``value``, else ``LATTICE_PARK_AFTER``,
    else 10 s; ``math.inf`` never parks."""
    if value is None:
        value = _settings.park_after()
    if value is None:
        return DEFAULT_PARK_AFTER
    if not value >= 0:  # NaN too
        raise ConfigurationError(
            f"park_after must be a number of seconds >= 0 (or math.inf), got {value!r}"
        )
    return value


def cached_runs(worker: Worker) -> set[str]:
    """The run ids ``worker`` holds in its workflow cache now (empty when that cannot be
    told: the fast paths are off)."""
    return set(_cached(worker) or {})


def _meter(worker: Worker) -> Any:
    runtime = worker.client.service_client.config.runtime or Runtime.default()
    return runtime.metric_meter.with_additional_attributes(
        {"namespace": worker.client.namespace, "task_queue": worker.config().get("task_queue", "")}
    )


async def park_idle_runs(worker: Worker, after: float) -> None:
    """Evict ``worker``'s runs idle for ``after`` seconds, until cancelled."""
    if math.isinf(after):
        return
    if not worker.config(active_config=True).get("workflows") or _cached(worker) is None:
        return  # no workflows to cache, or the fast paths are off
    parked = _meter(worker).create_counter(
        PARKED_RUNS, "Runs evicted from the workflow cache after waiting idle"
    )
    interval = min(1.0, max(0.05, after / 4))
    while True:
        await asyncio.sleep(interval)
        try:
            count = _park(worker, time.monotonic() - after)
        except Exception:  # parking saves memory; the worker goes on without it
            log.warning("parking idle runs failed: they stay cached", exc_info=True)
            return
        if count:
            parked.add(count)
            log.debug("parked %d idle runs", count)


def _park(worker: Worker, cutoff: float) -> int:
    count = 0
    for run_id, run in (_cached(worker) or {}).items():
        if run.park(cutoff):
            evict(worker, run_id)
            count += 1
    return count
