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

from typing import Any

from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

# private to the SDK: the pin in pyproject.toml (temporalio 1.35.x) keeps it where it is, and
# tests/test_runtime.py checks that instances take this path
from temporalio.worker.workflow_sandbox._runner import _Instance

_IN_SANDBOX = "__temporal_in_sandbox"  # where the SDK keeps the in-sandbox instance

__all__ = ["LatticeSandboxRunner", "direct_contexts"]


class _DirectContexts(_Instance):
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
