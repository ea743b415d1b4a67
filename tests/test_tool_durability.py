"""Tools run once: a sync handler runs off the event loop and heartbeats; a call cut off by its
timeout is retried once only when the tool is idempotent, else the model hears it did not
finish; each call has an idempotency key that is the same on its retry."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

from agent_lattice import OptionError, ToolContext, ToolResult, tool
from agent_lattice.client import Runtime
from agent_lattice.testing import (
    FAST_SETTINGS,
    Script,
    assert_eventually,
    hang,
    message,
    text,
    tool_use,
    tool_use_block,
)

from conftest import Expr


@pytest.fixture
def short_heartbeats(lattice_runtime):
    """A 2 s tool heartbeat timeout: a handler that keeps the event loop busy longer than that
    would have its call timed out and run again."""
    lattice_runtime.settings = FAST_SETTINGS.model_copy(update={"tool_heartbeat_s": 2.0})
    return lattice_runtime


async def test_a_blocking_sync_tool_runs_once_and_the_query_ends(
    make_agent, fake_anthropic, short_heartbeats
):
    calls: list[str] = []

    def slow_sync(input: Expr) -> str:
        calls.append(input.expr)
        time.sleep(5)  # blocks its thread 2.5 heartbeat timeouts long
        return "done slowly"

    fake_anthropic.set_handler(Script(tool_use("slow_sync", {"expr": "x"}), text("finished")))
    agent = make_agent(tools=[tool("slow_sync", "Blocks", Expr, slow_sync)])
    result = await asyncio.wait_for(agent.prompt("Run it."), 30)

    assert result.subtype == "success" and result.result == "finished"
    assert calls == ["x"]
    (answer,) = fake_anthropic.requests[-1].tool_results
    assert answer["content"] == "done slowly" and not answer.get("is_error")


async def test_a_blocking_sync_hook_and_permission_callback_do_not_cut_the_call_off(
    make_agent, fake_anthropic, short_heartbeats
):
    calls: list[str] = []

    def allow_slowly(request) -> dict[str, str]:
        time.sleep(3)  # a human deciding
        return {"behavior": "allow"}

    def reword_slowly(ctx):
        time.sleep(3)
        return {"content": f"checked: {ctx.result.content}"}

    fake_anthropic.set_handler(Script(tool_use("calc", {"expr": "x"}), text("ok")))
    agent = make_agent(
        tools=[tool("calc", "Calc", Expr, lambda i: calls.append(i.expr) or "42")],
        permission=allow_slowly,
        hooks={"on_tool_result": reword_slowly},
    )
    result = await asyncio.wait_for(agent.prompt("Go."), 30)

    assert result.subtype == "success" and calls == ["x"]
    (answer,) = fake_anthropic.requests[-1].tool_results
    assert answer["content"] == "checked: 42" and not answer.get("is_error")


async def test_while_a_sync_tool_blocks_other_queries_and_interrupts_get_through(
    make_agent, fake_anthropic, short_heartbeats
):
    started, release = threading.Event(), threading.Event()

    def waits(input: Expr) -> str:
        started.set()
        release.wait(30)
        return "released"

    def model(request):
        system = request.system or ""
        if "You are blocker." in system:
            return (
                text("blocker done") if request.tool_results else tool_use("waits", {"expr": "x"})
            )
        if "You are hanger." in system:
            return hang(60)
        return text("quick answer")

    fake_anthropic.set_handler(model)
    blocker = make_agent(
        name="blocker",
        system_prompt="You are blocker.",
        tools=[tool("waits", "Waits", Expr, waits)],
    )
    quick = make_agent(name="quick", system_prompt="You are quick.")
    hanger = make_agent(name="hanger", system_prompt="You are hanger.")

    blocked = asyncio.ensure_future(blocker.prompt("Wait."))
    await asyncio.wait_for(asyncio.to_thread(started.wait, 20), 25)
    try:
        # the handler holds its thread; this process's event loop serves everything else
        answer = await asyncio.wait_for(quick.prompt("Quick?"), 10)
        assert answer.result == "quick answer"

        hanging = asyncio.ensure_future(hanger.prompt("Hang."))
        await assert_eventually(
            lambda: any("You are hanger." in (r.system or "") for r in fake_anthropic.requests)
        )
        assert hanger.interrupt() is True
        interrupted = await asyncio.wait_for(hanging, 10)
        assert interrupted.subtype == "interrupted"
        assert not blocked.done()  # all of that happened while the tool still blocked
    finally:
        release.set()
    result = await asyncio.wait_for(blocked, 30)
    assert result.subtype == "success" and result.result == "blocker done"


async def test_an_abort_waits_for_a_started_sync_handler_to_settle(
    make_agent, fake_anthropic, short_heartbeats
):
    started, events = threading.Event(), []

    def slow(input: Expr) -> str:
        started.set()
        time.sleep(4)  # the cancellation reaches the worker with a heartbeat, within 1 s
        events.append("end")
        return "finished"

    fake_anthropic.set_handler(Script(tool_use("slow", {"expr": "x"}), text("unused")))
    agent = make_agent(tools=[tool("slow", "Slow", Expr, slow)])
    query = asyncio.ensure_future(agent.prompt("Go."))
    await asyncio.wait_for(asyncio.to_thread(started.wait, 20), 25)
    query.cancel()  # the caller cancels: the run is aborted, its tool call cancelled
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(query, 30)

    assert events == ["end"]  # the run ended only once the handler's thread had
    history = await agent.get_history()
    assert "was cancelled: the query was aborted" in history[-1].content[0].content


@pytest.mark.parametrize("cheap", [False, True], ids=["activity", "local-activity"])
async def test_a_tool_past_its_timeout_runs_once_and_the_model_hears_it_did_not_finish(
    make_agent, fake_anthropic, cheap
):
    calls: list[str] = []

    async def too_slow(input: Expr) -> str:
        calls.append(input.expr)
        await asyncio.sleep(3)
        return "too late"

    fake_anthropic.set_handler(Script(tool_use("too_slow", {"expr": "x"}), text("moving on")))
    agent = make_agent(tools=[tool("too_slow", "Slow", Expr, too_slow, timeout_s=1, cheap=cheap)])
    result = await asyncio.wait_for(agent.prompt("Try it."), 30)

    assert result.subtype == "success" and result.result == "moving on"
    (answer,) = fake_anthropic.requests[-1].tool_results
    assert answer["is_error"] is True
    assert "Tool 'too_slow' did not finish: it ran past its 1 s timeout" in answer["content"]
    await asyncio.sleep(1.5)  # a retry would have started by now
    assert calls == ["x"]


async def test_an_idempotent_tool_is_retried_once_with_the_same_idempotency_key(
    make_agent, fake_anthropic
):
    seen: list[tuple[str, str | None, int]] = []

    def flaky(input: Expr, ctx: ToolContext) -> str:
        seen.append((ctx.idempotency_key, ctx.workflow_id, ctx.attempt))
        if ctx.attempt == 1:
            time.sleep(3)  # cut off by the 1 s timeout
        return f"stored under {ctx.idempotency_key}"

    fake_anthropic.set_handler(
        Script(tool_use("store", {"expr": "x"}, id="toolu_store_1"), text("stored"))
    )
    agent = make_agent(tools=[tool("store", "Store", Expr, flaky, idempotent=True, timeout_s=1)])
    result = await asyncio.wait_for(agent.prompt("Store it."), 30)

    assert result.subtype == "success" and result.result == "stored"
    key = f"{result.workflow_id}/toolu_store_1"
    assert seen == [(key, result.workflow_id, 1), (key, result.workflow_id, 2)]
    (answer,) = fake_anthropic.requests[-1].tool_results
    assert answer["content"] == f"stored under {key}"


async def test_an_idempotent_tool_that_never_finishes_gets_two_attempts(make_agent, fake_anthropic):
    calls: list[int] = []

    async def stuck(input: Expr, ctx: ToolContext) -> str:
        calls.append(ctx.attempt)
        await asyncio.sleep(3)
        return "too late"

    fake_anthropic.set_handler(Script(tool_use("stuck", {"expr": "x"}), text("gave up")))
    agent = make_agent(tools=[tool("stuck", "Stuck", Expr, stuck, idempotent=True, timeout_s=1)])
    result = await asyncio.wait_for(agent.prompt("Try."), 30)

    assert result.subtype == "success" and result.result == "gave up"
    (answer,) = fake_anthropic.requests[-1].tool_results
    assert answer["is_error"] is True and "(tried twice)" in answer["content"]
    await asyncio.sleep(1.5)
    assert calls == [1, 2]


@pytest.mark.parametrize(
    ("options", "wrong"),
    [
        ({"timeout_s": 0}, "timeout_s must be a positive number of seconds; got 0"),
        ({"timeout_s": "5"}, "timeout_s must be a positive number of seconds; got '5'"),
        ({"idempotent": "yes"}, "idempotent must be True or False; got 'yes'"),
    ],
)
def test_tool_durability_options_are_checked_at_assembly(options, wrong):
    with pytest.raises(OptionError, match=wrong):
        tool("t", "T", Expr, lambda _input: "x", **options)


@pytest.mark.parametrize("idempotent", [False, True], ids=["once", "idempotent"])
async def test_a_call_that_fails_after_its_handler_ran_is_not_reported_as_never_run(
    make_agent, fake_anthropic, idempotent
):
    """The handler ran (its side effect happened), then its result could not be stored: a
    lone surrogate, as a file name decoded with surrogateescape has, cannot be encoded. The
    model must not hear the tool "could not run", which invites it to call it again."""
    calls: list[int] = []

    def listing(input: Expr, ctx: ToolContext) -> str:
        calls.append(ctx.attempt)
        return "report.txt\n" * 1000 + "caf\udce9.txt"  # large: stored by reference

    fake_anthropic.set_handler(Script(tool_use("listing", {"expr": "x"}), text("noted")))
    agent = make_agent(tools=[tool("listing", "Lists", Expr, listing, idempotent=idempotent)])
    result = await asyncio.wait_for(agent.prompt("List."), 30)

    assert result.subtype == "success" and result.result == "noted"
    assert calls == ([1, 2] if idempotent else [1])
    (answer,) = fake_anthropic.requests[-1].tool_results
    assert answer["is_error"] is True
    assert "could not run" not in answer["content"]
    assert answer["content"].startswith("Tool 'listing' did not finish: it failed outside its")
    assert "surrogates not allowed" in answer["content"]
    assert "Whether it took effect is unknown" in answer["content"]


async def test_a_sync_call_given_up_while_it_waited_for_a_thread_never_runs(
    make_agent, fake_anthropic, lattice_server
):
    """All tool threads are busy (here: one thread, held by ``hold``); ``late`` waits for one
    past its 1 s timeout and the model hears it did not finish. It must not run once a
    thread frees up (it did: after its call had ended, and an idempotent one a third time)."""
    runtime = await Runtime.connect(
        lattice_server, settings=FAST_SETTINGS, inline_workers=True, tool_threads=1
    )
    held: list[str] = []
    late: list[str] = []

    def hold(input: Expr) -> str:
        time.sleep(3)
        held.append(input.expr)
        return "held"

    together = {"is_concurrency_safe": lambda _input: True}
    fake_anthropic.set_handler(
        Script(
            message(
                [tool_use_block("hold", {"expr": "x"}), tool_use_block("late", {"expr": "y"})],
                stop_reason="tool_use",
            ),
            text("ok"),
        )
    )
    agent = make_agent(
        tools=[
            tool("hold", "Holds the thread", Expr, hold, **together),
            tool(
                "late",
                "Waits",
                Expr,
                lambda i: late.append(i.expr) or "ran",
                timeout_s=1,
                **together,
            ),
        ],
    )
    try:
        result = await asyncio.wait_for(agent.prompt("Go.", runtime=runtime), 30)
        assert result.subtype == "success" and held == ["x"]
        await asyncio.sleep(0.5)  # the thread is free: a queued call would have run by now
        assert late == []
        answer = fake_anthropic.requests[-1].tool_results[1]
        assert answer["is_error"] is True and "ran past its 1 s timeout" in answer["content"]
    finally:
        await runtime.close()


@pytest.mark.parametrize("cheap", [False, True], ids=["activity", "local-activity"])
async def test_two_calls_with_one_tool_use_id_each_run(make_agent, fake_anthropic, cheap):
    """Some Anthropic-compatible providers number their tool_use ids (Kimi's
    ``functions.name:0``), so after a compaction one id comes back in the same query: each
    call runs and is answered with its own result, never the earlier call's record."""
    calls: list[str] = []

    def note(input: Expr) -> str:
        calls.append(input.expr)
        return f"noted {input.expr}"

    fake_anthropic.set_handler(
        Script(
            tool_use("note", {"expr": "a"}, id="functions.note:0"),
            tool_use("note", {"expr": "b"}, id="functions.note:0"),
            text("done"),
        )
    )
    agent = make_agent(tools=[tool("note", "Note", Expr, note, cheap=cheap)])
    result = await asyncio.wait_for(agent.prompt("Note a, then b."), 30)

    assert result.subtype == "success" and calls == ["a", "b"]
    (answer,) = fake_anthropic.requests[-1].tool_results
    assert answer["content"] == "noted b"


async def test_a_result_with_an_unserializable_side_value_reaches_the_model(
    make_agent, fake_anthropic
):
    """``structured_result`` travels only with ``end_turn``: a handler that sets it anyway to
    something JSON cannot hold still ran, and the model hears its result (the call's record
    failed on it, and the model heard the call did not finish)."""

    class Receipt:  # no JSON form
        pass

    def charge(input: Expr) -> ToolResult:
        return ToolResult(content=f"charged {input.expr}", structured_result=Receipt())

    fake_anthropic.set_handler(Script(tool_use("charge", {"expr": "5"}), text("paid")))
    agent = make_agent(tools=[tool("charge", "Charge", Expr, charge)])
    result = await asyncio.wait_for(agent.prompt("Charge 5."), 30)

    assert result.subtype == "success" and result.result == "paid"
    (answer,) = fake_anthropic.requests[-1].tool_results
    assert answer["content"] == "charged 5" and not answer.get("is_error")
