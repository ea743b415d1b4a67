"""Kill -9 the worker mid-stream and mid-tool: a new worker finishes the query, and no completed
model call or tool call runs again; a call waiting for approval, and a steer the run accepted,
outlive their worker."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from agent_lattice import (
    DEFAULT_COMPACTION_PROMPT,
    ResultMessage,
    StreamEventMessage,
    list_pending_approvals,
    steer,
)
from agent_lattice.testing import (
    RecordedRequest,
    Reply,
    assert_eventually,
    hang,
    message,
    slow,
    text,
    tool_use,
    tool_use_block,
)

from conftest import WorkerProcess, keep_history
from crash_app import (
    build_agent,
    build_approving_agent,
    build_audited_agent,
    build_compacting_agent,
    build_supervisor,
    build_team,
    build_thrifty_supervisor,
)

pytestmark = pytest.mark.slow  # real processes killed

HERE = Path(__file__).parent


@pytest.fixture
def effects(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "effects.log"
    path.touch()
    monkeypatch.setenv("LATTICE_TEST_EFFECTS", str(path))
    return path


async def kill_when(check, worker: WorkerProcess, workers, query) -> ResultMessage:
    """SIGKILL ``worker`` once ``check()`` holds, start a new worker, and return the result of
    ``query`` (which the new worker finishes)."""
    await assert_eventually(check, within=30)
    worker.kill()
    await workers()
    return await asyncio.wait_for(query, 60)


async def test_kill_mid_stream_retries_the_request_on_a_new_worker(
    remote_runtime, fake_anthropic, workers, effects
):
    answer = " ".join(f"t{i}" for i in range(40))
    answered: list[int] = []

    def model(request: RecordedRequest) -> Reply:
        if not request.tool_results:
            return tool_use("record", {"text": "A"})
        answered.append(request.index)
        # the first answer is killed while it streams; the retry on the new worker is quick
        return slow(text(answer), delay=0.1) if len(answered) == 1 else text(answer)

    fake_anthropic.set_handler(model)
    agent = build_agent(fake_anthropic.base_url)
    first = await workers()

    messages = []
    async for m in agent.query("Record A, then answer.", runtime=remote_runtime):
        messages.append(m)
        if (
            isinstance(m, StreamEventMessage)
            and m.turn == 2
            and m.attempt == 1
            and m.event["type"] == "content_block_delta"
            and first.proc.poll() is None
        ):
            first.kill()
            await workers()

    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.subtype == "success"
    assert result.result == answer and result.num_turns == 2
    # turn 1 (model call and tool) ran once; only the interrupted turn-2 request was repeated
    assert effects.read_text().splitlines() == ["record:A"]
    assert len(fake_anthropic.requests) == 3 and len(answered) == 2
    retried = [m for m in messages if isinstance(m, StreamEventMessage) and m.attempt > 1]
    assert retried and {m.turn for m in retried} == {2}
    history = await agent.get_history()
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant"]
    await keep_history(remote_runtime, result.workflow_id, "crash_mid_stream")


async def test_kill_mid_tool_reruns_only_the_unfinished_tool(
    remote_runtime, fake_anthropic, workers, effects
):
    def model(request: RecordedRequest) -> Reply:
        done = [r["content"] for r in request.tool_results]
        if not request.tool_results:
            return tool_use("record", {"text": "A"})
        return tool_use("block", {"text": "B"}) if done == ["recorded A"] else text("done")

    fake_anthropic.set_handler(model)
    agent = build_agent(fake_anthropic.base_url)
    first = await workers()

    query = asyncio.ensure_future(agent.prompt("Record A, then B.", runtime=remote_runtime))

    result = await kill_when(lambda: "block-start:B" in effects.read_text(), first, workers, query)

    assert result.subtype == "success" and result.result == "done"
    assert effects.read_text().splitlines() == [
        "record:A",  # completed before the kill: never run again
        "block-start:B",  # killed mid-run
        "block-start:B",  # retried on the new worker
        "block-done:B",
    ]
    assert len(fake_anthropic.requests) == 3  # no completed model call repeated
    await keep_history(remote_runtime, result.workflow_id, "crash_mid_tool")


async def test_kill_mid_tool_that_is_not_idempotent_tells_the_model_it_did_not_finish(
    remote_runtime, fake_anthropic, workers, effects
):
    """A tool not marked idempotent is never run twice: its worker dies mid-call, and the
    model gets an error result saying the call did not finish; the query goes on."""

    def model(request: RecordedRequest) -> Reply:
        if not request.tool_results:
            return tool_use("once", {"text": "C"})
        return text("noted")

    fake_anthropic.set_handler(model)
    agent = build_agent(fake_anthropic.base_url)
    first = await workers()
    query = asyncio.ensure_future(agent.prompt("Record C once.", runtime=remote_runtime))

    result = await kill_when(lambda: "once-start:C" in effects.read_text(), first, workers, query)

    assert result.subtype == "success" and result.result == "noted"
    assert effects.read_text().splitlines() == ["once-start:C"]  # never started again
    (answer,) = fake_anthropic.requests[-1].tool_results
    assert answer["is_error"] is True
    assert "Tool 'once' did not finish: its worker stopped responding" in str(answer["content"])
    assert len(fake_anthropic.requests) == 2


@pytest.mark.parametrize(
    ("name", "effect", "real"),
    [
        ("charge", "charge:D", "charged D"),
        ("charge_safely", "charge:D", "charged D"),
        ("tally", "record:D", "recorded D"),
    ],
    ids=["not-idempotent", "idempotent", "cheap"],
)
async def test_kill_after_a_tool_finished_answers_from_its_record(
    remote_runtime, fake_anthropic, workers, effects, name, effect, real, monkeypatch
):
    """The worker dies after the tool ran, while its on_tool_result hook (a slow audit log)
    still works: Temporal never heard the call finished. The call is answered with the tool's
    real result, recorded under its idempotency key, and the tool does not run again (before:
    a tool not marked idempotent told the model it "did not finish"; an idempotent one ran
    again, and so did a cheap one, a local activity)."""

    def model(request: RecordedRequest) -> Reply:
        if not request.tool_results:
            return tool_use(name, {"text": "D"})
        return text("noted")

    fake_anthropic.set_handler(model)
    monkeypatch.setenv("LATTICE_TEST_STICKY_S", "2")  # the killed worker's queue, not waited on
    agent = build_audited_agent(fake_anthropic.base_url)
    first = await workers()
    query = asyncio.ensure_future(agent.prompt("Do D once.", runtime=remote_runtime))

    # the hook runs after the result was recorded: kill the worker while it sleeps
    result = await kill_when(lambda: f"audit:{name}:" in effects.read_text(), first, workers, query)

    assert result.subtype == "success" and result.result == "noted"
    lines = effects.read_text().splitlines()
    assert lines.count(effect) == 1  # the tool ran once
    (answer,) = fake_anthropic.requests[-1].tool_results
    assert answer["content"] == real and not answer.get("is_error")
    assert lines.count(f"audit:{name}:{real}") == 2  # the recorded result passed the hook again
    assert len(fake_anthropic.requests) == 2


async def test_kill_mid_cheap_tool_that_is_not_idempotent_does_not_run_it_again(
    remote_runtime, fake_anthropic, workers, effects, monkeypatch
):
    """A cheap tool runs as a local activity, which a crash starts again from scratch on the
    next worker (it ran twice): a call that marked its start and left no result now tells
    the model it did not finish."""

    def model(request: RecordedRequest) -> Reply:
        if not request.tool_results:
            return tool_use("once_cheap", {"text": "E"})
        return text("noted")

    fake_anthropic.set_handler(model)
    monkeypatch.setenv("LATTICE_TEST_STICKY_S", "2")
    agent = build_audited_agent(fake_anthropic.base_url)
    first = await workers()
    query = asyncio.ensure_future(agent.prompt("Record E once.", runtime=remote_runtime))

    result = await kill_when(lambda: "once-start:E" in effects.read_text(), first, workers, query)

    assert result.subtype == "success" and result.result == "noted"
    ran = [line for line in effects.read_text().splitlines() if line.startswith("once-")]
    assert ran == ["once-start:E"]  # never started again
    (answer,) = fake_anthropic.requests[-1].tool_results
    assert answer["is_error"] is True
    assert "Tool 'once_cheap' did not finish: its worker stopped responding" in answer["content"]


async def test_kill_mid_compaction_neither_loses_history_nor_compacts_twice(
    remote_runtime, fake_anthropic, workers, effects
):
    summaries: list[int] = []

    def model(request: RecordedRequest) -> Reply:
        if DEFAULT_COMPACTION_PROMPT in (request.last_user_text or ""):
            summaries.append(request.index)
            # the first summary request is killed while it waits; the retry answers
            return hang(60) if len(summaries) == 1 else text("Summary: A was recorded.")
        if not request.tool_results:
            return tool_use("record", {"text": "A"}, usage={"input_tokens": 1000})
        return text("done")

    fake_anthropic.set_handler(model)
    agent = build_compacting_agent(fake_anthropic.base_url)
    first = await workers()
    query = asyncio.ensure_future(agent.prompt("Record A.", runtime=remote_runtime))

    result = await kill_when(lambda: len(summaries) == 1, first, workers, query)

    assert result.subtype == "success" and result.result == "done"
    assert effects.read_text().splitlines() == ["record:A"]  # the tool never ran again
    assert len(summaries) == 2  # the cut summary request was retried, once
    history = await agent.get_history()
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant"]
    assert "Summary: A was recorded." in history[0].blocks[0].text
    assert sum("Summary:" in b.text for m in history for b in m.blocks if b.type == "text") == 1
    assert history[2].content[0].content == "recorded A"  # the recent tool round is intact


async def test_kill_while_a_delegate_spends_keeps_the_budgets_books(
    remote_runtime, fake_anthropic, workers, effects
):
    """The supervisor's books (what its delegate reported spending) live in its workflow: a
    worker killed mid-delegation leaves the delegate stopping at the same budget."""
    turn = {"input_tokens": 1000, "output_tokens": 200}  # $0.006 at claude-sonnet-4-5 prices
    spender_turns: list[int] = []

    def model(request: RecordedRequest) -> Reply:
        if "You are thrifty." in (request.system or ""):
            if request.tool_results:
                return text("thrifty is done", usage=turn)
            return tool_use("spend", {"task": "Record notes until stopped."}, usage=turn)
        spender_turns.append(request.index)
        if len(spender_turns) == 4:  # the fourth request's call is cut off by the kill
            return tool_use("block", {"text": "B"}, usage=turn)
        return tool_use("record", {"text": str(len(spender_turns))}, usage=turn)

    fake_anthropic.set_handler(model)
    boss = build_thrifty_supervisor(fake_anthropic.base_url)
    first = await workers()
    query = asyncio.ensure_future(boss.prompt("Spend.", runtime=remote_runtime))

    result = await kill_when(lambda: "block-start:B" in effects.read_text(), first, workers, query)

    assert result.subtype == "error_max_budget", result.result
    assert set(result.cost_by_agent) == {"thrifty", "spender"}
    # $0.05 is reached with the ninth request (the spender's eighth): it asks no more, and
    # none of its requests before the kill was forgotten
    assert len(spender_turns) == 8
    assert result.total_cost_usd == pytest.approx(9 * 0.006)
    assert result.cost_by_agent["spender"] == pytest.approx(8 * 0.006)


async def test_kill_while_a_child_agent_runs_finishes_both(
    remote_runtime, fake_anthropic, workers, effects
):
    def model(request: RecordedRequest) -> Reply:
        done = [r["content"] for r in request.tool_results]
        if "You are boss." in (request.system or ""):
            return (
                tool_use("delegate", {"task": "record A then B"})
                if not done
                else text(f"boss got: {done[0]}")
            )
        if not done:
            return tool_use("record", {"text": "A"})
        return tool_use("block", {"text": "B"}) if done == ["recorded A"] else text("A and B")

    fake_anthropic.set_handler(model)
    boss = build_supervisor(fake_anthropic.base_url)
    first = await workers()
    query = asyncio.ensure_future(boss.prompt("Delegate.", runtime=remote_runtime))

    result = await kill_when(lambda: "block-start:B" in effects.read_text(), first, workers, query)

    assert result.subtype == "success" and result.result == "boss got: A and B"
    assert effects.read_text().splitlines() == [
        "record:A",  # the child's completed turn is not repeated
        "block-start:B",
        "block-start:B",  # the call cut by the kill runs again
        "block-done:B",
    ]
    child_requests = [r for r in fake_anthropic.requests if "subworker" in (r.system or "")]
    assert len(child_requests) == 3  # no child model call repeated
    assert set(result.usage_by_agent) == {"boss", "subworker"}


async def test_kill_mid_team_run_finishes_without_repeating_member_work(
    remote_runtime, fake_anthropic, workers, effects
):
    def model(request: RecordedRequest) -> Reply:
        system = request.system or ""
        done = [r["content"] for r in request.tool_results]
        if "You are chief." in system:
            if len(request.messages) == 1:
                return message(
                    [
                        tool_use_block("fast", {"mode": "handoff", "task": "record A"}),
                        tool_use_block("slow", {"mode": "handoff", "task": "block B"}),
                    ],
                    stop_reason="tool_use",
                )
            return text("crew finished")
        if "You are fast." in system:
            return tool_use("record", {"text": "A"}) if not done else text("A recorded")
        return tool_use("block", {"text": "B"}) if not done else text("B blocked")

    fake_anthropic.set_handler(model)
    team = build_team(fake_anthropic.base_url)
    team.lead.bind_runtime(remote_runtime)  # its mailbox too: the worker processes host it
    first = await workers()
    query = asyncio.ensure_future(team.prompt("Run the crew.", runtime=remote_runtime))

    async def fast_reported_slow_blocked() -> bool:
        # fast's work item completed and reported (its mailbox message is done), slow is inside
        # its tool: the kill lands between the two
        if "block-start:B" not in effects.read_text():
            return False
        return [m.status for m in await team.mailbox.inbox("crew::fast")] == ["done"]

    result = await kill_when(fast_reported_slow_blocked, first, workers, query)

    assert result.subtype == "success" and result.result == "crew finished"
    lines = effects.read_text().splitlines()
    assert lines.count("record:A") == 1  # the finished member's work never ran again
    assert lines.count("block-start:B") == 2 and lines.count("block-done:B") == 1
    fast_calls = [r for r in fake_anthropic.requests if "You are fast." in (r.system or "")]
    assert len(fast_calls) == 2
    assert set(result.usage_by_agent) == {"chief", "fast", "slow"}


async def lattice(*argv: str) -> tuple[int, str, str]:
    """``lattice ARGV`` in a process of its own (another machine, as far as it knows)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent_lattice.cli",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=os.environ.copy(),
    )
    out, err = await asyncio.wait_for(process.communicate(), 90)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_a_worker_killed_while_a_call_waits_loses_nothing(
    lattice_server, remote_runtime, fake_anthropic, workers, effects, monkeypatch
):
    monkeypatch.setenv("TEMPORAL_ADDRESS", lattice_server)
    monkeypatch.setenv("LATTICE_TEST_STICKY_S", "2")  # the dead worker's queue, soon given up

    def model(request: RecordedRequest) -> Reply:
        if not request.tool_results:
            return tool_use("pay", {"text": "invoice-7"})
        return text(f"done: {request.tool_results[0]['content']}")

    fake_anthropic.set_handler(model)
    first = await workers()
    agent = build_approving_agent(fake_anthropic.base_url).bind_runtime(remote_runtime)
    workflow_id = await agent.start("Pay invoice 7.")  # the starting side keeps nothing

    async def waiting():
        pending = await list_pending_approvals(workflow_id, runtime=remote_runtime)
        assert len(pending) == 1, pending
        return pending[0]

    pending = await assert_eventually(waiting, within=30)
    assert pending.tool_name == "pay" and pending.tool_input == {"text": "invoice-7"}
    first.kill()
    await workers()

    code, out, err = await lattice("approvals", "--json")
    assert code == 0, err
    listed = [json.loads(line) for line in out.splitlines()]
    assert pending.approval_id in [item["approval_id"] for item in listed]
    code, out, err = await lattice("approve", workflow_id, pending.approval_id)
    assert code == 0, err
    assert f"{pending.approval_id} of {workflow_id}: allowed" in out
    # a second decision is refused: already decided, or the run has ended meanwhile
    code, _, err = await lattice("deny", workflow_id, pending.approval_id, "-m", "late")
    assert code == 1 and err.startswith("error: ") and pending.approval_id in err

    messages = [m async for m in remote_runtime.durable_messages(workflow_id)]
    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.subtype == "success"
    assert result.result == "done: recorded invoice-7"
    assert effects.read_text().splitlines() == ["record:invoice-7"]


async def test_a_steer_accepted_before_its_worker_is_killed_reaches_the_next_request(
    remote_runtime, fake_anthropic, workers, effects, monkeypatch
):
    """The steer is workflow state from the moment the run accepted it: the next worker
    replays it, and the model gets it once, after the results of the batch it came during."""
    monkeypatch.setenv("LATTICE_TEST_STICKY_S", "2")  # the dead worker's queue, soon given up
    steered = "Also record C."

    def model(request: RecordedRequest) -> Reply:
        if not request.tool_results:
            return tool_use("block", {"text": "B"})
        return text(f"told: {request.last_user_text}")

    fake_anthropic.set_handler(model)
    first = await workers()
    agent = build_agent(fake_anthropic.base_url).bind_runtime(remote_runtime)
    workflow_id = await agent.start("Block B.")
    await assert_eventually(lambda: "block-start:B" in effects.read_text(), within=30)
    assert await steer(workflow_id, steered, runtime=remote_runtime) is True
    first.kill()
    await workers()

    messages = [m async for m in remote_runtime.durable_messages(workflow_id)]
    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.subtype == "success"
    assert result.result == f"told: {steered}" and result.num_turns == 2
    (_, second) = fake_anthropic.requests
    content = second.messages[-1]["content"]
    assert [(b["type"], b.get("content") or b.get("text")) for b in content] == [
        ("tool_result", "blocked B"),
        ("text", steered),
    ]
    # the block tool (idempotent) ran again on the new worker; the steer was taken once
    assert effects.read_text().splitlines() == ["block-start:B", "block-start:B", "block-done:B"]
    assert [m.message for m in messages if getattr(m, "subtype", None) == "steered"] == [steered]
