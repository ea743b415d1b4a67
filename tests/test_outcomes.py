"""Outcomes Temporal sees: an error result ends its workflow Failed (the typed result in the
failure's details: every caller still gets it, the session goes on from it); a Temporal cancel
request is the interrupt (``interrupted``, completed turns kept, outcome, tokens and cost
upserted) and the workflow ends Canceled, a delegate's and a team's too; a closed run leaves
no pending activity behind. Each on the real dev server."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ApplicationError, CancelledError
from test_approval import approval_request, refund_tool
from test_finding_runs import temporal
from test_history_safety import replayer

from agent_lattice import ResultMessage, ToolResult, agent_tool, create_team, team_member, tool
from agent_lattice.client._follow import published
from agent_lattice.testing import Script, assert_eventually, collect, hang, slow, text, tool_use
from agent_lattice.workflows._outcomes import OUTPUT_MEMO
from agent_lattice.workflows._refs import workflow_id_for
from agent_lattice.workflows._run_stream import MESSAGES_TOPIC
from agent_lattice.workflows._types import AgentRunOutput

from conftest import Expr, by_agent, child_ids, keep_history, make_calculator, named_agent

TURN = {"input_tokens": 1000, "output_tokens": 200, "cache_read_input_tokens": 5000}
PRICES = {"input": 3.0, "output": 15.0, "cache_read": 0.3}
PRICED = {"model": "claude-sonnet-4-5", "pricing": PRICES}
TURN_USD = (1000 * 3.0 + 200 * 15.0 + 5000 * 0.3) / 1e6  # one TURN's cost

OUTCOME = SearchAttributeKey.for_keyword("LatticeOutcome")
INPUT_TOKENS = SearchAttributeKey.for_int("LatticeInputTokens")
OUTPUT_TOKENS = SearchAttributeKey.for_int("LatticeOutputTokens")
COST_USD = SearchAttributeKey.for_float("LatticeCostUsd")


async def indexed(
    handle: WorkflowHandle,
) -> tuple[str | None, int | None, int | None, float | None]:
    """The run's outcome, tokens and cost as its search attributes say."""
    attributes = (await handle.describe()).typed_search_attributes
    return (
        attributes.get(OUTCOME),
        attributes.get(INPUT_TOKENS),
        attributes.get(OUTPUT_TOKENS),
        attributes.get(COST_USD),
    )


async def closed_as(handle: WorkflowHandle) -> WorkflowExecutionStatus | None:
    described = await handle.describe()
    # a closed run leaves no pending activity behind (a cancelled request is waited for)
    assert not described.raw_description.pending_activities
    return described.status


async def canceled_output(handle: WorkflowHandle) -> AgentRunOutput:
    """A Canceled run's output: its result raises a cancel, its memo holds the output."""
    with pytest.raises(WorkflowFailureError) as canceled:
        await handle.result()
    assert isinstance(canceled.value.cause, CancelledError)
    output = await (await handle.describe()).memo_value(OUTPUT_MEMO, type_hint=AgentRunOutput)
    assert isinstance(output, AgentRunOutput)
    return output


async def stream_types(client: Client, workflow_id: str) -> list[str]:
    """The types of a closed run's stream messages, as its stream's reader reads them: the
    ones its closing workflow task published come with its output."""
    return [item["type"] async for item in published(client, workflow_id, MESSAGES_TOPIC)]


async def cancel_taken(handle: WorkflowHandle) -> bool:
    """Whether a workflow task of the run completed after its cancel request."""
    kinds = [e.event_type for e in (await handle.fetch_history()).events]
    requested = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
    if requested not in kinds:
        return False
    return EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED in kinds[kinds.index(requested) :]


async def requests_with(fake, marker: str, count: int) -> None:
    """Until the fake provider has had ``count`` requests whose system prompt has ``marker``."""
    await assert_eventually(
        lambda: sum(marker in (r.system or "") for r in fake.requests) >= count, within=30
    )


async def test_an_error_result_fails_its_workflow_and_every_caller_still_gets_it(
    make_agent, fake_anthropic, lattice_server
):
    fake_anthropic.set_handler(
        Script(tool_use("calculator", {"expr": "1+2"}, usage=TURN), text("unused"))
    )
    agent = make_agent(name="counter", tools=[make_calculator()], max_turns=1, **PRICED)

    result = await agent.prompt("Add 1 and 2.")

    assert result.subtype == "error_max_turns" and result.is_error
    assert result.num_turns == 1 and result.usage.output_tokens == 200
    assert result.total_cost_usd == pytest.approx(TURN_USD)
    client: Client = make_agent.runtime.client
    handle = client.get_workflow_handle(result.workflow_id)
    assert await closed_as(handle) == WorkflowExecutionStatus.FAILED
    # the failure: non-retryable, typed by the subtype, the whole output in its details
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.non_retryable, cause.message) == (
        "error_max_turns",
        True,
        result.result,
    )
    output = AgentRunOutput.model_validate(cause.details[0])
    assert output.result == result and output.head is not None
    assert await indexed(handle) == ("error_max_turns", 6000, 200, pytest.approx(TURN_USD))
    history = await keep_history(make_agent.runtime, result.workflow_id, "failed_run")
    await replayer().replay_workflow(history)
    assert history.events[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED

    # Temporal's failure views find it: the visibility query and the temporal CLI
    where = f'ExecutionStatus="Failed" AND WorkflowId="{result.workflow_id}"'

    async def listed() -> bool:
        return [e.id async for e in client.list_workflows(where)] == [result.workflow_id]

    await assert_eventually(listed)
    out = temporal("workflow", "list", "--query", where, "--output", "json", address=lattice_server)
    assert out.returncode == 0 and result.workflow_id in out.stdout, out.stderr

    # a reader of the closed run gets its messages and result from the record; the stream's
    # reader, its last ones from the failure's details
    read = [m async for m in make_agent.runtime.attach(result.workflow_id)]
    assert [m.type for m in read] == ["system", "assistant", "user", "result"]
    assert read[-1] == result
    assert await stream_types(client, result.workflow_id) == [m.type for m in read]

    # the session goes on from it: this agent, and another one resuming the session
    fake_anthropic.set_handler(Script(text("It is 3.", usage=TURN)))
    again = await agent.prompt("So?")
    assert again.subtype == "success"
    sent = fake_anthropic.requests[-1].messages
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"][0]["name"] == "calculator"
    resumed = make_agent(name="counter", session_id=agent.session_id, max_turns=1, **PRICED)
    fake_anthropic.set_handler(Script(text("Still 3.", usage=TURN)))
    assert (await resumed.prompt("Sure?")).result == "Still 3."
    assert len(fake_anthropic.requests[-1].messages) == 5

    # query() follows the run live and ends with the same kind of result
    fake_anthropic.set_handler(
        Script(tool_use("calculator", {"expr": "2+2"}, usage=TURN), text("unused"))
    )
    messages = [m async for m in resumed.query("Add 2 and 2.")]
    assert [m.type for m in messages if m.type != "stream_event"][-3:] == [
        "assistant",
        "user",
        "result",
    ]
    assert messages[-1].subtype == "error_max_turns"
    assert [m.role for m in await resumed.get_history()][-3:] == ["user", "assistant", "user"]


async def test_a_cancel_request_during_a_model_request_is_the_interrupt(make_agent, fake_anthropic):
    fake_anthropic.set_handler(
        Script(tool_use("calculator", {"expr": "1+2"}, usage=TURN), hang(60))
    )
    agent = make_agent(name="canceled", tools=[make_calculator()], **PRICED)
    run = asyncio.ensure_future(agent.prompt("Add 1 and 2."))
    client: Client = make_agent.runtime.client
    handle = client.get_workflow_handle(workflow_id_for(agent, 1))
    await assert_eventually(lambda: len(fake_anthropic.requests) == 2)
    # a reader attached while it runs (`lattice attach`) reads on through its close
    attached = asyncio.ensure_future(collect(make_agent.runtime.attach(handle.id)))
    await asyncio.sleep(0.5)

    await handle.cancel()  # the UI's "Request Cancellation", `temporal workflow cancel`
    result = await asyncio.wait_for(run, 30)
    live = await asyncio.wait_for(attached, 30)
    assert [m.type for m in live] == ["system", "assistant", "user", "result"]
    assert live[-1] == result

    assert result.subtype == "interrupted" and not result.is_error
    assert result.num_turns == 2 and result.usage.output_tokens == 200  # the first turn's
    assert result.total_cost_usd == pytest.approx(TURN_USD)
    assert await closed_as(handle) == WorkflowExecutionStatus.CANCELED
    assert await indexed(handle) == ("interrupted", 6000, 200, pytest.approx(TURN_USD))
    output = await canceled_output(handle)
    assert output.result == result
    # the completed turn is kept; the request in flight is dropped
    assert [m.role for m in await agent.get_history()] == ["user", "assistant", "user"]
    history = await keep_history(make_agent.runtime, handle.id, "canceled_run")
    await replayer().replay_workflow(history)
    kinds = [e.event_type for e in history.events]
    assert kinds[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED in kinds  # its worker stopped it

    # a reader of the closed run gets its messages and result (the stream's last, from its
    # memo)
    read = [m async for m in make_agent.runtime.attach(handle.id)]
    assert read[-1] == result and [m.type for m in read][1:3] == ["assistant", "user"]
    assert await stream_types(client, handle.id) == [m.type for m in read]

    fake_anthropic.set_handler(Script(text("It is 3.")))
    assert (await agent.prompt("So?")).result == "It is 3."
    assert [m["role"] for m in fake_anthropic.requests[-1].messages] == [
        "user",
        "assistant",
        "user",
    ]


async def test_a_cancel_mid_stream_counts_what_the_request_streamed(make_agent, fake_anthropic):
    # turn 2's reply streams slowly: its message_start (its input and cache tokens, 1 output
    # token so far) comes first, its text long after
    fake_anthropic.set_handler(
        Script(
            tool_use("calculator", {"expr": "1+2"}, usage=TURN),
            slow(text("It is 3. " * 40, usage=TURN), delay=2),
        )
    )
    agent = make_agent(name="cut", tools=[make_calculator()], **PRICED)
    messages = []
    starts = 0
    async for message in agent.query("Add 1 and 2."):
        messages.append(message)
        event = getattr(message, "event", None) or {}
        if event.get("type") == "message_start":
            starts += 1
            if starts == 2:  # turn 2 has started streaming: cancel it through Temporal
                client = make_agent.runtime.client
                await client.get_workflow_handle(workflow_id_for(agent, 1)).cancel()

    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.subtype == "interrupted"
    # the cut request's tokens count in the result, the index and the cost, like any other
    assert (result.usage.input_tokens, result.usage.output_tokens) == (2000, 201)
    assert result.usage.cache_read_input_tokens == 10000
    cut_usd = (1000 * 3.0 + 1 * 15.0 + 5000 * 0.3) / 1e6
    assert result.total_cost_usd == pytest.approx(TURN_USD + cut_usd)
    handle = make_agent.runtime.client.get_workflow_handle(result.workflow_id)
    assert await closed_as(handle) == WorkflowExecutionStatus.CANCELED
    assert await indexed(handle) == (
        "interrupted",
        12000,
        201,
        pytest.approx(TURN_USD + cut_usd),
    )
    # the request completed with what it had used; none of its text joined the conversation
    history = await handle.fetch_history()
    kinds = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED not in kinds
    assert kinds.count(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED) >= 3  # 2 requests, a tool
    await replayer().replay_workflow(history)
    assert [m.role for m in await agent.get_history()] == ["user", "assistant", "user"]


async def test_a_cancel_request_while_a_call_waits_for_approval(make_agent, fake_anthropic):
    ran: list[object] = []
    fake_anthropic.set_handler(
        Script(tool_use("refund", {"order": "A-42", "amount": 30}, usage=TURN), text("unused"))
    )
    agent = make_agent(name="support", tools=[refund_tool(ran)], **PRICED)
    request, rest = await approval_request(agent.query("Refund order A-42."))
    handle = make_agent.runtime.client.get_workflow_handle(request.workflow_id)

    await handle.cancel()
    messages = await asyncio.wait_for(rest, 30)

    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.subtype == "interrupted"
    assert result.total_cost_usd == pytest.approx(TURN_USD)
    resolved = [m for m in messages if getattr(m, "subtype", None) == "approval_resolved"]
    assert [m.behavior for m in resolved] == ["cancelled"]
    assert ran == [] and len(fake_anthropic.requests) == 1  # no call, no request after it
    assert await closed_as(handle) == WorkflowExecutionStatus.CANCELED
    assert await indexed(handle) == ("interrupted", 6000, 200, pytest.approx(TURN_USD))
    history = await agent.get_history()
    assert [m.role for m in history] == ["user", "assistant", "user"]
    assert history[-1].content[0].is_error is True  # the call got its result: not run


async def test_a_cancel_request_during_a_tool_call_ends_the_run_after_it(
    make_agent, fake_anthropic
):
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(input: Expr) -> ToolResult:
        started.set()
        await release.wait()
        return ToolResult(content="slow result")

    fake_anthropic.set_handler(Script(tool_use("slow", {"expr": "x"}, usage=TURN), text("no")))
    agent = make_agent(name="busy", tools=[tool("slow", "Takes a while", Expr, slow)], **PRICED)
    run = asyncio.ensure_future(agent.prompt("Go."))
    await asyncio.wait_for(started.wait(), 30)
    handle = make_agent.runtime.client.get_workflow_handle(workflow_id_for(agent, 1))

    await handle.cancel()
    await assert_eventually(lambda: cancel_taken(handle))  # the run has heard of it
    release.set()  # the call in flight finishes: its result is a completed turn
    result = await asyncio.wait_for(run, 30)

    assert result.subtype == "interrupted"
    assert len(fake_anthropic.requests) == 1  # the model is not asked again
    assert await closed_as(handle) == WorkflowExecutionStatus.CANCELED
    history = await agent.get_history()
    assert [m.role for m in history] == ["user", "assistant", "user"]
    assert history[-1].content[0].content == "slow result"


async def test_an_interrupted_run_leaves_no_pending_activity(make_agent, fake_anthropic):
    fake_anthropic.set_handler(Script(hang(60)))
    agent = make_agent(name="quiet")
    run = asyncio.ensure_future(agent.prompt("Talk."))
    await assert_eventually(lambda: len(fake_anthropic.requests) == 1)
    assert agent.interrupt() is True
    result = await asyncio.wait_for(run, 30)
    assert result.subtype == "interrupted"
    handle = make_agent.runtime.client.get_workflow_handle(result.workflow_id)
    # an interrupt signal is no cancel request: the run completes, its request stopped first
    assert await closed_as(handle) == WorkflowExecutionStatus.COMPLETED


def _delegating(fake, make_agent, **handlers):
    fake.set_handler(by_agent(**handlers))
    scout = named_agent(fake, "scout", tools=[make_calculator()], pricing=PRICES)
    return make_agent(
        name="boss",
        system_prompt="You are boss.",
        tools=[agent_tool("explore", scout, description="Ask the scout.")],
        **PRICED,
    )


async def test_a_canceled_delegate_gives_its_parent_its_result(make_agent, fake_anthropic):
    def boss(request):
        if not request.tool_results:
            return tool_use("explore", {"task": "Look."}, usage=TURN)
        return text(f"scout said: {request.tool_results[0]['content']}", usage=TURN)

    agent = _delegating(
        fake_anthropic,
        make_agent,
        boss=boss,
        scout=Script(tool_use("calculator", {"expr": "1"}, usage=TURN), hang(60)),
    )
    run = asyncio.ensure_future(agent.prompt("Map it."))
    client: Client = make_agent.runtime.client
    await requests_with(fake_anthropic, "You are scout.", 2)
    (scout_id,) = await child_ids(client, workflow_id_for(agent, 1))
    child = client.get_workflow_handle(scout_id)

    await child.cancel()  # an operator cancels the delegate alone
    result = await asyncio.wait_for(run, 30)

    assert result.subtype == "success"  # the parent goes on with the child's result
    child_output = await canceled_output(child)
    assert child_output.result.subtype == "interrupted"
    assert await closed_as(child) == WorkflowExecutionStatus.CANCELED
    assert await indexed(child) == ("interrupted", 6000, 200, pytest.approx(TURN_USD))
    # the child's usage and cost are the parent's too
    assert result.usage_by_agent["scout"].output_tokens == 200
    assert result.cost_by_agent["scout"] == pytest.approx(TURN_USD)
    assert result.total_cost_usd == pytest.approx(3 * TURN_USD)


async def test_a_cancel_request_reaches_the_delegate_and_both_end_canceled(
    make_agent, fake_anthropic
):
    agent = _delegating(
        fake_anthropic,
        make_agent,
        boss=Script(tool_use("explore", {"task": "Look."}, usage=TURN), text("unused")),
        scout=Script(tool_use("calculator", {"expr": "1"}, usage=TURN), hang(60)),
    )
    run = asyncio.ensure_future(agent.prompt("Map it."))
    client: Client = make_agent.runtime.client
    await requests_with(fake_anthropic, "You are scout.", 2)
    parent = client.get_workflow_handle(workflow_id_for(agent, 1))
    (scout_id,) = await child_ids(client, parent.id)
    child = client.get_workflow_handle(scout_id)

    await parent.cancel()
    result = await asyncio.wait_for(run, 30)

    assert result.subtype == "interrupted"
    assert result.total_cost_usd == pytest.approx(2 * TURN_USD)  # its own turn, the scout's
    assert await closed_as(parent) == WorkflowExecutionStatus.CANCELED
    assert await closed_as(child) == WorkflowExecutionStatus.CANCELED
    assert (await canceled_output(child)).result.subtype == "interrupted"
    assert await indexed(parent) == ("interrupted", 12000, 400, pytest.approx(2 * TURN_USD))
    assert await indexed(child) == ("interrupted", 6000, 200, pytest.approx(TURN_USD))
    for workflow_id, name in ((parent.id, "canceled_parent"), (scout_id, "canceled_child")):
        history = await keep_history(make_agent.runtime, workflow_id, name)
        await replayer().replay_workflow(history)


async def test_a_cancel_request_ends_a_team_run_canceled(fake_anthropic, lattice_runtime):
    def lead(request):
        if len(request.messages) == 1:
            return tool_use("member", {"mode": "ask", "task": "Dig."}, usage=TURN)
        return text("unused")

    fake_anthropic.set_handler(
        by_agent(
            lead=lead,
            member=Script(tool_use("calculator", {"expr": "1"}, usage=TURN), hang(60)),
        )
    )
    team = create_team(
        name="crew",
        lead=named_agent(fake_anthropic, "lead", pricing=PRICES),
        members=[
            team_member(
                name="member",
                agent=named_agent(
                    fake_anthropic, "member", tools=[make_calculator()], pricing=PRICES
                ),
            )
        ],
    )
    run = asyncio.ensure_future(team.prompt("Go."))
    client = lattice_runtime.client
    await requests_with(fake_anthropic, "You are member.", 2)
    lead_id = workflow_id_for(team.lead, 1)
    team_run = client.get_workflow_handle(f"team-crew-{team.lead.session_id}-1")

    await team_run.cancel()
    result = await asyncio.wait_for(run, 30)

    assert result.subtype == "interrupted" and result.workflow_id == lead_id
    assert result.total_cost_usd == pytest.approx(2 * TURN_USD)
    lead_run = client.get_workflow_handle(lead_id)
    assert await closed_as(team_run) == WorkflowExecutionStatus.CANCELED
    assert await closed_as(lead_run) == WorkflowExecutionStatus.CANCELED
    assert (await canceled_output(team_run)).result == result
    assert await indexed(lead_run) == ("interrupted", 12000, 400, pytest.approx(2 * TURN_USD))
    (member_id,) = await child_ids(client, lead_id)
    member = client.get_workflow_handle(member_id)
    assert await closed_as(member) == WorkflowExecutionStatus.CANCELED
    assert await indexed(member) == ("interrupted", 6000, 200, pytest.approx(TURN_USD))
    for workflow_id, name in ((team_run.id, "canceled_team"), (lead_id, "canceled_team_lead")):
        history = await keep_history(lattice_runtime, workflow_id, name)
        await replayer().replay_workflow(history)
