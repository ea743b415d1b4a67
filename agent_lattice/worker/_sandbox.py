"""The workflow sandbox, without recompiling code for every payload.

With the SDK's sandboxed runner (temporalio 1.35), the worker asks the workflow instance for
a payload's serialization context once per payload sequence, in each of the three passes
over an activation and over its completion (codec, external storage, references), whether
or not a codec or an external store is configured. Each ask runs a source string with
``exec`` inside the sandbox: compiled again each time, then the sandbox's importer applied
and removed. In a profile of ``query()`` turns that was 15 % of the worker's GIL time.

The context is a plain read of the instance's state (its info and pending commands: no
import, no workflow code), so this runner asks the in-sandbox instance directly. Workflow
code itself (activations, queries, signals) still runs inside the sandbox exactly as before.
Where the in-sandbox instance is not where the SDK keeps it, the SDK's own path is used.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.worker import StartLocalActivityInput, WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

# private to the SDK: the pin in pyproject.toml (temporalio 1.35.x) keeps it where it is, and
# tests/test_runtime.py checks that instances take this path
from temporalio.worker.workflow_sandbox._runner import _Instance

from .._streaming import Committed

Notice = tuple[str, str, Committed]  # the caller's address and channel, what to tell it

_IN_SANDBOX = "__temporal_in_sandbox"  # where the SDK keeps the in-sandbox instance

__all__ = ["LatticeSandboxRunner", "direct_contexts"]


class _DirectContexts(_Instance):
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

    def _agent_run(self) -> Any:
        """The run's workflow object when it is an agent run (``workflows/_notices``), else
        None; its notice_* and published_* are plain reads."""
        workflow = getattr(getattr(self.inner(), "instance", None), "_object", None)
        return workflow if hasattr(workflow, "notice_target") else None

    def _published(self) -> int | None:
        """The run's stream length, for an agent run whose caller listens (else None)."""
        workflow = self._agent_run()
        return workflow.published_count() if workflow and workflow.notice_target() else None

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
        workflow = self._agent_run()
        if workflow is None:
            return None
        target = workflow.notice_target()
        if target is None or self._local_activity_pending():
            return None
        if before is None and any(j.HasField("initialize_workflow") for j in act.jobs):
            before = workflow.published_at_start()  # the run's first task
        start = self.noticed if self.noticed is not None else before
        upto = workflow.published_count()
        if start is None or upto <= start:
            return None
        batch = workflow.published_from(start)
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


def direct_contexts(instance: WorkflowInstance) -> bool:
    """Whether ``instance`` reads serialization contexts without running code in the
    sandbox."""
    return isinstance(instance, _DirectContexts) and instance.inner() is not None


class LatticeSandboxRunner(SandboxedWorkflowRunner):
    """:class:`SandboxedWorkflowRunner` whose instances read serialization contexts
    directly (see the module's doc); otherwise the same sandbox."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _DirectContexts(det, self.runner_class, self.restrictions)
