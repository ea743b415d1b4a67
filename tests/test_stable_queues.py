"""An agent's task queue is ``lattice.<name>``: a changed prompt keeps the queue a scaler or
an alert watches. A worker refuses a run of another definition of its agent, naming both
fingerprints; runs on the former ``lattice.<name>.<fingerprint>`` queues are still served."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from agent_lattice import create_bare_agent
from agent_lattice.testing import FakeAnthropicServer, text
from agent_lattice.worker import create_workers
from agent_lattice.worker._adopt import adopt_orphans

API_KEY = "sk-ant-test-queues"


def _agent(fake: FakeAnthropicServer, name: str, **options: object):
    return create_bare_agent(
        name=name, model="claude-test", api_key=API_KEY, base_url=fake.base_url, **options
    )


def test_a_changed_prompt_keeps_the_queue_and_changes_the_key(task_queue_prefix, fake_anthropic):
    name = f"steady{uuid.uuid4().hex[:6]}"
    first = _agent(fake_anthropic, name, system_prompt="Be brief.")
    changed = _agent(fake_anthropic, name, system_prompt="Be thorough.")
    assert first.task_queue == changed.task_queue == f"{task_queue_prefix}lattice.{name}"
    assert first.key != changed.key  # what a worker checks a run against
    assert first.definition_queue == f"{task_queue_prefix}lattice.{first.key}"
    given = _agent(fake_anthropic, name, task_queue="mine")
    assert given.task_queue == "mine"  # task_queue= still overrides


async def test_a_worker_refuses_a_run_of_another_definition_naming_both_fingerprints(
    remote_runtime, fake_anthropic
):
    fake_anthropic.set_handler(lambda _request: text("answered"))
    name = f"drift{uuid.uuid4().hex[:6]}"
    served = _agent(fake_anthropic, name, system_prompt="Version one.")
    changed = _agent(fake_anthropic, name, system_prompt="Version two.")
    workers = create_workers(remote_runtime.client, [served])
    tasks = [asyncio.create_task(w.run()) for w in workers]
    try:
        result = await asyncio.wait_for(changed.prompt("hi", runtime=remote_runtime), 30)
        assert result.is_error and result.error is not None, result
        message = result.error.message
        fingerprints = (served.key.rpartition(".")[2], changed.key.rpartition(".")[2])
        assert f"this run's definition has fingerprint {fingerprints[1]}" in message
        assert f"this worker serves fingerprint {fingerprints[0]}" in message
        assert fake_anthropic.requests == []  # refused before any model request
        # the worker's own definition is served on the same queue
        ok = await asyncio.wait_for(served.prompt("hi", runtime=remote_runtime), 30)
        assert ok.result == "answered", ok
    finally:
        await asyncio.gather(*(w.shutdown() for w in workers))
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_run_on_the_former_hashed_queue_is_served_by_its_definition_s_worker(
    remote_runtime, fake_anthropic
):
    """A run an older release started on ``lattice.<name>.<fingerprint>`` (here: a client
    that sends it there) goes on once a worker of that definition runs."""
    fake_anthropic.set_handler(lambda _request: text("from the former queue"))
    name = f"former{uuid.uuid4().hex[:6]}"
    agent = _agent(fake_anthropic, name)
    old_client_view = _agent(fake_anthropic, name, task_queue=agent.definition_queue)
    assert old_client_view.key == agent.key  # task_queue is no part of the definition
    query = asyncio.ensure_future(old_client_view.prompt("hi", runtime=remote_runtime))
    said: list[str] = []
    adopter = asyncio.create_task(
        adopt_orphans(remote_runtime.client, [agent], said.append, every=0.5)
    )
    try:
        result = await asyncio.wait_for(query, 30)
        assert result.result == "from the former queue", result
        assert any(agent.definition_queue in line for line in said), said
    finally:
        adopter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await adopter
