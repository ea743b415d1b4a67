"""Determinism (replay of recorded histories) and secrets (never in history)."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from agent_lattice import LatticePlugin, ResultMessage, StreamEventMessage
from agent_lattice.testing import Script, error, slow, text, tool_use

from conftest import API_KEY, HISTORIES, keep_history, make_calculator


def replayer() -> Replayer:
    return Replayer(workflows=[], plugins=[LatticePlugin(agents=[])])


async def run_scenarios(make_agent, fake_anthropic, runtime) -> dict[str, WorkflowHistory]:
    histories = {}
    fake_anthropic.set_handler(
        Script(tool_use("calculator", {"expr": "2+2"}), text("4"), text("Still 4."))
    )
    agent = make_agent(name="replayed", tools=[make_calculator()])
    first = await agent.prompt("What is 2+2?")
    second = await agent.prompt("And again?", stream=False)
    histories["tool_loop"] = await keep_history(runtime, first.workflow_id, "tool_loop")
    histories["second_turn"] = await keep_history(runtime, second.workflow_id, "second_turn")

    fake_anthropic.set_handler(Script(slow(text("x " * 300), delay=0.05)))
    interrupted = None
    async for m in agent.query("Talk a lot"):
        if isinstance(m, StreamEventMessage) and m.event["type"] == "content_block_delta":
            agent.interrupt()
        if isinstance(m, ResultMessage):
            interrupted = m
    assert interrupted is not None and interrupted.subtype == "interrupted"
    histories["interrupt"] = await keep_history(runtime, interrupted.workflow_id, "interrupt")

    fake_anthropic.set_handler(Script(error(400, "bad request body")))
    failed = await agent.prompt("fail")
    assert failed.subtype == "error_during_execution"
    histories["api_error"] = await keep_history(runtime, failed.workflow_id, "api_error")
    return histories


async def test_fresh_histories_replay_and_hold_no_secret(
    make_agent, fake_anthropic, lattice_runtime
):
    histories = await run_scenarios(make_agent, fake_anthropic, lattice_runtime)
    for name, history in histories.items():
        await replayer().replay_workflow(history)
        raw = history.to_json()
        assert API_KEY not in raw, f"the API key leaked into the {name} history"
        assert "x-api-key" not in raw.lower()
    # the key did reach the provider: it lives in the worker, not in the workflow
    assert all(r.api_key == API_KEY for r in fake_anthropic.requests)


@pytest.mark.parametrize(
    "path",
    sorted(HISTORIES.rglob("*.json")),
    ids=lambda p: str(p.relative_to(HISTORIES).with_suffix("")),
)
async def test_committed_histories_replay(path):
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    await replayer().replay_workflow(history)
    assert API_KEY not in path.read_text()


def test_histories_are_committed():
    names = {p.stem for p in HISTORIES.glob("*.json")}
    assert {"tool_loop", "interrupt", "api_error", "crash_mid_tool", "crash_mid_stream"} <= names
