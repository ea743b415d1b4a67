"""Every touch of temporalio's private internals, in one place: the fast paths they enable.

agent-lattice runs on temporalio's public API. Where that API has no hook for what a durable
agent needs often, this module reaches into the SDK, written against temporalio
``WRITTEN_FOR`` (its private names are where that version keeps them). Each fast path saves
time or memory and changes no behaviour; without them (``LATTICE_SDK_FAST_PATHS=off``, or a
temporalio of another minor version, which turns them off with one warning) everything works,
as CI checks by running the durability, crash, streaming and replay tests a second time with
them off. ``bench/README.md`` says what each buys, so an upgrade can decide to drop one.

The fast paths (``FAST_PATHS``):

- ``direct_contexts``: the worker asks a run's instance for a payload's serialization
  context once per payload sequence, three times over each activation and its completion;
  the SDK's sandboxed instance compiles and runs a source string inside the sandbox for each
  ask (15 % of the worker's GIL time over ``query()`` turns). Here the in-sandbox instance
  is asked directly: a plain read, no workflow code.
- ``run_parking``: a run idle for ``park_after`` leaves the worker's workflow cache through
  the SDK's core (``worker/_park``): no memory while it waits on a model, a tool, a person.
- ``commit_notices``: once the server has taken a workflow task, the worker tells the
  run's caller what the task published (``worker/_commits``), instead of the caller long
  polling the history and querying the stream (a third of a streamed query's CPU).
- ``quiet_evictions``: a plain script's ``asyncio.run`` cancels inline workers' eviction
  jobs at its end; the SDK's private logger would print each one's harmless error.

The private names, all here: ``workflow_sandbox._runner._Instance`` (subclassed: activation
hook, in-sandbox instance, its ``_object``, ``_pending_activities`` and their ``_input``),
``Worker._workflow_worker`` with its ``_bridge_worker`` and ``_running_workflows``,
``Worker._bridge_worker.request_workflow_eviction``, ``WorkflowStream._collect_batch``, and
the logger ``temporalio.worker._workflow``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import temporalio
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.contrib.workflow_streams import PollInput, PollResult, WorkflowStream
from temporalio.worker import (
    StartLocalActivityInput,
    Worker,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

# private to the SDK: the in-sandbox runner's instance, subclassed by CachedRun
from temporalio.worker.workflow_sandbox._runner import _Instance

from .. import _settings
from ..live._channel import Committed
from ..workflows._run_stream import MESSAGES_TOPIC

__all__ = [
    "FAST_PATHS",
    "WRITTEN_FOR",
    "CachedRun",
    "Notice",
    "cached_runs",
    "evict",
    "fast_paths_on",
    "quiet_cancelled_evictions",
    "sandbox_runner",
    "stream_batch",
    "tell_when_taken",
]

WRITTEN_FOR = "1.35"  # temporalio's minor version whose private names these are
FAST_PATHS = {
    "direct_contexts": "serialization contexts read without running code in the sandbox",
    "run_parking": "idle runs leave the workflow cache while they wait",
    "commit_notices": "a task's published messages told to its caller once taken",
    "quiet_evictions": "no error logged for inline workers' evictions cancelled at exit",
}

log = logging.getLogger("agent_lattice.worker")
_warned: list[str] = []


def fast_paths_on() -> bool:
    """Whether the fast paths are on: ``LATTICE_SDK_FAST_PATHS`` is not ``off`` and the
    installed temporalio is the minor version they were written for (else one warning)."""
    if not _settings.sdk_fast_paths():
        return False
    version = temporalio.__version__
    if version == WRITTEN_FOR or version.startswith(WRITTEN_FOR + "."):
        return True
    if version not in _warned:
        _warned.append(version)
        log.warning(
            "agent-lattice's fast paths (%s) were written for temporalio %s; this is %s: they "
            "are off, everything works on the SDK's public API",
            ", ".join(FAST_PATHS),
            WRITTEN_FOR,
            version,
        )
    return False


# -- direct_contexts, and the run state parking and commit notices read ----------------------

Notice = tuple[str, str, Committed]  # the caller's address and channel, what to tell it

_IN_SANDBOX = "__temporal_in_sandbox"  # where the SDK keeps the in-sandbox instance


class CachedRun(_Instance):
    """A run in the worker's workflow cache, as the fast paths see it: whether it is stepping
    or idle since when (parking), what its last task published for its caller (commit
    notices), and serialization contexts read from its in-sandbox instance."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.idle_since = time.monotonic()  # when its last activation ended
        self.busy = False  # an activation is running
        self.parked = False  # its eviction was asked for (worker/_park)
        self._parking = threading.Lock()  # between park() and an activation's start
        self.noticed: int | None = None  # the stream offset its caller was told of
        self.notice: Notice | None = None  # to send once the server takes the task

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        with self._parking:
            # Parked, yet stepped: the task reached the worker's core before the eviction
            # did, and the core evicts the run once this activation completes, cancelling
            # the local activities it starts (they would run again on the replay).
            # An update is not retried with its task (the server rejects it), so a task
            # that carries one completes as usual: the local activity an update handler
            # starts (checking an approval's edited input) has no effect of its own.
            raced = self.parked and not any(
                j.HasField("remove_from_cache") or j.HasField("do_update") for j in act.jobs
            )
            self.busy = True
        self.notice = None
        before = self._published()
        try:
            completion = super().activate(act)
        finally:
            self.idle_since = time.monotonic()
            self.busy = False
        if raced and any(
            c.HasField("schedule_local_activity") for c in completion.successful.commands
        ):
            # Fail the task instead: none of its commands reach the server, which retries the
            # task on the replayed run, and the local activities start there, once.
            failed = WorkflowActivationCompletion(run_id=completion.run_id)
            failed.failed.failure.message = (
                "agent-lattice: the run was parked as this task arrived; the task runs again"
            )
            return failed
        self.notice = self._commit_notice(act, completion, before)
        return completion

    def _commit_source(self) -> Any:
        """The run's stream when it is an agent run (``workflows/_run_stream.RunStream``, its
        ``commit_source``), else None; its notice_* and published_* are plain reads."""
        workflow = getattr(getattr(self.inner(), "instance", None), "_object", None)
        source = getattr(workflow, "commit_source", None)
        return source if hasattr(source, "notice_target") else None

    def _published(self) -> int | None:
        """The run's stream length, for an agent run whose caller listens (else None)."""
        source = self._commit_source()
        return source.published_count() if source and source.notice_target() else None

    def _commit_notice(
        self, act: WorkflowActivation, completion: WorkflowActivationCompletion, before: int | None
    ) -> Notice | None:
        """What this activation published, for its caller once the server has taken the task
        (``worker/_commits``); None when there is nothing to tell or it would not be durable
        yet: a replay (told already, or the reader asks), a failed task, a task held by the
        worker's core while local activities run."""
        if act.is_replaying or not completion.HasField("successful"):
            return None
        if any(c.HasField("schedule_local_activity") for c in completion.successful.commands):
            return None
        source = self._commit_source()
        if source is None:
            return None
        target = source.notice_target()
        if target is None or self._local_activity_pending():
            return None
        if before is None and any(j.HasField("initialize_workflow") for j in act.jobs):
            before = source.published_at_start()  # the run's first task
        start = self.noticed if self.noticed is not None else before
        upto = source.published_count()
        if start is None or upto <= start:
            return None
        batch = stream_batch(
            source.notice_stream(), PollInput(topics=[MESSAGES_TOPIC], from_offset=start)
        )
        if batch is None:
            return None
        self.noticed = batch.next_offset
        items = [{"topic": i.topic, "data": i.data, "offset": i.offset} for i in batch.items]
        notice = Committed(from_offset=start, upto=batch.next_offset, items=items)
        return target[0], target[1], notice

    def _local_activity_pending(self) -> bool:
        """Whether the run has a local activity in flight (True when that cannot be told)."""
        workflow = getattr(self.inner(), "instance", None)  # the SDK's, in the sandbox
        pending = getattr(workflow, "_pending_activities", None)  # its activities, by seq
        if not isinstance(pending, dict):  # not made yet, or not where the SDK kept it
            return True
        try:
            handles = list(pending.values())
        except RuntimeError:  # changed by an activation that just began
            return True
        return any(isinstance(getattr(h, "_input", None), StartLocalActivityInput) for h in handles)

    def park(self, cutoff: float) -> bool:
        """Mark the run parked when it is parkable (see :meth:`parkable`); an activation
        starting from now on knows its run is to be evicted."""
        with self._parking:
            if not self.parkable(cutoff):
                return False
            self.parked = True
            return True

    def parkable(self, cutoff: float) -> bool:
        """Whether the run has waited, with no activation since ``cutoff`` (monotonic), on
        nothing that lives in this process only: its pending activities are all regular
        ones (an eviction cancels local activities, which would then run again)."""
        if self.busy or self.parked or self.idle_since > cutoff:
            return False
        return not self._local_activity_pending()

    def inner(self) -> Any:
        """The in-sandbox instance (None before it is made)."""
        return self.globals_and_locals.get(_IN_SANDBOX)

    def direct(self) -> bool:
        """Whether serialization contexts are read without running code in the sandbox."""
        return self.inner() is not None

    def get_serialization_context(self, command_info: Any) -> Any:
        inner = self.inner()
        if inner is None:  # not created yet, or the SDK keeps it elsewhere
            return super().get_serialization_context(command_info)
        return inner.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        inner = self.inner()
        if inner is None:
            return super().get_external_store_context(command_info)
        return inner.get_external_store_context(command_info)


class _CachedRunRunner(SandboxedWorkflowRunner):
    """The SDK's sandboxed runner, whose instances are :class:`CachedRun`: the same sandbox
    for workflow code (activations, queries, signals, updates)."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return CachedRun(det, self.runner_class, self.restrictions)


def sandbox_runner(restrictions: SandboxRestrictions) -> WorkflowRunner:
    """The workflow runner for a lattice worker: the SDK's sandbox, with the fast paths'
    instances when they are on."""
    if fast_paths_on():
        return _CachedRunRunner(restrictions=restrictions)
    return SandboxedWorkflowRunner(restrictions=restrictions)


# -- run_parking --------------------------------------------------------------------------------


def cached_runs(worker: Worker) -> dict[str, CachedRun] | None:
    """The runs ``worker`` holds in its workflow cache now, by run id; None when the fast
    paths are off or the SDK keeps them elsewhere (a warning says so, once)."""
    if not fast_paths_on():
        return None
    workflows = getattr(worker, "_workflow_worker", None)
    if workflows is None:  # a worker with no workflows: nothing cached
        return {}
    runs = getattr(workflows, "_running_workflows", None)
    evict = getattr(getattr(worker, "_bridge_worker", None), "request_workflow_eviction", None)
    if not isinstance(runs, dict) or evict is None:
        _warn_once("this temporalio keeps its cached runs elsewhere: idle runs are not parked")
        return None
    out: dict[str, CachedRun] = {}
    for run_id, running in list(runs.items()):
        instance = getattr(running, "instance", None)
        if isinstance(instance, CachedRun):
            out[run_id] = instance
    return out


def evict(worker: Worker, run_id: str) -> None:
    """Ask the worker's core to evict run ``run_id`` from the cache (once: the eviction ends
    its entry; its next workflow task replays it)."""
    getattr(worker, "_bridge_worker").request_workflow_eviction(run_id)  # noqa: B009


# -- commit_notices ----------------------------------------------------------------------------

Tell = Callable[[Notice, bool], None]


def tell_when_taken(worker: Worker, tell: Tell) -> Callable[[], None] | None:
    """Once the server has taken a workflow task of ``worker``'s, call ``tell(notice,
    ending)`` with what the task published for its run's caller (``ending``: the task ends
    the run). Returns what undoes it; None when the fast paths are off or the SDK keeps its
    workflow bridge elsewhere (the SDK has no hook after a completion: its bridge is wrapped).
    """
    if not fast_paths_on():
        return None
    workflows = getattr(worker, "_workflow_worker", None)
    if workflows is None:
        return None
    real = getattr(workflows, "_bridge_worker", None)
    runs = getattr(workflows, "_running_workflows", None)
    if not callable(real) or not isinstance(runs, dict):
        _warn_once("this temporalio keeps its workflow bridge elsewhere: no commit notices")
        return None
    bridge = _TellingBridge(real, runs, tell)
    setattr(workflows, "_bridge_worker", lambda: bridge)  # noqa: B010

    def undo() -> None:
        setattr(workflows, "_bridge_worker", real)  # noqa: B010

    return undo


_ENDING = (  # commands after which a run has no task to tell of
    "complete_workflow_execution",
    "fail_workflow_execution",
    "continue_as_new_workflow_execution",
    "cancel_workflow_execution",
)


class _TellingBridge:
    """The SDK's bridge worker, which tells a task's notice once the server has taken it."""

    def __init__(self, real: Callable[[], Any], runs: dict[str, Any], tell: Tell) -> None:
        self._real, self._runs, self._tell = real, runs, tell

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)

    async def complete_workflow_activation(self, completion: WorkflowActivationCompletion) -> None:
        instance = getattr(self._runs.get(completion.run_id), "instance", None)
        notice = None
        if isinstance(instance, CachedRun):
            notice, instance.notice = instance.notice, None
        # resolves once the server answered the task's completion (or the core gave it up:
        # then the run is evicted, and its replay publishes the same messages again)
        await self._real().complete_workflow_activation(completion)
        # (a completion the SDK failed after the run stepped, encoding it, tells nothing)
        if notice is not None and completion.HasField("successful"):
            ending = any(
                c.HasField(field) for c in completion.successful.commands for field in _ENDING
            )
            self._tell(notice, ending)


def stream_batch(stream: WorkflowStream, poll: PollInput) -> PollResult | None:
    """What the stream's poll query would answer to ``poll``, read from the run's state (the
    contrib module's own batching: wire form, the ~1 MB cap); None when the module keeps it
    elsewhere. Called only for a :class:`CachedRun`, which exists only with the fast paths
    on, so it reads no setting on this per-task path."""
    collect: Callable[[PollInput], PollResult] | None = getattr(stream, "_collect_batch", None)
    if collect is None:
        return None
    return collect(poll)


# -- quiet_evictions ---------------------------------------------------------------------------


class _QuietCancelledEviction(logging.Filter):
    """A plain script ends with ``asyncio.run`` cancelling every task, inline workers included;
    the eviction jobs it cancels are harmless there, so their errors are not shown."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (
            record.getMessage().startswith("Failed running eviction job")
            and isinstance(exc, asyncio.CancelledError)
        )


_QUIET = _QuietCancelledEviction()


def quiet_cancelled_evictions() -> None:
    """Filter the SDK's error for each eviction job a script's end cancels (idempotent)."""
    if fast_paths_on():
        logging.getLogger("temporalio.worker._workflow").addFilter(_QUIET)


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.append(message)
        log.warning(message)
