"""The app the worker-versioning test deploys twice (``lattice worker`` builds v1 and v2).

Both builds have the same definition (so the same task queue); what differs is the code's
build, which its tools name (``LATTICE_TEST_BUILD``): a tool result says which build ran it.
"""

from __future__ import annotations

import os

from pydantic import BaseModel

from agent_lattice import create_agent, tool


class Invoice(BaseModel):
    number: str


class Nothing(BaseModel):
    pass


def _build() -> str:
    return os.environ.get("LATTICE_TEST_BUILD", "unknown")


def pay(input: Invoice) -> str:
    return f"invoice {input.number} paid by build {_build()}"


def which_build(_: Nothing) -> str:
    return f"build {_build()}"


agent = create_agent(
    name="rollout",
    model="claude-test",
    api_key=os.environ.get("ANTHROPIC_API_KEY", "test"),
    base_url=os.environ.get("ANTHROPIC_BASE_URL"),
    tools=[
        tool("pay", "Pay an invoice", Invoice, pay, requires_approval=True),
        tool("which_build", "Name the build serving this query", Nothing, which_build),
    ],
)
