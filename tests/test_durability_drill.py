"""The durability drill (``agent_lattice.testing.crash_drill`` and its pytest fixture) on the
real dev server: a ``lattice worker`` SIGKILLed at each kill point, a second one finishing the
run, and a report of how often each tool ran; a drill that cannot happen says why."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from temporalio.client import WorkflowExecutionStatus

import agent_lattice.testing as lattice_testing
from agent_lattice import Agent, ConfigurationError, OptionError
from agent_lattice.client import Runtime
from agent_lattice.testing import DrillError, Script, assert_eventually, text, tool_use
from agent_lattice.worker._pollers import queue_served
from agent_lattice.worker._worker import resolve_agent

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = str(ROOT / "examples" / "durability_drill.py")
APP = str(Path(__file__).resolve().parent / "drill_app.py")
PROMPT = "Order 42 arrived broken: please refund it."
ANSWER = "Done: refunded 120 EUR for order 42. Sorry about the teapot!"
ONCE = {"find_order": 1, "refund": 1}


@pytest.fixture(autouse=True)
def fake_model_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example app's workers answer with its scripted model, never a real one."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


def what(event: dict) -> tuple[str, object]:
    return event["event"], event.get("tool") or event.get("turn") or event.get("point")


@pytest.mark.slow  # two worker processes and a heartbeat timeout per drill: about 15 s each
@pytest.mark.parametrize(
    ("kill", "killed_worker_did", "starts", "requests"),
    [
        (
            "mid_tool:find_order",
            [("model_request", 1), ("tool_start", "find_order")],
            {"find_order": 2, "refund": 1},  # the cut-off call runs again: it is idempotent
            3,
        ),
        (
            "after_tool:refund",
            [
                ("model_request", 1),
                ("tool_start", "find_order"),
                ("tool_done", "find_order"),
                ("model_request", 2),
                ("tool_start", "refund"),
                ("tool_done", "refund"),  # the refund ran here, and never again
            ],
            ONCE,
            3,
        ),
        ("mid_stream", [("model_request", 1)], ONCE, 4),  # the cut-off request is asked again
        (
            "between_turns",
            [("model_request", 1), ("tool_start", "find_order"), ("tool_done", "find_order")],
            ONCE,
            3,  # killed before the second request was sent
        ),
    ],
    ids=["mid_tool", "after_tool", "mid_stream", "between_turns"],
)
async def test_a_worker_killed_at_each_point_leaves_every_tool_run_once(
    crash_drill, kill, killed_worker_did, starts, requests
):
    report = await crash_drill(EXAMPLE, "support", PROMPT, kill=kill)

    assert report.result.subtype == "success" and report.result.result == ANSWER
    assert report.tool_runs == ONCE
    assert report.tool_starts == starts
    assert report.model_requests == requests
    assert report.kill == kill and report.workflow_id == report.result.workflow_id
    # the kill landed where it was asked: what the killed worker did, then its death
    (killed,) = [e for e in report.events if e["event"] == "kill"]
    assert killed["point"] == kill
    first = [what(e) for e in report.events if e["pid"] == killed["pid"]]
    assert first == [*killed_worker_did, ("kill", kill)]
    # and another process finished the run
    finisher = {e["pid"] for e in report.events} - {killed["pid"]}
    assert len(finisher) == 1


async def test_a_kill_point_the_run_never_reaches_is_a_drill_error(crash_drill, fake_anthropic):
    fake_anthropic.set_handler(Script(text("hello")))
    with pytest.raises(DrillError) as raised:
        await crash_drill(
            APP,
            "greeter",
            "Say hello.",
            kill="between_turns",
            env={"LATTICE_TEST_BASE_URL": fake_anthropic.base_url},
        )
    assert str(raised.value) == (
        "the run ended (success) without reaching kill=between_turns: the worker noted "
        "model_request turn 1"
    )


async def test_a_worker_that_dies_on_its_own_is_a_drill_error_and_its_run_is_ended(
    crash_drill, fake_anthropic, lattice_server
):
    fake_anthropic.set_handler(Script(tool_use("quit", {}), text("unreachable")))
    with pytest.raises(DrillError) as raised:
        await crash_drill(
            APP,
            "quitter",
            "Quit.",
            kill="after_tool:quit",
            env={"LATTICE_TEST_BASE_URL": fake_anthropic.base_url},
        )
    message = str(raised.value)
    assert message.startswith(
        "the drill's first worker exited with code 3 before kill=after_tool:quit; it noted "
        "model_request turn 1; tool_start quit\nthe first worker said:\n"
    )
    assert "serving 3 agents" in message  # the worker's own output, for the cause
    # the run the drill started is not left for a later worker of the app
    runtime = await Runtime.connect(lattice_server, inline_workers=False)
    try:

        async def ended() -> None:
            runs = runtime.client.list_workflows('LatticeAgent = "quitter"')
            assert [e.status async for e in runs] == [WorkflowExecutionStatus.TERMINATED]

        await assert_eventually(ended, within=20)
    finally:
        await runtime.close()


async def test_a_drill_refuses_a_task_queue_another_worker_serves(crash_drill, lattice_server):
    greeter = resolve_agent(f"{APP}:greeter")
    assert isinstance(greeter, Agent)
    worker = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "agent_lattice.cli", "worker", APP, "--address", lattice_server],
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    runtime = await Runtime.connect(lattice_server, inline_workers=False)
    try:
        await assert_eventually(lambda: queue_served(runtime.client, greeter.task_queue), within=60)
        with pytest.raises(DrillError, match=r"a worker already serves task queue '.*greeter"):
            await crash_drill(APP, "greeter", "Say hello.", kill="mid_stream")
    finally:
        await runtime.close()
        worker.terminate()
        await asyncio.wait_for(worker.wait(), 20)


@pytest.mark.parametrize(
    ("agent", "kill", "error", "message"),
    [
        ("quitter", "sideways", OptionError, "kill='sideways' is not a kill point: mid_tool:NAME"),
        ("quitter", "mid_tool", OptionError, "mid_tool names its tool, as mid_tool:NAME"),
        ("quitter", "mid_stream:quit", OptionError, "mid_stream takes no tool name"),
        ("quitter", "after_tool:charge", OptionError, "has no tool 'charge'.*its tools: quit"),
        ("nobody", "mid_stream", ConfigurationError, "has no agent named 'nobody'"),
        ("crew", "mid_stream", OptionError, "is a team: crash_drill runs one agent"),
    ],
)
async def test_a_drill_that_cannot_be_set_up_says_why_before_any_worker_starts(
    agent, kill, error, message
):
    # an address where no server listens: each mistake is found before anything connects
    with pytest.raises(error, match=message):
        await lattice_testing.crash_drill(APP, agent, "x", kill=kill, address="127.0.0.1:9")
