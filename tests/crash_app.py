"""An app served by worker subprocesses in the crash tests.

Tools write their side effects to the file named by ``LATTICE_TEST_EFFECTS`` so the test can
count how often each really ran, across worker processes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel

from agent_lattice import ToolResult, create_agent, tool

API_KEY = "sk-ant-test-SECRET-4f2b9c"


class Note(BaseModel):
    text: str


def _effects() -> Path:
    return Path(os.environ["LATTICE_TEST_EFFECTS"])


def _record(line: str) -> list[str]:
    path = _effects()
    with path.open("a") as f:
        f.write(line + "\n")
    return path.read_text().splitlines()


def record(input: Note) -> ToolResult:
    _record(f"record:{input.text}")
    return ToolResult(content=f"recorded {input.text}")


async def block(input: Note) -> ToolResult:
    starts = _record(f"block-start:{input.text}")
    if starts.count(f"block-start:{input.text}") == 1:
        await asyncio.sleep(120)  # the first attempt is killed while it waits here
    _record(f"block-done:{input.text}")
    return ToolResult(content=f"blocked {input.text}")


async def once(input: Note) -> ToolResult:
    """Not idempotent: a call whose worker is killed must not run again."""
    _record(f"once-start:{input.text}")
    await asyncio.sleep(120)  # killed while it waits here
    _record(f"once-done:{input.text}")
    return ToolResult(content=f"once {input.text}")


def build_agent(base_url: str):
    return create_agent(
        name="crashy",
        api_key=API_KEY,
        base_url=base_url,
        model="claude-test",
        tools=[
            tool("record", "Record a note", Note, record),
            # idempotent: a call cut off by a crash runs once more on another worker
            tool("block", "Record a note slowly", Note, block, idempotent=True),
            tool("once", "Record a note once", Note, once),
        ],
    )


def charge(input: Note) -> ToolResult:
    """Not idempotent, and quick: what takes time is the audit after it (below)."""
    _record(f"charge:{input.text}")
    return ToolResult(content=f"charged {input.text}")


async def audit(ctx) -> None:
    """An on_tool_result hook that writes each result to an audit log, slowly the first time:
    the test kills the worker while it writes, after the tool ran and its result was
    recorded."""
    line = f"audit:{ctx.tool_name}:{ctx.result.content}"
    if _record(line).count(line) == 1:
        await asyncio.sleep(3)


def build_audited_agent(base_url: str):
    return create_agent(
        name="audited",
        api_key=API_KEY,
        base_url=base_url,
        model="claude-test",
        tools=[
            tool("charge", "Charge a card", Note, charge),
            tool("charge_safely", "Charge a card, deduplicated", Note, charge, idempotent=True),
            tool("tally", "Count a note", Note, record, cheap=True),
            tool("once_cheap", "Record a note once, locally", Note, once, cheap=True),
        ],
        hooks={"on_tool_result": audit},
    )


def build_approving_agent(base_url: str):
    """Its ``pay`` calls wait for a person's approval."""
    return create_agent(
        name="approving",
        api_key=API_KEY,
        base_url=base_url,
        model="claude-test",
        tools=[tool("pay", "Pay an invoice", Note, record, requires_approval=True)],
    )


def build_compacting_agent(base_url: str):
    return create_agent(
        name="compacting",
        api_key=API_KEY,
        base_url=base_url,
        model="claude-test",
        tools=[tool("record", "Record a note", Note, record)],
        auto_compact={"threshold_tokens": 100, "keep_recent_messages": 2},
    )


def _note_tools():
    """``record``, and ``block`` (idempotent: a call cut off runs again)."""
    return [
        tool("record", "Record a note", Note, record),
        tool("block", "Record a note slowly", Note, block, idempotent=True),
    ]


def build_supervisor(base_url: str):
    from agent_lattice import agent_tool, define_agent

    worker_spec = define_agent(
        name="subworker",
        api_key=API_KEY,
        base_url=base_url,
        model="claude-test",
        system_prompt="You are subworker.",
        tools=_note_tools(),
    )
    return create_agent(
        name="boss",
        api_key=API_KEY,
        base_url=base_url,
        model="claude-test",
        system_prompt="You are boss.",
        tools=[agent_tool("delegate", worker_spec)],
    )


def _dying_store(path: str):
    """A JSONL history store whose replaces are recorded as side effects; with
    ``LATTICE_TEST_DIE_AFTER_APPEND=ROLE`` the first append of a ROLE message kills this
    worker right after the write (before its activity completes)."""
    from agent_lattice import create_jsonl_history_store, define_history_store

    inner = create_jsonl_history_store(path=path)

    async def append(message) -> None:
        await inner.append(message)
        if os.environ.get("LATTICE_TEST_DIE_AFTER_APPEND") == message.role:
            if _record(f"appended:{message.role}").count(f"appended:{message.role}") == 1:
                os.kill(os.getpid(), signal.SIGKILL)

    async def replace(messages) -> None:
        _record(f"replaced:{len(messages)}")
        await inner.replace(messages)

    return define_history_store(load=inner.load, append=append, replace=replace)


def build_thrifty_supervisor(base_url: str):
    """A supervisor with a budget (priced, $0.05) whose delegate spends until stopped."""
    from agent_lattice import agent_tool

    spender = create_agent(
        name="spender",
        api_key=API_KEY,
        base_url=base_url,
        model="claude-sonnet-4-5",
        system_prompt="You are spender.",
        tools=_note_tools(),
        max_turns=30,
    )
    return create_agent(
        name="thrifty",
        api_key=API_KEY,
        base_url=base_url,
        model="claude-sonnet-4-5",
        system_prompt="You are thrifty.",
        tools=[agent_tool("spend", spender)],
        max_budget_usd=0.05,
    )


def build_keeping_supervisor(base_url: str):
    """A supervisor whose child is a live Agent with its own JSONL history store (at
    ``LATTICE_TEST_CHILD_STORE``)."""
    from agent_lattice import agent_tool

    scribe = create_agent(
        name="scribe",
        api_key=API_KEY,
        base_url=base_url,
        model="claude-test",
        system_prompt="You are scribe.",
        tools=_note_tools(),
        history_store=_dying_store(os.environ.get("LATTICE_TEST_CHILD_STORE", "scribe.jsonl")),
    )
    return create_agent(
        name="keeper",
        api_key=API_KEY,
        base_url=base_url,
        model="claude-test",
        system_prompt="You are keeper.",
        tools=[agent_tool("ask_scribe", scribe)],
    )


def build_team(base_url: str):
    from agent_lattice import create_bare_agent, create_team, team_member

    def member(name: str, tools):
        return create_bare_agent(
            name=name,
            api_key=API_KEY,
            base_url=base_url,
            model="claude-test",
            system_prompt=f"You are {name}.",
            tools=tools,
        )

    return create_team(
        name="crew",
        lead=member("chief", []),
        members=[
            team_member(
                name="fast", agent=member("fast", [tool("record", "Record", Note, record)])
            ),
            team_member(
                name="slow",
                agent=member("slow", [tool("block", "Block", Note, block, idempotent=True)]),
            ),
        ],
        runner={"max_concurrent_work_items": 2},
    )


async def _serve(address: str, base_url: str) -> None:
    from contextlib import AsyncExitStack

    from agent_lattice.client import Runtime
    from agent_lattice.worker import create_workers

    runtime = await Runtime.connect(address, inline_workers=False)
    agents = [
        build_agent(base_url),
        build_audited_agent(base_url),
        build_compacting_agent(base_url),
        build_approving_agent(base_url),
        build_supervisor(base_url),
        build_keeping_supervisor(base_url),
        build_thrifty_supervisor(base_url),
        build_team(base_url).lead,
    ]
    # a test that waits out a killed worker's sticky queue may shorten it (default 10 s)
    sticky = float(os.environ.get("LATTICE_TEST_STICKY_S", "2"))
    options = {"sticky_queue_schedule_to_start_timeout": timedelta(seconds=sticky)}
    async with AsyncExitStack() as stack:
        for worker in create_workers(runtime.client, agents, **options):
            await stack.enter_async_context(worker)
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1], sys.argv[2]))
