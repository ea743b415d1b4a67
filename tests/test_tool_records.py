"""A tool call's result is recorded under its idempotency key as soon as its handler returns:
a server outage longer than the call's heartbeat timeout (Temporal times the attempt out and
refuses its late completion) is answered from that record, the tool run once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_server_restart import ROOT, Lattice, effects, env, home, kill, procs  # noqa: F401

from agent_lattice import tool
from agent_lattice.client import DevServer, Runtime
from agent_lattice.testing import FAST_SETTINGS, Script, assert_eventually, text, tool_use

from conftest import Expr

pytestmark = pytest.mark.slow  # a server killed and restarted

# A script whose tool calls heartbeat every 1.5 s (a 3 s timeout): the 10 s outage below
# outlasts it, as 30 s outages outlast the default 20 s.
SCRIPT = """
import asyncio, outage_app
from agent_lattice.client import Runtime
from agent_lattice.testing import FAST_SETTINGS

async def main():
    settings = FAST_SETTINGS.model_copy(update={"tool_heartbeat_s": 3.0})
    runtime = await Runtime.connect(settings=settings)
    print("result:", (await outage_app.agent.prompt("note z", runtime=runtime)).result)

asyncio.run(main())
"""
OUTAGE_S = 10.0


@pytest.mark.slow
async def test_a_tool_that_finished_during_a_long_outage_keeps_its_result(
    home: Path,  # noqa: F811
    env: dict[str, str],  # noqa: F811
    procs: list[Lattice],  # noqa: F811
    tmp_path: Path,
) -> None:
    server, _ = await asyncio.to_thread(DevServer.ensure, home, port=0, ui=False)
    release = tmp_path / "release"
    script_env = {
        **env,
        "TEMPORAL_ADDRESS": server.address,
        "PYTHONPATH": str(ROOT / "tests"),
        "LATTICE_TEST_TOOL_S": "30",
        "LATTICE_TEST_RELEASE": str(release),
    }
    procs.append(script := Lattice("script", [SCRIPT], script_env, tmp_path, script=True))
    await assert_eventually(lambda: "start:z" in effects(env), within=30)
    kill(server)
    release.touch()  # the tool ends while the server is gone, its attempt soon timed out
    await assert_eventually(lambda: "done:z" in effects(env), within=5)
    await asyncio.sleep(OUTAGE_S)
    back, started = await asyncio.to_thread(DevServer.ensure, home, ui=False)
    assert started and back.address == server.address

    assert await asyncio.to_thread(script.finish, 60) == 0, script
    # before: "done: Tool 'slow_note' did not finish: its worker stopped responding …"
    assert script.out == "result: done: noted z\n", script
    assert effects(env) == ["start:z", "done:z"]  # it ran once


@pytest.mark.slow
async def test_a_cheap_tool_that_finished_during_an_outage_keeps_its_result(
    home: Path,  # noqa: F811
    make_agent,
    fake_anthropic,
) -> None:
    """A cheap tool (a local activity, reported to its own worker, not to the server) that
    finishes while the server is away: its result reaches the model once the server is back
    (its outcome was held for the server past its 2 s timeout, twice, and the model heard it
    did not finish)."""
    server, _ = await asyncio.to_thread(DevServer.ensure, home, port=0, ui=False)
    runtime = await Runtime.connect(address=server.address, settings=FAST_SETTINGS)
    started, release, calls = asyncio.Event(), asyncio.Event(), []

    async def note(input: Expr) -> str:
        started.set()
        await release.wait()
        calls.append(input.expr)
        return f"noted {input.expr}"

    fake_anthropic.set_handler(Script(tool_use("note", {"expr": "x"}), text("done")))
    agent = make_agent(tools=[tool("note", "Note", Expr, note, cheap=True, timeout_s=2)])
    try:
        query = asyncio.ensure_future(agent.prompt("Note x.", runtime=runtime))
        await asyncio.wait_for(started.wait(), 30)
        await asyncio.to_thread(kill, server)
        release.set()
        await asyncio.sleep(6)  # past two attempts' timeouts and the retry between them
        back, restarted = await asyncio.to_thread(DevServer.ensure, home, ui=False)
        assert restarted and back.address == server.address
        result = await asyncio.wait_for(query, 60)

        assert result.subtype == "success" and result.result == "done"
        (answer,) = fake_anthropic.requests[-1].tool_results
        assert answer["content"] == "noted x" and not answer.get("is_error")
        assert calls == ["x"]
    finally:
        await runtime.close()
