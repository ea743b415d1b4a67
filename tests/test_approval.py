"""Durable human approval: a tool call that waits for a person's decision, in workflow state,
decided from the agent, from any process (resolve_approval, the CLI), or timed out; a
delegated child's or team member's request surfaces in the top-level query's stream.
(tests/test_crash.py kills a worker while a call waits.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.client import WorkflowHistoryEventFilterType
from temporalio.worker import Replayer

from agent_lattice import (
    ApprovalError,
    ConcurrentQueryError,
    LatticePlugin,
    OptionError,
    PendingApproval,
    ResultMessage,
    SystemMessage,
    agent_tool,
    create_team,
    list_pending_approvals,
    resolve_approval,
    team_member,
    tool,
)
from agent_lattice.testing import (
    RecordedRequest,
    Reply,
    assert_eventually,
    message,
    text,
    tool_use,
    tool_use_block,
)

from conftest import API_KEY, by_agent, keep_history
from conftest import named_agent as agent


class Refund(BaseModel):
    order: str
    amount: int


def refund_tool(ran: list[Refund], **options: Any):
    def refund(input: Refund) -> str:
        ran.append(input)
        return f"refunded {input.amount} on {input.order}"

    return tool("refund", "Refund an order", Refund, refund, requires_approval=True, **options)


def answer_with_tool_result(request: RecordedRequest) -> Reply:
    """Ask for a refund; then say what the tool answered (the model's view of the decision)."""
    if not request.tool_results:
        return tool_use("refund", {"order": "A-42", "amount": 30}, id="toolu_refund")
    (result,) = request.tool_results
    flag = "error" if result.get("is_error") else "ok"
    return text(f"{flag}: {result['content']}")


async def approval_request(messages: Any) -> tuple[SystemMessage, asyncio.Task[list[Any]]]:
    """Read a query until its first approval request; the rest keeps being read by a task."""
    seen: list[Any] = []
    iterator = messages.__aiter__()
    async for m in iterator:
        seen.append(m)
        if isinstance(m, SystemMessage) and m.subtype == "approval_request":

            async def rest() -> list[Any]:
                return seen + [x async for x in iterator]

            return m, asyncio.ensure_future(rest())
    raise AssertionError(f"no approval request in {seen}")


async def test_allow_runs_the_tool_once_and_the_turn_continues(make_agent, fake_anthropic):
    ran: list[Refund] = []
    fake_anthropic.set_handler(answer_with_tool_result)
    agent = make_agent(name="support", tools=[refund_tool(ran)])

    request, rest = await approval_request(agent.query("Refund order A-42."))
    assert request.tool_name == "refund" and request.agent == "support"
    assert request.tool_input == {"order": "A-42", "amount": 30}
    assert request.tool_use_id == "toolu_refund" and request.workflow_id
    assert request.approval_id and request.approval_id.startswith("apr_")
    await asyncio.sleep(0.5)
    assert ran == [] and len(fake_anthropic.requests) == 1  # nothing runs while it waits

    await agent.approve(request.approval_id)
    messages = await asyncio.wait_for(rest, 30)
    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.subtype == "success"
    assert result.result == "ok: refunded 30 on A-42"
    assert ran == [Refund(order="A-42", amount=30)]
    resolved = [
        m for m in messages if isinstance(m, SystemMessage) and m.subtype == "approval_resolved"
    ]
    assert [(m.approval_id, m.behavior) for m in resolved] == [(request.approval_id, "allow")]


async def test_deny_gives_the_model_an_error_result_with_the_message(make_agent, fake_anthropic):
    ran: list[Refund] = []
    fake_anthropic.set_handler(answer_with_tool_result)
    agent = make_agent(tools=[refund_tool(ran)])

    request, rest = await approval_request(agent.query("Refund order A-42."))
    await agent.deny(request.approval_id, message="Refunds over 20 need a manager.")
    result = (await asyncio.wait_for(rest, 30))[-1]

    assert result.subtype == "success"
    assert result.result == "error: Refunds over 20 need a manager."
    assert ran == []


async def test_updated_input_is_checked_then_replaces_the_models_input(make_agent, fake_anthropic):
    ran: list[Refund] = []
    fake_anthropic.set_handler(answer_with_tool_result)
    agent = make_agent(tools=[refund_tool(ran)])

    request, rest = await approval_request(agent.query("Refund order A-42."))
    with pytest.raises(ApprovalError, match="amount"):
        await agent.approve(request.approval_id, updated_input={"order": "A-42", "amount": "lots"})
    assert ran == []
    # the refused input changed nothing: the request still waits, and a good one applies
    assert [p.approval_id for p in await list_pending_approvals(request.workflow_id)] == [
        request.approval_id
    ]
    await agent.approve(request.approval_id, updated_input={"order": "A-42", "amount": 20})
    result = (await asyncio.wait_for(rest, 30))[-1]

    assert result.result == "ok: refunded 20 on A-42"
    assert ran == [Refund(order="A-42", amount=20)]


async def test_a_decision_is_applied_once_and_an_unknown_id_is_refused(make_agent, fake_anthropic):
    ran: list[Refund] = []
    fake_anthropic.set_handler(answer_with_tool_result)
    agent = make_agent(tools=[refund_tool(ran)])

    request, rest = await approval_request(agent.query("Refund order A-42."))
    assert request.workflow_id is not None and request.approval_id is not None
    with pytest.raises(ApprovalError, match="no pending approval 'apr_nope'"):
        await resolve_approval(request.workflow_id, "apr_nope", "allow")
    with pytest.raises(ApprovalError, match="no running query 'no-such-run'"):
        await resolve_approval("no-such-run", request.approval_id, "allow")
    with pytest.raises(OptionError, match='behavior must be "allow" or "deny"'):
        await resolve_approval(request.workflow_id, request.approval_id, "maybe")

    await resolve_approval(request.workflow_id, request.approval_id, "allow")
    with pytest.raises(ApprovalError, match="already decided"):
        await resolve_approval(request.workflow_id, request.approval_id, "deny", "too late")
    result = (await asyncio.wait_for(rest, 30))[-1]

    assert result.result == "ok: refunded 30 on A-42" and len(ran) == 1
    with pytest.raises(ApprovalError, match="is no longer running"):
        await resolve_approval(request.workflow_id, request.approval_id, "deny")


async def test_a_decision_for_a_run_no_worker_serves_is_refused_with_what_to_do(
    make_agent, fake_anthropic, remote_runtime
):
    """The update would wait for a worker: the caller is told at once, and nothing changes."""
    fake_anthropic.set_handler(answer_with_tool_result)
    agent = make_agent(tools=[refund_tool([])]).bind_runtime(remote_runtime)
    workflow_id = await agent.start("Refund order A-42.")  # no worker polls its queue

    with pytest.raises(ApprovalError, match="none serves its task queue") as refused:
        await resolve_approval(workflow_id, "apr_any", "allow", runtime=remote_runtime)
    assert "Nothing was decided" in str(refused.value)
    await remote_runtime.client.get_workflow_handle(workflow_id).terminate()


async def test_the_wait_is_durable_state_listed_from_the_memo(make_agent, fake_anthropic):
    """While it waits no activity is running; the run's memo lists it and the UI's current
    details name the tool."""
    ran: list[Refund] = []
    fake_anthropic.set_handler(answer_with_tool_result)
    agent = make_agent(name="support", tools=[refund_tool(ran)])

    request, rest = await approval_request(agent.query("Refund order A-42."))
    assert request.workflow_id is not None
    runtime = make_agent.runtime
    handle = runtime.client.get_workflow_handle(request.workflow_id)
    description = await handle.describe()
    assert description.raw_description.pending_activities == []

    (pending,) = await list_pending_approvals(request.workflow_id)
    assert isinstance(pending, PendingApproval)
    assert (pending.approval_id, pending.workflow_id, pending.agent, pending.tool_name) == (
        request.approval_id,
        request.workflow_id,
        "support",
        "refund",
    )
    assert pending.tool_input == {"order": "A-42", "amount": 30}
    assert pending.requested_at.tzinfo is not None

    async def listed() -> bool:
        every = await list_pending_approvals()
        return request.approval_id in [p.approval_id for p in every]

    await assert_eventually(listed)
    details = await handle.query("__temporal_workflow_metadata")
    assert "waiting for approval: refund" in details.current_details

    await agent.approve(request.approval_id)
    await asyncio.wait_for(rest, 30)
    assert await list_pending_approvals(request.workflow_id) == []


async def test_approval_timeout_denies_with_approval_timed_out(make_agent, fake_anthropic):
    ran: list[Refund] = []
    fake_anthropic.set_handler(answer_with_tool_result)
    agent = make_agent(tools=[refund_tool(ran)], approval_timeout_s=1.5)

    messages = [m async for m in agent.query("Refund order A-42.")]

    result = messages[-1]
    assert result.subtype == "success" and result.result == "error: approval timed out"
    assert ran == []
    (resolved,) = [
        m for m in messages if isinstance(m, SystemMessage) and m.subtype == "approval_resolved"
    ]
    assert resolved.behavior == "timed_out"
    # a durable timer, in the history
    assert resolved.workflow_id is not None
    handle = make_agent.runtime.client.get_workflow_handle(resolved.workflow_id)
    events = [
        e
        async for e in handle.fetch_history_events(
            event_filter_type=WorkflowHistoryEventFilterType.ALL_EVENT
        )
    ]
    assert any(e.HasField("timer_started_event_attributes") for e in events)


async def test_a_query_option_overrides_the_agents_approval_timeout(make_agent, fake_anthropic):
    fake_anthropic.set_handler(answer_with_tool_result)
    agent = make_agent(tools=[refund_tool([])], approval_timeout_s=3600)

    result = await asyncio.wait_for(agent.prompt("Refund order A-42.", approval_timeout_s=1.0), 30)

    assert result.result == "error: approval timed out"


async def test_interrupt_while_waiting_ends_the_query_interrupted(make_agent, fake_anthropic):
    ran: list[Refund] = []
    fake_anthropic.set_handler(answer_with_tool_result)
    agent = make_agent(tools=[refund_tool(ran)])

    request, rest = await approval_request(agent.query("Refund order A-42."))
    assert agent.interrupt()
    messages = await asyncio.wait_for(rest, 30)

    result = messages[-1]
    assert result.subtype == "interrupted" and ran == []
    # no dangling tool_use: the waiting call was answered
    history = await agent.get_history()
    (answer,) = [b for b in history[-1].content if getattr(b, "type", "") == "tool_result"]
    assert answer.tool_use_id == "toolu_refund" and answer.is_error
    assert "interrupted while the call waited for approval" in str(answer.content)
    assert request.workflow_id is not None and request.approval_id is not None
    with pytest.raises(ApprovalError):
        await resolve_approval(request.workflow_id, request.approval_id, "allow")


async def test_permission_ask_waits_and_the_rest_of_the_batch_runs(make_agent, fake_anthropic):
    """A permission callback's "ask" makes that call wait; the other calls of the batch run
    as the concurrency rules say, and the turn continues once every call is decided."""
    ran: list[str] = []

    class Note(BaseModel):
        text: str

    def note(input: Note) -> str:
        ran.append(input.text)
        return f"noted {input.text}"

    def permission(request) -> dict[str, str]:
        if request.input.get("text") == "delete everything":
            return {"behavior": "ask", "message": "This one deletes data."}
        return {"behavior": "allow"}

    def model(request: RecordedRequest) -> Reply:
        if not request.tool_results:
            return message(
                [
                    tool_use_block("note", {"text": "delete everything"}, id="toolu_1"),
                    tool_use_block("note", {"text": "hello"}, id="toolu_2"),
                ],
                stop_reason="tool_use",
            )
        return text(" | ".join(str(r["content"]) for r in request.tool_results))

    fake_anthropic.set_handler(model)
    agent = make_agent(
        tools=[tool("note", "Take a note", Note, note, is_concurrency_safe=lambda _: True)],
        permission=permission,
    )

    request, rest = await approval_request(agent.query("Take notes."))
    assert request.message == "This one deletes data."
    await assert_eventually(lambda: ran == ["hello"])  # the safe neighbour ran meanwhile
    await agent.deny(request.approval_id, message="No.")
    result = (await asyncio.wait_for(rest, 30))[-1]

    assert result.result == "No. | noted hello"
    assert ran == ["hello"]


def test_requires_approval_is_checked_at_assembly():
    with pytest.raises(OptionError, match="requires_approval must be True or False"):
        tool("x", "X", Refund, lambda i: "", requires_approval="yes")


def test_approval_timeout_is_checked_at_assembly(make_agent):
    with pytest.raises(OptionError, match="approval_timeout_s must be a positive number"):
        make_agent(approval_timeout_s=0)


# -- delegated children and team members ---------------------------------------------------


def delegating(tool_name: str, task: dict[str, Any]):
    """A lead that calls ``tool_name`` once, then repeats what it got back."""

    def lead(request: RecordedRequest) -> Reply:
        if not request.tool_results:
            return tool_use(tool_name, task, id="toolu_lead")
        return text(f"lead heard: {request.tool_results[0]['content']}")

    return lead


async def test_a_delegated_childs_request_surfaces_and_is_decided_from_the_top(
    fake_anthropic, lattice_runtime
):
    ran: list[Refund] = []
    fake_anthropic.set_handler(
        by_agent(
            boss=delegating("support", {"task": "Refund A-42."}),
            support=answer_with_tool_result,
        )
    )
    support = agent(fake_anthropic, "support", tools=[refund_tool(ran)])
    boss = agent(fake_anthropic, "boss", tools=[agent_tool("support", support)])

    request, rest = await approval_request(boss.query("Handle the refund."))
    assert request.agent == "support" and request.tool_name == "refund"
    assert request.workflow_id is not None and request.workflow_id.startswith("support-")
    (pending,) = await list_pending_approvals(request.workflow_id)
    assert pending.approval_id == request.approval_id

    assert request.approval_id is not None
    await boss.approve(request.approval_id)  # the top-level agent decides for its child
    messages = await asyncio.wait_for(rest, 30)

    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.subtype == "success"
    assert result.result == "lead heard: ok: refunded 30 on A-42"
    assert ran == [Refund(order="A-42", amount=30)]


async def test_a_team_members_request_surfaces_in_the_team_query(fake_anthropic, lattice_runtime):
    ran: list[Refund] = []
    fake_anthropic.set_handler(
        by_agent(
            chief=delegating("support", {"mode": "handoff", "task": "Refund A-42."}),
            support=answer_with_tool_result,
        )
    )
    team = create_team(
        name="desk",
        lead=agent(fake_anthropic, "chief"),
        members=[
            team_member(
                name="support",
                agent=agent(fake_anthropic, "support", tools=[refund_tool(ran)]),
            )
        ],
    )

    request, rest = await approval_request(team.query("Handle the refund."))
    assert request.agent == "support" and request.workflow_id is not None
    assert request.approval_id is not None
    listed = [p.approval_id for p in await list_pending_approvals(request.workflow_id)]
    assert listed == [request.approval_id]

    await resolve_approval(
        request.workflow_id, request.approval_id, "deny", message="Not this week."
    )
    messages = await asyncio.wait_for(rest, 60)

    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.subtype == "success"
    assert ran == []
    # the member heard the denial and reported it: the lead got the report
    (last_to_chief,) = [r for r in fake_anthropic.requests if "You are chief." in (r.system or "")][
        -1:
    ]
    assert "error: Not this week." in str(last_to_chief.messages[-1]["content"])
    top_level = [
        m for m in messages if isinstance(m, SystemMessage) and m.subtype == "approval_request"
    ]
    assert [m.approval_id for m in top_level] == [request.approval_id]


# -- determinism ---------------------------------------------------------------------------


async def test_an_approval_history_replays_and_holds_no_secret(make_agent, fake_anthropic):
    """A run with a refused and an accepted decision (updated input checked), a denial and
    an approval timeout, replayed; recorded as tests/histories/approval.json."""

    def model(request: RecordedRequest) -> Reply:
        if not request.tool_results:
            return message(
                [
                    tool_use_block("refund", {"order": "A-1", "amount": 5}, id="toolu_a"),
                    tool_use_block("refund", {"order": "A-2", "amount": 50}, id="toolu_b"),
                ],
                stop_reason="tool_use",
            )
        if len(request.messages) == 3:
            return tool_use("refund", {"order": "A-3", "amount": 1}, id="toolu_c")
        return text("done")

    fake_anthropic.set_handler(model)
    ran: list[Refund] = []
    agent = make_agent(tools=[refund_tool(ran, is_concurrency_safe=lambda _: True)])
    requests: list[SystemMessage] = []
    messages = agent.query("Refunds.", approval_timeout_s=60)
    async for m in messages:
        if isinstance(m, SystemMessage) and m.subtype == "approval_request":
            assert m.approval_id is not None
            requests.append(m)
            if m.tool_use_id == "toolu_a":
                with pytest.raises(ApprovalError):
                    await agent.approve(m.approval_id, updated_input={"order": 1})
                await agent.approve(m.approval_id, updated_input={"order": "A-1", "amount": 4})
            elif m.tool_use_id == "toolu_b":
                await agent.deny(m.approval_id, message="Too much.")
            else:
                await agent.deny(m.approval_id)
        if isinstance(m, ResultMessage):
            assert m.subtype == "success" and m.workflow_id is not None
            history = await keep_history(make_agent.runtime, m.workflow_id, "approval")
    # the first two ran side by side: their requests come in either order
    assert sorted(r.tool_use_id or "" for r in requests) == ["toolu_a", "toolu_b", "toolu_c"]
    assert ran == [Refund(order="A-1", amount=4)]
    await Replayer(workflows=[], plugins=[LatticePlugin(agents=[])]).replay_workflow(history)
    assert API_KEY not in history.to_json()


# -- the stateless flow ----------------------------------------------------------------------


async def test_start_returns_at_once_and_a_new_agent_continues_the_session(
    make_agent, fake_anthropic
):
    """agent.start(): the query runs without the starter following it; its decision comes
    from resolve_approval(); a new Agent of the same session continues the conversation."""
    ran: list[Refund] = []
    fake_anthropic.set_handler(answer_with_tool_result)
    agent = make_agent(name="desk", tools=[refund_tool(ran)])
    workflow_id = await agent.start("Refund order A-42.")
    with pytest.raises(ConcurrentQueryError):
        await agent.prompt("Another one?")  # one query at a time, even a detached one

    async def waiting() -> PendingApproval:
        pending = await list_pending_approvals(workflow_id)
        assert len(pending) == 1, pending
        return pending[0]

    pending = await assert_eventually(waiting)
    await resolve_approval(workflow_id, pending.approval_id, "allow")
    messages = [m async for m in make_agent.runtime.durable_messages(workflow_id)]
    assert messages[-1].result == "ok: refunded 30 on A-42" and len(ran) == 1

    fake_anthropic.set_handler(lambda r: text(f"I see {len(r.messages)} messages."))
    again = make_agent(name="desk", tools=[refund_tool(ran)], session_id=agent.session_id)
    result = await again.prompt("How many?")
    assert result.result == "I see 5 messages."


async def test_an_agent_tool_call_the_permission_callback_asks_about_waits(
    fake_anthropic, lattice_runtime
):
    """Its child starts only once allowed; denied, no child runs and the model is told."""
    fake_anthropic.set_handler(
        by_agent(
            boss=delegating("helper", {"task": "Summarize the report."}),
            helper=lambda r: text("a summary"),
        )
    )
    helper = agent(fake_anthropic, "helper")
    boss = agent(
        fake_anthropic,
        "boss",
        tools=[agent_tool("helper", helper)],
        permission=lambda request: {"behavior": "ask", "message": "Costs money."},
    )

    request, rest = await approval_request(boss.query("Summarize."))
    assert (request.tool_name, request.message, request.agent) == ("helper", "Costs money.", "boss")
    assert not [r for r in fake_anthropic.requests if "You are helper." in (r.system or "")]
    await boss.approve(request.approval_id)
    result = (await asyncio.wait_for(rest, 30))[-1]
    assert result.result == "lead heard: a summary"

    request, rest = await approval_request(boss.query("Summarize again."))
    await boss.deny(request.approval_id, message="Not today.")
    result = (await asyncio.wait_for(rest, 30))[-1]
    assert result.result == "lead heard: Not today."
    helped = [r for r in fake_anthropic.requests if "You are helper." in (r.system or "")]
    assert len(helped) == 1  # the denied call started no child
