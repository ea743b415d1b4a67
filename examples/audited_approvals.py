"""Audited, restricted approvals: who may decide, and who did.

A payment agent whose ``pay`` calls wait for a person (``requires_approval=True``). Only
``alice`` and ``bob`` may decide (``approvers=[...]``, checked by the run itself before it
accepts a decision): ``mallory``'s approval is refused and leaves no trace in the run's
history; ``alice``'s is recorded with her name in the ``approval_resolved`` message, the
run's history and its memo, and ``lattice approvals WORKFLOW_ID --history --json`` lists it.

The names are asserted by the caller: see docs/approvals.md for what makes them trustworthy.

Run it: ``python examples/audited_approvals.py``.
"""

from __future__ import annotations

import asyncio
import json
import sys

from _demo import model_options
from pydantic import BaseModel

from agent_lattice import (
    ApprovalError,
    SystemMessage,
    create_agent,
    get_default_runtime,
    list_resolved_approvals,
    tool,
)
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use


class Payment(BaseModel):
    invoice: str
    amount_eur: int


def pay(input: Payment) -> str:
    return f"paid {input.amount_eur} EUR for {input.invoice}"


def fake(request: RecordedRequest) -> Reply:
    if not request.tool_results:
        return tool_use("pay", {"invoice": "INV-7", "amount_eur": 120})
    return text(f"Done: {request.tool_results[0]['content']}.")


agent = create_agent(
    name="payments",
    system_prompt="You pay invoices with the pay tool.",
    tools=[tool("pay", "Pay an invoice", Payment, pay, requires_approval=True)],
    approvers=["alice", "bob"],  # a tool(..., approvers=[...]) of its own would win
    workspace=False,
    **model_options("audited_approvals.py", fake),
)


async def lattice(*argv: str) -> str:
    """A ``lattice`` command in a process of its own."""
    command = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_lattice.cli", *argv, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await command.communicate()
    if command.returncode != 0:
        raise SystemExit(f"lattice {' '.join(argv)} failed ({command.returncode})")
    return out.decode()


async def main() -> None:
    workflow_id = ""
    async for message in agent.query("Pay invoice INV-7 (120 EUR)."):
        if isinstance(message, SystemMessage) and message.subtype == "approval_request":
            assert message.approval_id is not None and message.workflow_id is not None
            workflow_id = message.workflow_id
            print(
                f"{message.tool_name} waits; who may decide: {', '.join(message.approvers or [])}"
            )
            try:
                await agent.approve(message.approval_id, approver="mallory")
            except ApprovalError as refused:
                print(f"mallory refused: {refused}")
            await agent.approve(message.approval_id, approver="alice")
        elif isinstance(message, SystemMessage) and message.subtype == "approval_resolved":
            print(f"approval_resolved: {message.behavior} by {message.approver}")
        elif message.type == "result":
            print(f"result: {message.result}")

    # the run's history holds one decision, alice's: mallory's never reached it
    client = (await get_default_runtime()).client
    updates = [
        event.workflow_execution_update_accepted_event_attributes.accepted_request
        async for event in client.get_workflow_handle(workflow_id).fetch_history_events()
        if event.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    print(f"decisions in the run's history: {len(updates)}")
    for ended in await list_resolved_approvals(workflow_id):
        print(f"from the run's memo: {ended.tool_name} {ended.behavior} by {ended.approver}")
    listed = await lattice("approvals", workflow_id, "--history", "--json")
    (line,) = [json.loads(item) for item in listed.splitlines()]
    print(f"lattice approvals --history --json: approver={line['approver']}")


if __name__ == "__main__":
    asyncio.run(main())
