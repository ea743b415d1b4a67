"""Durable human approval, the way a stateless web service uses it.

A payment tool is declared ``requires_approval=True``: each call waits for a person's
decision, durably (the wait is workflow state: no worker holds it, and workers may restart
while it waits). The flow, as three requests to a service that keeps nothing itself:

1. ``POST /payments``: ``await agent.start(prompt)`` starts the query and returns its
   workflow id at once; a worker (``lattice worker examples/approval.py``) runs it.
2. ``GET /approvals`` and ``POST /approvals/<id>``, from another process:
   ``list_pending_approvals()`` and ``resolve_approval()`` (here: the ``lattice approvals``
   and ``lattice approve`` commands, in processes of their own).
3. ``GET /payments/<id>``: the run's messages and result (``lattice attach <id>``).

Run it: ``python examples/approval.py`` (it starts the worker process itself).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from _demo import model_options
from pydantic import BaseModel

from agent_lattice import (
    PendingApproval,
    ResultMessage,
    Runtime,
    create_agent,
    list_pending_approvals,
    tool,
)
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use

HERE = Path(__file__).resolve()


class Payment(BaseModel):
    invoice: str
    amount_eur: int


def pay(input: Payment) -> str:
    return f"paid {input.amount_eur} EUR for {input.invoice}"


def fake(request: RecordedRequest) -> Reply:
    if not request.tool_results:
        return tool_use("pay", {"invoice": "INV-7", "amount_eur": 120})
    return text(f"Done: {request.tool_results[0]['content']}.")


# module level: `lattice worker examples/approval.py` serves it
agent = create_agent(
    name="payments",
    system_prompt="You pay invoices with the pay tool.",
    tools=[tool("pay", "Pay an invoice", Payment, pay, requires_approval=True)],
    workspace=False,
    **model_options("approval.py", fake),
)


async def lattice(*argv: str) -> str:
    """A ``lattice`` command in a process of its own: another machine, as far as it knows."""
    command = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_lattice.cli", *argv, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await command.communicate()
    if command.returncode != 0:
        raise SystemExit(f"lattice {' '.join(argv)} failed ({command.returncode})")
    return out.decode()


async def waiting(workflow_id: str, runtime: Runtime) -> PendingApproval:
    """The call that waits in the run, once it waits."""
    for _ in range(300):
        pending = await list_pending_approvals(workflow_id, runtime=runtime)
        if pending:
            return pending[0]
        await asyncio.sleep(0.1)
    raise SystemExit(f"nothing waits for approval in {workflow_id}")


async def main() -> None:
    # as `lattice worker examples/approval.py` would run on a worker machine
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent_lattice.cli",
        "worker",
        str(HERE),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    runtime = await Runtime.connect(inline_workers=False)  # this process serves nothing
    try:
        # 1. start the query, answer with its id
        workflow_id = await agent.start("Pay invoice INV-7 (120 EUR).", runtime=runtime)
        print(f"started {workflow_id}")

        # 2. a person looks at what waits, and approves it, from elsewhere
        request = await waiting(workflow_id, runtime)
        print(f"waiting for approval: {request.tool_name} {json.dumps(request.tool_input)}")
        listed = [json.loads(line) for line in (await lattice("approvals", "--json")).splitlines()]
        assert request.approval_id in [item["approval_id"] for item in listed]
        print((await lattice("approve", workflow_id, request.approval_id)).strip())

        # 3. collect the result
        async for message in runtime.durable_messages(workflow_id):
            if isinstance(message, ResultMessage):
                print(f"result: {message.result}")
    finally:
        worker.terminate()
        await worker.wait()
        await runtime.close()


if __name__ == "__main__":
    asyncio.run(main())
