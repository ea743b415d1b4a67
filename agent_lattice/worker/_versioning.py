"""Temporal Worker Versioning for lattice workers: a deployment name and a build id.

A worker given both joins the worker deployment ``NAME`` as version ``NAME.BUILD_ID``. The
server then routes each workflow by its versioning behaviour:

- ``AgentWorkflow`` and ``TeamWorkflow`` are *pinned*: a query runs to its end on the build
  that started it (its continuations and delegated children too), so a deploy never replays
  a running query on code it was not started with;
- ``TeamMailboxWorkflow`` *auto-upgrades*: it lives as long as its team (continuing as new),
  so pinned it would keep its first build's workers needed forever; it moves to the
  deployment's current version at its next task instead, so a change to it that alters
  commands is replayed by the new build over the old one's history: guard it with
  ``workflow.patched``.

The behaviour is the worker's default, by task queue (:func:`versioned_for`): the mailbox
queue runs mailboxes only, the agents' queues run queries only. (It is not declared on the
workflow classes: temporalio 1.35 sends a declared behaviour from unversioned workers too,
and the server refuses their workflow tasks then.)

New queries go to the deployment's *current* version, which an operator sets
(``temporal worker deployment set-current-version``) once the new build's workers poll; the
old build's workers stay until its pinned queries have drained. Without a deployment name
and build id a worker is unversioned, as before; workers a script runs for itself and
workers adopting orphaned runs are always unversioned (their queues are private).
"""

from __future__ import annotations

import dataclasses

from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import WorkerDeploymentConfig

from .._errors import ConfigurationError

__all__ = ["deployment_config", "versioned_for"]

# The server's limit on a deployment name and a build id (characters)
_MAX_LENGTH = 255


def _check(what: str, value: str) -> None:
    if not value.strip() or len(value) > _MAX_LENGTH:
        raise ConfigurationError(f"{what} {value!r}: expected 1 to {_MAX_LENGTH} characters")
    if value.startswith("__"):
        raise ConfigurationError(f"{what} {value!r}: names starting with '__' are reserved")


def deployment_config(
    deployment_name: str | None, build_id: str | None
) -> WorkerDeploymentConfig | None:
    """The versioning of a worker deployed as ``deployment_name`` at ``build_id`` (None: both
    unset, an unversioned worker). One without the other is a ConfigurationError."""
    if deployment_name is None and build_id is None:
        return None
    if deployment_name is None or build_id is None:
        given, missing = (
            (
                "a build id",
                "deployment name (deployment_name=, --deployment, LATTICE_DEPLOYMENT_NAME)",
            )
            if deployment_name is None
            else ("a deployment name", "build id (build_id=, --build-id, LATTICE_BUILD_ID)")
        )
        raise ConfigurationError(
            f"worker versioning needs both a deployment name and a build id: {given} was "
            f"given without a {missing}"
        )
    _check("deployment name", deployment_name)
    _check("build id", build_id)
    if "." in deployment_name:
        # a version is written NAME.BUILD_ID: the name must not hold the separator
        raise ConfigurationError(f"deployment name {deployment_name!r}: no '.' allowed")
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment_name=deployment_name, build_id=build_id),
        use_worker_versioning=True,
    )


def versioned_for(config: WorkerDeploymentConfig, *, mailboxes: bool) -> WorkerDeploymentConfig:
    """``config`` with the versioning behaviour of its queue's workflows as its default (one
    the caller chose is kept): auto-upgrade for the mailbox queue, pinned for queries."""
    if not config.use_worker_versioning:
        return config
    if config.default_versioning_behavior != VersioningBehavior.UNSPECIFIED:
        return config
    behaviour = VersioningBehavior.AUTO_UPGRADE if mailboxes else VersioningBehavior.PINNED
    return dataclasses.replace(config, default_versioning_behavior=behaviour)
