"""The one seam with temporalio's internals: its fast paths are on only for the temporalio
they were written for and when ``LATTICE_SDK_FAST_PATHS`` is not ``off``; without them a
query runs on the SDK's public API alone, with the same outcome. (CI runs the durability,
crash, streaming and replay tests a second time with them off.)"""

from __future__ import annotations

import logging

import pytest
import temporalio
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from agent_lattice import ConfigurationError
from agent_lattice.client import Runtime
from agent_lattice.testing import FAST_SETTINGS, Script, text, tool_use
from agent_lattice.worker import _sdk_internals as sdk

from conftest import make_calculator, note_rpcs


def test_another_temporalio_turns_every_fast_path_off_with_one_warning(monkeypatch, caplog):
    monkeypatch.delenv("LATTICE_SDK_FAST_PATHS", raising=False)
    monkeypatch.setattr(sdk, "_warned", [])
    assert sdk.fast_paths_on() is (temporalio.__version__.startswith(sdk.WRITTEN_FOR + "."))
    monkeypatch.setattr(temporalio, "__version__", "1.36.0")
    with caplog.at_level(logging.WARNING, logger="agent_lattice.worker"):
        assert sdk.fast_paths_on() is False
        assert sdk.fast_paths_on() is False
        runner = sdk.sandbox_runner(SandboxRestrictions.default)
    said = [r.getMessage() for r in caplog.records if "1.36.0" in r.getMessage()]
    assert len(said) == 1, said
    assert all(name in said[0] for name in sdk.FAST_PATHS) and sdk.WRITTEN_FOR in said[0]
    assert type(runner) is SandboxedWorkflowRunner  # the SDK's own sandbox, untouched


def test_lattice_sdk_fast_paths_is_on_or_off(monkeypatch):
    for value, on in [("off", False), ("0", False), ("on", True), ("", True)]:
        monkeypatch.setenv("LATTICE_SDK_FAST_PATHS", value)
        assert sdk.fast_paths_on() is (on and temporalio.__version__.startswith(sdk.WRITTEN_FOR))
    monkeypatch.setenv("LATTICE_SDK_FAST_PATHS", "fast")
    with pytest.raises(ConfigurationError, match="LATTICE_SDK_FAST_PATHS='fast'"):
        sdk.fast_paths_on()


async def test_with_the_fast_paths_off_a_streamed_query_runs_on_the_public_api(
    lattice_server, make_agent, fake_anthropic, monkeypatch
):
    monkeypatch.setenv("LATTICE_SDK_FAST_PATHS", "off")
    monkeypatch.setenv("LATTICE_PARK_AFTER", "0.1")
    runtime = await Runtime.connect(lattice_server, settings=FAST_SETTINGS, inline_workers=True)
    try:
        fake_anthropic.set_handler(Script(tool_use("calculator", {"expr": "2+3"}), text("5")))
        agent = make_agent(name="public_api", tools=[make_calculator()])
        service = runtime.client.workflow_service
        reads = note_rpcs(monkeypatch, service, "query_workflow")
        messages = [m async for m in agent.query("Add 2 and 3.", runtime=runtime)]

        assert [m.type for m in messages if m.type != "stream_event"] == [
            "system",
            "assistant",
            "user",
            "assistant",
            "result",
        ]
        assert messages[-1].result == "5"
        assert any(m.type == "stream_event" for m in messages)  # live tokens still flow
        # no commit notices: the reader asked the run's stream for what each task published
        # (with them on, it asks nothing: the worker told it)
        assert [name for name, _ in reads if name == "query_workflow"]
        workers = [worker for worker, _ in runtime._workers.values()]
        assert workers and all(sdk.cached_runs(w) is None for w in workers)  # none parked
        assert all(sdk.tell_when_taken(w, lambda *_: None) is None for w in workers)
    finally:
        await runtime.close()
