"""Parking: a run that waits idle (on the model, a tool, a human) leaves its worker's cache,
so it holds no worker memory while it waits, and goes on exactly as if it had stayed: nothing
runs again, nothing is lost from its stream."""

from __future__ import annotations

import asyncio
import math
import threading
from types import SimpleNamespace

import pytest
from temporalio.worker import StartLocalActivityInput

from agent_lattice import (
    AssistantMessage,
    ConfigurationError,
    ResultMessage,
    SystemMessage,
    UserMessage,
    tool,
)
from agent_lattice.client import Runtime
from agent_lattice.testing import (
    FAST_SETTINGS,
    Script,
    assert_eventually,
    text,
    tool_use,
)
from agent_lattice.worker import LatticePlugin
from agent_lattice.worker._park import cached_runs, park_after_seconds
from agent_lattice.worker._sdk_internals import CachedRun, fast_paths_on

from conftest import Expr

pytestmark = pytest.mark.skipif(
    not fast_paths_on(), reason="the run_parking fast path is off (LATTICE_SDK_FAST_PATHS=off)"
)


@pytest.fixture
async def parking_runtime(lattice_server, task_queue_prefix, monkeypatch):
    """A runtime whose inline workers park runs idle for 0.3 s."""
    monkeypatch.setenv("LATTICE_PARK_AFTER", "0.3")
    runtime = await Runtime.connect(lattice_server, settings=FAST_SETTINGS, inline_workers=True)
    yield runtime
    await runtime.close()


def cached_anywhere(runtime: Runtime) -> set[str]:
    return {run for worker, _ in runtime._workers.values() for run in cached_runs(worker)}


class Consumer:
    """Reads a query's messages as they come; ``run_id`` is its run's (from ``init``)."""

    def __init__(self, agent, prompt: str) -> None:
        self.messages: list[object] = []
        self.done = asyncio.ensure_future(self._read(agent.query(prompt)))

    async def _read(self, messages) -> None:
        async for message in messages:
            self.messages.append(message)

    async def run_id(self) -> str:
        def init() -> str:
            assert self.messages and isinstance(self.messages[0], SystemMessage)
            return self.messages[0].run_id

        return await assert_eventually(init, within=20)

    def result(self) -> ResultMessage:
        (result,) = [m for m in self.messages if isinstance(m, ResultMessage)]
        return result


async def test_a_run_waiting_on_a_tool_is_parked_and_goes_on_as_if_it_had_stayed(
    parking_runtime, make_agent, fake_anthropic
):
    calls: list[str] = []
    release = asyncio.Event()

    async def waits(input: Expr) -> str:
        calls.append(input.expr)
        await release.wait()
        return "released"

    fake_anthropic.set_handler(
        Script(tool_use("waits", {"expr": "x"}, text="I will wait."), text("done waiting"))
    )
    agent = make_agent(tools=[tool("waits", "Waits", Expr, waits)])
    agent.bind_runtime(parking_runtime)
    query = Consumer(agent, "Wait for it.")
    run_id = await query.run_id()
    await assert_eventually(lambda: calls == ["x"], within=20)
    # the run waits on its tool: its worker evicts it
    await assert_eventually(lambda: run_id not in cached_anywhere(parking_runtime), within=10)

    release.set()
    await asyncio.wait_for(query.done, 30)

    # rebuilt from its history, the run went on: one more model request, its tool run once
    assert calls == ["x"]
    assert len(fake_anthropic.requests) == 2
    assistants = [m for m in query.messages if isinstance(m, AssistantMessage)]
    assert [m.message.text for m in assistants] == ["I will wait.", "done waiting"]
    assert len([m for m in query.messages if isinstance(m, UserMessage)]) == 1
    assert query.result().subtype == "success" and query.result().result == "done waiting"


async def test_a_run_waiting_on_the_model_is_parked_and_its_reply_lands_once(
    parking_runtime, make_agent, fake_anthropic
):
    answer = threading.Event()

    def model(request):  # the fake's handler thread: the reply waits for the test
        answer.wait(30)
        return text("slow answer")

    fake_anthropic.set_handler(model)
    agent = make_agent()
    agent.bind_runtime(parking_runtime)
    query = Consumer(agent, "Think.")
    run_id = await query.run_id()
    await assert_eventually(lambda: run_id not in cached_anywhere(parking_runtime), within=10)
    assert not answer.is_set() and len(fake_anthropic.requests) == 1

    answer.set()
    await asyncio.wait_for(query.done, 30)
    assert query.result().result == "slow answer"
    assert len(fake_anthropic.requests) == 1
    assistants = [m for m in query.messages if isinstance(m, AssistantMessage)]
    assert [m.message.text for m in assistants] == ["slow answer"]


async def test_parking_off_keeps_a_waiting_run_cached(
    lattice_server, task_queue_prefix, monkeypatch, make_agent, fake_anthropic
):
    monkeypatch.setenv("LATTICE_PARK_AFTER", "off")
    runtime = await Runtime.connect(lattice_server, settings=FAST_SETTINGS, inline_workers=True)
    answer = threading.Event()
    try:
        fake_anthropic.set_handler(lambda request: answer.wait(30) and text("slow answer"))
        agent = make_agent()
        agent.bind_runtime(runtime)
        query = Consumer(agent, "Think.")
        run_id = await query.run_id()
        await asyncio.sleep(1.0)
        assert run_id in cached_anywhere(runtime)
        answer.set()
        await asyncio.wait_for(query.done, 30)
        assert query.result().result == "slow answer"
    finally:
        answer.set()
        await runtime.close()


def test_the_idle_time_is_checked_where_it_is_given(monkeypatch):
    monkeypatch.delenv("LATTICE_PARK_AFTER", raising=False)
    assert park_after_seconds(None) == 10.0
    assert park_after_seconds(2.5) == 2.5
    assert LatticePlugin(park_after=math.inf).park_after == math.inf
    with pytest.raises(ConfigurationError, match="park_after"):
        LatticePlugin(park_after=-1)
    monkeypatch.setenv("LATTICE_PARK_AFTER", "never")
    assert park_after_seconds(None) == math.inf
    monkeypatch.setenv("LATTICE_PARK_AFTER", "soon")
    with pytest.raises(ConfigurationError, match="LATTICE_PARK_AFTER='soon'"):
        park_after_seconds(None)


def test_a_run_with_a_pending_local_activity_is_not_parked():
    """An eviction cancels a run's local activities, which then run again on its replay."""

    def instance(*inputs: object) -> CachedRun:
        made = CachedRun.__new__(CachedRun)
        pending = {i: SimpleNamespace(_input=v) for i, v in enumerate(inputs)}
        made.globals_and_locals = {
            "__temporal_in_sandbox": SimpleNamespace(
                instance=SimpleNamespace(_pending_activities=pending)
            )
        }
        made.idle_since, made.busy, made.parked = 0.0, False, False
        made._parking = threading.Lock()
        return made

    local = object.__new__(StartLocalActivityInput)
    regular = SimpleNamespace()  # a StartActivityInput, as far as parking looks
    assert instance(regular).parkable(cutoff=1.0)
    assert not instance(regular, local).parkable(cutoff=1.0)
    assert not instance(regular).parkable(cutoff=-1.0)  # active since the cutoff


def test_a_task_that_races_its_runs_parking_starts_no_local_activity(monkeypatch):
    """A task reaching the worker's core just before the run's eviction: the core evicts the
    run once the task's activation completes, cancelling the local activities it started
    (they would run again on the replay). Such an activation fails its task instead, which
    the server retries on the replayed run; one that starts none completes as usual."""
    from temporalio.bridge.proto.workflow_activation import WorkflowActivation
    from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion

    commands: list[str] = []

    def stepped(self, act):
        done = WorkflowActivationCompletion(run_id=act.run_id)
        for command in commands:
            getattr(done.successful.commands.add(), command).SetInParent()
        return done

    monkeypatch.setattr(CachedRun.__bases__[0], "activate", stepped)  # the SDK's instance
    made = CachedRun.__new__(CachedRun)
    made.idle_since, made.busy, made.parked = 0.0, False, True
    made._parking = threading.Lock()
    made.globals_and_locals, made.noticed, made.notice = {}, None, None
    task = WorkflowActivation(run_id="r")
    task.jobs.add().signal_workflow.signal_name = "mail"
    eviction = WorkflowActivation(run_id="r")
    eviction.jobs.add().remove_from_cache.message = "parked"
    update = WorkflowActivation(run_id="r")
    update.jobs.add().do_update.name = "resolve_approval"

    commands[:] = ["schedule_activity"]
    assert made.activate(task).HasField("successful")
    commands[:] = ["schedule_activity", "schedule_local_activity"]
    assert "parked" in made.activate(task).failed.failure.message
    assert made.activate(eviction).HasField("successful")
    assert made.activate(update).HasField("successful")  # the server would reject it
    made.parked = False  # not parked: as the workflow decided
    assert made.activate(task).HasField("successful")
    assert not made.busy and made.idle_since > 0
