"""Safe deploys: Temporal Worker Versioning for `lattice worker --deployment NAME --build-id ID`.

A query is pinned to the build that started it; a new build made current takes the new
queries. Against the session's dev server, with real `lattice worker` processes and the
`temporal` CLI an operator would use.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.common import VersioningBehavior

from agent_lattice import ConfigurationError
from agent_lattice.client import list_pending_approvals, resolve_approval
from agent_lattice.client._server import temporal_binary
from agent_lattice.testing import RecordedRequest, Reply, assert_eventually, text, tool_use
from agent_lattice.worker import create_workers
from agent_lattice.worker._versioning import deployment_config
from agent_lattice.worker._worker import resolve_agent
from agent_lattice.workflows._mailbox import mailbox_task_queue

APP = Path(__file__).with_name("versioned_app.py")
ROOT = Path(__file__).resolve().parent.parent


async def test_queries_are_pinned_and_mailboxes_auto_upgrade(make_agent, lattice_runtime):
    """A versioned worker's queries (and team queries) stay on the build that started them;
    the long-lived mailbox, which continues as new for as long as its team lives, moves to
    the current build. Unversioned workers stay unversioned."""
    agent = make_agent(name="fleet")
    versioned = create_workers(
        lattice_runtime.client, [agent], deployment_name="fleet", build_id="v1"
    )
    behaviour = {
        w.task_queue: w.config(active_config=True)["deployment_config"].default_versioning_behavior
        for w in versioned
    }
    assert behaviour == {
        agent.task_queue: VersioningBehavior.PINNED,
        mailbox_task_queue(): VersioningBehavior.AUTO_UPGRADE,
    }
    with pytest.raises(ConfigurationError, match="give the worker deployment once"):
        create_workers(
            lattice_runtime.client,
            [agent],
            deployment_name="fleet",
            build_id="v2",
            deployment_config=deployment_config("fleet", "v1"),
        )
    unversioned = create_workers(lattice_runtime.client, [agent])
    assert [w.config(active_config=True).get("deployment_config") for w in unversioned] == [
        None,
        None,
    ]


@pytest.mark.parametrize(
    ("name", "build", "error"),
    [
        ("fleet", None, r"a deployment name was given without a build id \(build_id="),
        (None, "v1", r"a build id was given without a deployment name \(deployment_name="),
        ("fleet.eu", "v1", r"deployment name 'fleet.eu': no '.' allowed"),
        ("fleet", " ", r"build id ' ': expected 1 to 255 characters"),
        ("__unversioned__", "v1", r"names starting with '__' are reserved"),
    ],
)
def test_a_half_or_malformed_deployment_is_refused(name, build, error):
    with pytest.raises(ConfigurationError, match=error):
        deployment_config(name, build)


def test_no_deployment_is_an_unversioned_worker():
    assert deployment_config(None, None) is None
    config = deployment_config("fleet", "v1")
    assert config is not None and config.use_worker_versioning
    assert config.version.to_canonical_string() == "fleet.v1"


def test_lattice_worker_refuses_a_build_id_without_a_deployment(tmp_path):
    env = {**os.environ, "LATTICE_HOME": str(tmp_path), "LATTICE_BUILD_ID": "v1"}
    env.pop("LATTICE_DEPLOYMENT_NAME", None)
    done = subprocess.run(
        [sys.executable, "-m", "agent_lattice.cli", "worker", str(APP)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert done.stderr.startswith("error: worker versioning needs both"), done.stderr
    assert "LATTICE_DEPLOYMENT_NAME" in done.stderr


class _Worker:
    """A `lattice worker` process of the versioned app, as one build."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agent_lattice.cli", "worker", str(APP), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.said: list[str] = []

    async def ready(self) -> None:
        def wait() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.said.append(line)
                if line.startswith("ready"):
                    return
            raise AssertionError(f"the worker exited: {''.join(self.said)}")

        await asyncio.wait_for(asyncio.to_thread(wait), 60)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def _set_current(address: str, deployment: str, build: str) -> None:
    """What an operator runs once the new build's workers poll."""
    done = subprocess.run(
        [
            temporal_binary(),
            *("worker", "deployment", "set-current-version", "--yes"),
            *("--address", address, "--deployment-name", deployment, "--build-id", build),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr  # not yet: the new version has not polled


async def _version_of(runtime, workflow_id: str) -> tuple[str, int]:
    described = await runtime.client.get_workflow_handle(workflow_id).describe()
    info = described.raw_description.workflow_execution_info.versioning_info
    return info.deployment_version.build_id, info.behavior


@pytest.mark.slow  # two worker processes
async def test_a_running_query_finishes_on_its_build_and_new_ones_run_on_the_current(
    lattice_server, remote_runtime, fake_anthropic
):
    def model(request: RecordedRequest) -> Reply:
        if request.tool_results:
            return text(f"done: {request.tool_results[0]['content']}")
        if "invoice" in (request.last_user_text or ""):
            return tool_use("pay", {"number": "7"})  # waits for approval, in workflow state
        return tool_use("which_build", {})

    fake_anthropic.set_handler(model)
    deployment = f"lattice-test-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,  # the same LATTICE_HOME: client and workers share its transcripts
        "TEMPORAL_ADDRESS": lattice_server,
        "ANTHROPIC_BASE_URL": fake_anthropic.base_url,
        "PYTHONPATH": str(ROOT),
    }
    started: list[_Worker] = []
    try:
        # build v1, versioned by flags; made current, it takes the first query
        v1 = _Worker(
            ["--deployment", deployment, "--build-id", "v1"], {**env, "LATTICE_TEST_BUILD": "v1"}
        )
        started.append(v1)
        await v1.ready()
        assert f"worker deployment version {deployment}.v1" in "".join(v1.said)
        await assert_eventually(lambda: _set_current(lattice_server, deployment, "v1"))
        payer = resolve_agent(f"{APP}:agent").bind_runtime(remote_runtime)
        paying = asyncio.ensure_future(payer.prompt("Pay invoice 7."))
        first = f"rollout-{payer.session_id}-1"  # a query's workflow id
        pending = await assert_eventually(
            lambda: list_pending_approvals(first, runtime=remote_runtime), within=30
        )

        # build v2, versioned by the environment, is deployed and made current meanwhile
        v2 = _Worker(
            [],
            {
                **env,
                "LATTICE_DEPLOYMENT_NAME": deployment,
                "LATTICE_BUILD_ID": "v2",
                "LATTICE_TEST_BUILD": "v2",
            },
        )
        started.append(v2)
        await v2.ready()
        await assert_eventually(lambda: _set_current(lattice_server, deployment, "v2"))

        # the running query goes on where it started: its tool runs on v1
        await resolve_approval(first, pending[0].approval_id, runtime=remote_runtime)
        paid = await asyncio.wait_for(paying, 30)
        assert paid.subtype == "success", paid
        answers = [r.tool_results[0]["content"] for r in fake_anthropic.requests if r.tool_results]
        assert answers == ["invoice 7 paid by build v1"]
        assert await _version_of(remote_runtime, first) == ("v1", VersioningBehavior.PINNED)

        # a new query runs on the current build
        agent = resolve_agent(f"{APP}:agent").bind_runtime(remote_runtime)
        result = await agent.prompt("Which build are you?")
        assert result.subtype == "success" and result.result == "done: build v2"
        assert await _version_of(remote_runtime, result.workflow_id) == (
            "v2",
            VersioningBehavior.PINNED,
        )
    finally:
        for worker in started:
            worker.stop()
