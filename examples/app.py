"""An app to try every ``lattice`` command on: module-level agents and a module-level team.

``assistant`` has a calculator and a ``pay`` tool that waits for a person's approval;
``team`` is a launch team (lead ``planner``, member ``writer``). With no
``ANTHROPIC_API_KEY`` a scripted fake model answers, streaming its text slowly enough to
watch (and to attach to from another terminal)::

    lattice worker examples/app.py                            # serve them (Ctrl-C stops)
    lattice run examples/app.py:assistant "What is 6 * 7?"
    lattice run examples/app.py:assistant "Tell me a story"   # long: attach, interrupt
    lattice attach WORKFLOW_ID                                # from another terminal
    lattice interrupt WORKFLOW_ID
    lattice run examples/app.py:assistant "Pay invoice INV-7"   # waits for approval
    lattice approvals
    lattice approve WORKFLOW_ID APPROVAL_ID
    lattice run examples/app.py:team "Plan the launch"
    lattice team send examples/app.py:team writer "Draft the announcement"
    lattice team drain examples/app.py:team
    lattice team status examples/app.py:team --json
    lattice team inbox examples/app.py:team lead
    lattice runs

As a script (``python examples/app.py``) it runs one query of each and prints the results.
"""

from __future__ import annotations

import asyncio
import re

from _demo import model_options
from pydantic import BaseModel

from agent_lattice import ToolResult, create_agent, create_team, team_member, tool
from agent_lattice.testing import RecordedRequest, Reply, slow, text, tool_use

STORY = (
    "Once upon a time a workflow ran for a very long time. Every token it streamed was "
    "seen by whoever attached, and when its worker died another one took over, and the "
    "story went on without losing a word. "
) * 3


class Expr(BaseModel):
    a: int
    op: str
    b: int


class Payment(BaseModel):
    invoice: str
    amount_eur: int


def calculate(input: Expr) -> ToolResult:
    ops = {"+": input.a + input.b, "-": input.a - input.b, "*": input.a * input.b}
    if input.op not in ops:
        return ToolResult(content=f"unsupported operator {input.op!r}", is_error=True)
    return ToolResult(content=str(ops[input.op]))


def pay(input: Payment) -> str:
    return f"paid {input.amount_eur} EUR for {input.invoice}"


def fake(request: RecordedRequest) -> Reply:
    """The scripted model of every agent of the app (told apart by system prompt)."""
    system, prompt = request.system or "", request.last_user_text or ""
    if "launch planner" in system:
        if request.tool_results:
            return slow(text("Launch plan: the writer drafts, we ship on Monday."), delay=0.02)
        return tool_use("writer", {"mode": "handoff", "task": "Draft the announcement."})
    if "writer" in system:
        if found := re.search(r"message_id: (\S+)", prompt):
            return tool_use("team_reply", {"message_id": found[1], "body": "Draft ready."})
        return slow(text("Announcement drafted: agent-lattice 1.0 is out."), delay=0.02)
    if request.tool_results:
        result = request.tool_results[0]["content"]
        return slow(text(f"Done: {result}."), delay=0.02)
    if "story" in prompt.lower():
        return slow(text(STORY), delay=0.1)
    if "pay" in prompt.lower():
        invoice = re.search(r"INV-\d+", prompt)
        return tool_use("pay", {"invoice": invoice[0] if invoice else "INV-1", "amount_eur": 120})
    if numbers := re.search(r"(\d+)\s*([-+*])\s*(\d+)", prompt):
        a, op, b = numbers.groups()
        return tool_use("calculator", {"a": int(a), "op": op, "b": int(b)})
    return slow(text("Hello! Ask me to calculate, pay an invoice or tell a story."), delay=0.02)


_model = model_options("app.py", fake)


def _agent(name: str, system_prompt: str, **options: object):
    return create_agent(
        name=name, system_prompt=system_prompt, workspace=False, **_model, **options
    )


assistant = _agent(
    "assistant",
    "You help with arithmetic (the calculator tool) and pay invoices (the pay tool).",
    tools=[
        tool("calculator", "Compute a op b (op: + - *)", Expr, calculate),
        tool("pay", "Pay an invoice", Payment, pay, requires_approval=True),
    ],
)
planner = _agent("planner", "You are the launch planner: hand writing work to the writer.")
writer = _agent("writer", "You are the writer of the launch team.")
team = create_team(
    name="launch",
    lead=planner,
    members=[team_member(name="writer", role="executor", agent=writer)],
)


async def main() -> None:
    result = await assistant.prompt("What is 6 * 7?")
    print(f"assistant: {result.result}")
    result = await team.prompt("Plan the launch")
    print(f"team: {result.result}")


if __name__ == "__main__":
    asyncio.run(main())
