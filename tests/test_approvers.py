"""Audited, restricted approvals: every decision names its approver (given, else the deciding
client's Temporal identity), in the ``approval_resolved`` message, the update in the run's
history, the run's memo and ``lattice approvals --history``; ``approvers`` (an agent's, or a
tool's, which wins) is an allow-list the run's update validator checks, so a decision by
anyone else is refused at its caller and never reaches the history."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from rich.console import Console
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer
from test_approval import Refund, answer_with_tool_result, approval_request, refund_tool

from agent_lattice import (
    ApprovalError,
    LatticePlugin,
    OptionError,
    ResolvedApproval,
    ResultMessage,
    Runtime,
    SystemMessage,
    list_pending_approvals,
    list_resolved_approvals,
    resolve_approval,
    tool,
)
from agent_lattice._approvals import ApprovalDecision
from agent_lattice.cli import Renderer
from agent_lattice.cli._approvals import cli_identity
from agent_lattice.testing import FAST_SETTINGS, RecordedRequest, Reply, Script, text, tool_use

from conftest import API_KEY, keep_history, named_agent
from test_encryption import encrypted  # noqa: F401 - a fixture


def resolved_of(messages: list[Any]) -> list[SystemMessage]:
    return [
        m for m in messages if isinstance(m, SystemMessage) and m.subtype == "approval_resolved"
    ]


async def update_events(runtime: Runtime, workflow_id: str) -> list[tuple[str, ApprovalDecision]]:
    """Every update the run's history holds: (the sender's Temporal identity, the decision
    it carried, decoded as a reader of the history with the keys would)."""
    handle = runtime.client.get_workflow_handle(workflow_id)
    updates: list[tuple[str, ApprovalDecision]] = []
    async for event in handle.fetch_history_events():
        if event.HasField("workflow_execution_update_accepted_event_attributes"):
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request
            (decision,) = await runtime.client.data_converter.decode(
                request.input.args.payloads, [ApprovalDecision]
            )
            updates.append((request.meta.identity, decision))
        else:
            name = EventType.Name(event.event_type)
            # a validator's refusal leaves nothing: no admitted, rejected or accepted event
            assert "UPDATE" not in name or name.endswith("UPDATE_COMPLETED"), name
    return updates


async def test_an_approver_outside_approvers_is_refused_and_the_history_has_no_decision(
    make_agent, fake_anthropic
):
    ran: list[Refund] = []
    fake_anthropic.set_handler(answer_with_tool_result)
    agent = make_agent(name="support", tools=[refund_tool(ran)], approvers=["alice", "bob"])

    request, rest = await approval_request(agent.query("Refund order A-42."))
    assert request.approvers == ["alice", "bob"]  # the request says who may decide
    assert request.approval_id is not None and request.workflow_id is not None
    with pytest.raises(ApprovalError) as refused:
        await agent.approve(request.approval_id, approver="mallory")
    assert str(refused.value) == (
        f"approver 'mallory' is not allowed to decide approval {request.approval_id!r} "
        f"(refund) of {request.workflow_id}: its approvers are alice, bob; nothing changed"
    )
    # nor by a caller that names no one: its client identity is not on the list either
    with pytest.raises(ApprovalError, match="is not allowed to decide"):
        await resolve_approval(request.workflow_id, request.approval_id, "deny", "no")
    await asyncio.sleep(0.3)
    assert ran == []
    (pending,) = await list_pending_approvals(request.workflow_id)
    assert (pending.approval_id, pending.approvers) == (request.approval_id, ["alice", "bob"])

    await agent.approve(request.approval_id, approver="bob")
    messages = await asyncio.wait_for(rest, 30)

    assert messages[-1].result == "ok: refunded 30 on A-42" and len(ran) == 1
    (resolved,) = resolved_of(messages)
    assert (resolved.behavior, resolved.approver) == ("allow", "bob")
    # the history holds bob's decision only: the refused ones never reached it
    ((identity, decision),) = await update_events(make_agent.runtime, request.workflow_id)
    assert (decision.approver, decision.behavior) == ("bob", "allow")
    assert identity == make_agent.runtime.client.identity
    (ended,) = await list_resolved_approvals(request.workflow_id)  # closed: its memo still
    assert isinstance(ended, ResolvedApproval)
    assert (ended.approval_id, ended.behavior, ended.approver) == (
        request.approval_id,
        "allow",
        "bob",
    )
    assert ended.tool_name == "refund" and ended.agent == "support"
    assert ended.requested_at <= ended.decided_at


async def test_a_tools_approvers_replace_the_agents(make_agent, fake_anthropic):
    """The refund tool's approvers are finance's; the agent's list holds for other tools
    (here a permission callback's "ask" on the lookup tool)."""

    fake_anthropic.set_handler(
        Script(
            tool_use("refund", {"order": "A-1", "amount": 5}, id="toolu_refund"),
            tool_use("lookup", {"order": "A-1", "amount": 0}, id="toolu_lookup"),
            text("done"),
        )
    )
    lookup = tool("lookup", "Look an order up", Refund, lambda i: f"{i.order}: shipped")
    agent = make_agent(
        tools=[refund_tool([], approvers=["finance"]), lookup],
        approvers=["alice"],
        permission=lambda r: {"behavior": "ask" if r.tool_name == "lookup" else "allow"},
    )
    decided: list[SystemMessage] = []
    async for m in agent.query("Refund A-1, then look it up."):
        if isinstance(m, SystemMessage) and m.subtype == "approval_request":
            assert m.approval_id is not None
            first, second = (
                ("alice", "finance") if m.tool_name == "refund" else ("finance", "alice")
            )
            assert m.approvers == [second]
            with pytest.raises(ApprovalError, match=f"approver '{first}' is not allowed"):
                await agent.approve(m.approval_id, approver=first)
            await agent.approve(m.approval_id, approver=second)
        elif isinstance(m, SystemMessage) and m.subtype == "approval_resolved":
            decided.append(m)
        elif isinstance(m, ResultMessage):
            assert m.subtype == "success", m
    assert [(m.tool_name, m.approver) for m in decided] == [
        ("refund", "finance"),
        ("lookup", "alice"),
    ]


async def test_the_default_approver_is_the_deciding_clients_identity(
    make_agent, fake_anthropic, lattice_server
):
    fake_anthropic.set_handler(answer_with_tool_result)
    agent = make_agent(tools=[refund_tool([])])  # no approvers: anyone may decide

    request, rest = await approval_request(agent.query("Refund order A-42."))
    assert request.approvers is None
    await agent.deny(request.approval_id, message="Not now.")
    (resolved,) = resolved_of(await asyncio.wait_for(rest, 30))
    assert resolved.approver == make_agent.runtime.client.identity
    assert resolved.approver  # the SDK's pid@host: never empty

    # a runtime connected with an identity of its own decides as it, from another process
    request, rest = await approval_request(agent.query("Refund order A-43."))
    assert request.workflow_id is not None and request.approval_id is not None
    desk = await Runtime.connect(lattice_server, inline_workers=False, identity="refund-desk")
    try:
        await resolve_approval(request.workflow_id, request.approval_id, runtime=desk)
    finally:
        await desk.close()
    (resolved,) = resolved_of(await asyncio.wait_for(rest, 30))
    assert resolved.approver == "refund-desk"
    # what Temporal records as the update's sender is the same name
    ((identity, decision),) = await update_events(make_agent.runtime, request.workflow_id)
    assert identity == decision.approver == "refund-desk"


def lattice(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The `lattice` CLI in a process of its own (another machine, as far as it knows)."""
    return subprocess.run(
        [sys.executable, "-m", "agent_lattice.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )


async def test_the_cli_decides_as_named_and_lists_who_decided(
    make_agent, fake_anthropic, lattice_server
):
    """``--as NAME`` names the approver (refused off the list: exit 1, nothing decided);
    without it the approver is the command's identity, lattice-cli:USER@HOST; ``lattice
    approvals --history --json`` lists both decisions with their approvers."""

    fake_anthropic.set_handler(
        Script(
            tool_use("refund", {"order": "A-1", "amount": 5}, id="toolu_1"),
            tool_use("refund", {"order": "A-2", "amount": 7}, id="toolu_2"),
            text("both refunded"),
        )
    )
    me = cli_identity()
    assert me is not None and me.startswith("lattice-cli:") and "@" in me
    ran: list[Refund] = []
    agent = make_agent(tools=[refund_tool(ran)], approvers=["carol", me])
    env = {**os.environ, "TEMPORAL_ADDRESS": lattice_server}
    said: list[subprocess.CompletedProcess[str]] = []

    async def decide(request: SystemMessage) -> None:
        assert request.workflow_id is not None and request.approval_id is not None
        where = (request.workflow_id, request.approval_id)
        if request.tool_use_id == "toolu_1":  # the listing says who may decide
            wide = {**env, "COLUMNS": "250"}
            listed = await asyncio.to_thread(lattice, "approvals", request.workflow_id, env=wide)
            assert f"carol, {me}" in listed.stdout, listed.stdout
            said.append(await asyncio.to_thread(lattice, "deny", *where, "-m", "x", "--as",
                                                "mallory", env=env))  # fmt: skip
            said.append(await asyncio.to_thread(lattice, "approve", *where, "--as", "carol",
                                                env=env))  # fmt: skip
        else:
            said.append(await asyncio.to_thread(lattice, "approve", *where, env=env))

    result = None
    async for m in agent.query("Refund A-1 and A-2."):
        if isinstance(m, SystemMessage) and m.subtype == "approval_request":
            await decide(m)
        result = m
    assert isinstance(result, ResultMessage) and result.result == "both refunded"
    assert [r.order for r in ran] == ["A-1", "A-2"]
    refused, as_carol, as_me = said
    assert refused.returncode == 1 and refused.stderr.startswith("error: approver 'mallory' is")
    assert "not allowed to decide approval" in refused.stderr
    assert "its approvers are carol, " + me in refused.stderr
    assert as_carol.returncode == 0 and as_carol.stdout.strip().endswith(": allowed by carol")
    assert as_me.returncode == 0 and as_me.stdout.strip().endswith(f": allowed by {me}")

    workflow_id = result.workflow_id
    assert workflow_id is not None
    listed = lattice("approvals", workflow_id, "--history", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    lines = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(x["tool_name"], x["behavior"], x["approver"]) for x in lines] == [
        ("refund", "allow", "carol"),
        ("refund", "allow", me),
    ]
    assert all(x["workflow_id"] == workflow_id for x in lines)
    table = lattice("approvals", workflow_id, "--history", env={**env, "COLUMNS": "250"})
    assert table.returncode == 0 and "carol" in table.stdout and me in table.stdout


async def test_strict_encryption_refuses_a_forged_decision_before_the_approver_check(
    encrypted: Runtime,  # noqa: F811 - the fixture imported above
    fake_anthropic,
    lattice_server: str,
) -> None:
    """A plain update naming an allowed approver is refused as unencrypted (the payload is
    refused before the validator runs); a keyed caller off the list is refused by the
    validator; an allowed keyed caller decides."""
    fake_anthropic.set_handler(answer_with_tool_result)
    agent = named_agent(fake_anthropic, "payer", tools=[refund_tool([])], approvers=["alice"])
    request, rest = await approval_request(agent.query("Refund A-42.", runtime=encrypted))
    assert request.workflow_id is not None and request.approval_id is not None
    plain = await Client.connect(lattice_server)  # the default data converter: plain JSON
    forged = {"approval_id": request.approval_id, "behavior": "allow", "approver": "alice"}
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await plain.get_workflow_handle(request.workflow_id).execute_update(
            "resolve_approval", forged
        )
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "UnencryptedPayloadError"
    with pytest.raises(ApprovalError, match="approver 'mallory' is not allowed"):
        await resolve_approval(
            request.workflow_id, request.approval_id, approver="mallory", runtime=encrypted
        )
    await resolve_approval(
        request.workflow_id, request.approval_id, approver="alice", runtime=encrypted
    )
    (resolved,) = resolved_of(await asyncio.wait_for(rest, 30))
    assert resolved.approver == "alice"
    ((_, decision),) = await update_events(encrypted, request.workflow_id)
    assert decision.approver == "alice"


async def test_the_history_of_decisions_survives_continue_as_new(
    lattice_server, task_queue_prefix, fake_anthropic
):
    """Each turn a run of its own (turns_per_run=1): the last run's memo still lists the
    first run's decisions."""
    runtime = await Runtime.connect(
        lattice_server, settings=FAST_SETTINGS.model_copy(update={"turns_per_run": 1})
    )
    try:

        def model(request: RecordedRequest) -> Reply:
            n = len(request.messages) // 2
            if n < 3:
                return tool_use("refund", {"order": f"A-{n}", "amount": 1}, id=f"toolu_{n}")
            return text("three refunds")

        fake_anthropic.set_handler(model)
        agent = named_agent(fake_anthropic, "desk", tools=[refund_tool([])]).bind_runtime(runtime)
        result = None
        async for m in agent.query("Refund three orders."):
            if isinstance(m, SystemMessage) and m.subtype == "approval_request":
                assert m.approval_id is not None
                await agent.approve(m.approval_id, approver=f"clerk-{m.tool_use_id}")
            result = m
        assert isinstance(result, ResultMessage) and result.result == "three refunds"
        assert result.workflow_id is not None
        ended = await list_resolved_approvals(result.workflow_id, runtime=runtime)
        assert [r.approver for r in ended] == ["clerk-toolu_0", "clerk-toolu_1", "clerk-toolu_2"]
        runs = [
            r async for r in runtime.client.list_workflows(f"WorkflowId = '{result.workflow_id}'")
        ]
        assert len(runs) == 4  # three continued as new: the decisions came along
        # the last run (carried decisions, shown at its start) replays
        last = await keep_history(runtime, result.workflow_id, "approvers_continued")
        await Replayer(workflows=[], plugins=[LatticePlugin(agents=[])]).replay_workflow(last)
    finally:
        await runtime.close()


async def test_an_audited_approval_history_replays(make_agent, fake_anthropic):
    """A refused approver, an allowed one, a denial by a default identity; replayed, and
    recorded as tests/histories/approvers.json."""

    fake_anthropic.set_handler(
        Script(
            tool_use("refund", {"order": "A-1", "amount": 5}, id="toolu_a"),
            tool_use("refund", {"order": "A-2", "amount": 9}, id="toolu_b"),
            text("done"),
        )
    )
    ran: list[Refund] = []
    agent = make_agent(tools=[refund_tool(ran, approvers=["alice", "bob"])])
    history = None
    async for m in agent.query("Refunds."):
        if isinstance(m, SystemMessage) and m.subtype == "approval_request":
            assert m.approval_id is not None
            with pytest.raises(ApprovalError):
                await agent.approve(m.approval_id, approver="mallory")
            if m.tool_use_id == "toolu_a":
                await agent.approve(m.approval_id, approver="alice")
            else:
                await agent.deny(m.approval_id, "Too much.", approver="bob")
        if isinstance(m, ResultMessage):
            assert m.subtype == "success" and m.workflow_id is not None
            history = await keep_history(make_agent.runtime, m.workflow_id, "approvers")
    assert history is not None and [r.order for r in ran] == ["A-1"]
    await Replayer(workflows=[], plugins=[LatticePlugin(agents=[])]).replay_workflow(history)
    assert API_KEY not in history.to_json()


def test_attach_and_run_show_who_may_decide_and_who_did() -> None:
    console = Console(file=io.StringIO(), width=200, soft_wrap=True)
    renderer = Renderer(console, workflow_id="wf-1")
    where = {"session_id": "s", "workflow_id": "wf-1", "approval_id": "apr_1", "tool_name": "pay"}
    renderer.show(
        SystemMessage(
            subtype="approval_request", agent="payer", tool_input={}, approvers=["alice"], **where
        )
    )
    renderer.show(
        SystemMessage(subtype="approval_resolved", behavior="allow", approver="alice", **where)
    )
    assert console.file.getvalue().splitlines() == [  # type: ignore[attr-defined]
        "⏸ payer waits for approval: pay {}",
        "  may decide: alice",
        "  lattice approve wf-1 apr_1",
        "  lattice deny wf-1 apr_1 -m WHY",
        "▶ pay: allow by alice",
    ]


# -- assembly ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("approvers", "said"),
    [
        ("alice", "must be a list of approver names"),
        ([], "is empty: no one could decide"),
        (["alice", ""], "each approver must be a non-empty string; got ''"),
        ([" bob"], "must have no surrounding spaces"),
        ([7], "each approver must be a non-empty string; got 7"),
    ],
)
def test_approvers_are_checked_at_assembly(make_agent, approvers, said):
    with pytest.raises(OptionError, match=f"AgentOptions: approvers.*{said}"):
        make_agent(approvers=approvers)
    with pytest.raises(OptionError, match=rf"tool\('refund'\): approvers.*{said}"):
        refund_tool([], approvers=approvers)


async def test_a_decisions_approver_is_checked_before_anything_is_sent():
    with pytest.raises(OptionError, match="approver must be a non-empty string"):
        await resolve_approval("wf", "apr_1", approver="")
    with pytest.raises(OptionError, match="approver must have no surrounding spaces"):
        await resolve_approval("wf", "apr_1", approver="alice\n")
