"""A run ended from outside keeps every turn it had landed.

``temporal workflow terminate`` (or the UI's Terminate, or a run timeout) closes a query's run
without an output: no result of its own, no transcript head. Its turns happened all the same:
a tool that ran had its effect. The session goes on from what the run landed, rebuilt from
its history (``client/_landed``): the calls that finished with their results, the one cut
off answered as not finished; and a history store that already holds those messages is
never rewound to the query before.
"""

from __future__ import annotations

import asyncio
import json
import uuid

from pydantic import BaseModel

from agent_lattice import ModelMessage, create_bare_agent, create_jsonl_history_store, tool
from agent_lattice.testing import Script, text, tool_use

from conftest import API_KEY


class Note(BaseModel):
    text: str


def roles(messages: list[ModelMessage]) -> list[str]:
    return [m.role for m in messages]


class Tools:
    """``record`` (its calls noted in ``effects``) and ``hold`` (never returns; ``holding``
    is set once it runs)."""

    def __init__(self) -> None:
        self.effects: list[str] = []
        self.holding = asyncio.Event()

        async def record(note: Note) -> str:
            self.effects.append(note.text)
            return f"recorded {note.text}"

        async def hold(note: Note) -> str:
            self.holding.set()
            await asyncio.sleep(3600)
            return "never"

        self.tools = [tool("record", "Record.", Note, record), tool("hold", "Hold.", Note, hold)]

    def agent(self, fake, name: str, session: str, **options):
        """An agent of ``session`` answered by ``fake``, with these tools."""
        return create_bare_agent(
            api_key=API_KEY,
            base_url=fake.base_url,
            model="claude-test",
            name=name,
            session_id=session,
            tools=self.tools,
            **options,
        )


async def test_a_terminated_run_keeps_its_turns_in_the_session_and_the_store(
    fake_anthropic, lattice_runtime, tmp_path
):
    made = Tools()
    effects, holding = made.effects, made.holding
    fake_anthropic.set_handler(
        Script(
            tool_use("record", {"text": "paid"}),
            tool_use("hold", {"text": "wait"}),
            text("after the terminate"),
        )
    )
    session = f"s{uuid.uuid4().hex[:10]}"
    path = tmp_path / "session.jsonl"

    def agent():
        store = create_jsonl_history_store(path=path)
        return made.agent(fake_anthropic, "terminated", session, history_store=store)

    first = agent()
    messages: list = []

    async def consume() -> None:
        async for message in first.query("pay, then wait"):
            messages.append(message)

    consuming = asyncio.create_task(consume())
    await asyncio.wait_for(holding.wait(), 30)
    workflow_id = f"terminated-{session}-1"
    await lattice_runtime.client.get_workflow_handle(workflow_id).terminate("an operator")
    await asyncio.wait_for(consuming, 60)
    assert messages[-1].is_error  # the caller hears the run ended without its result

    # the same agent goes on from what the run landed: the paid call and its result, the
    # held one answered as not finished
    history = await first.get_history()
    assert roles(history) == ["user", "assistant", "user", "assistant", "user"]
    assert history[2].content[0].content == "recorded paid"
    cut = history[4].content[0]
    assert cut.is_error and "did not finish" in cut.content and "hold" in cut.content
    stored = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(stored) == 5, stored  # the store was not rewound to before the query
    assert effects == ["paid"]

    # a new agent of the session resumes with the same conversation, and asks on from it
    second = agent()
    result = await second.prompt("and now?")
    assert result.result == "after the terminate"
    sent = fake_anthropic.requests[-1].messages
    # (the cut call's result and the new prompt travel as one user turn)
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user"]
    assert "recorded paid" in json.dumps(sent[2])
    assert "did not finish" in json.dumps(sent[4]) and "and now?" in json.dumps(sent[4])
    assert len(path.read_text().splitlines()) == 7  # the new query's prompt and reply appended
    assert effects == ["paid"]  # nothing ran twice


async def test_a_new_process_resumes_a_terminated_run_with_what_it_landed(
    fake_anthropic, lattice_runtime, tmp_path
):
    """Without a history store: the session resumed from Temporal alone keeps the turns."""
    made = Tools()
    holding = made.holding

    fake_anthropic.set_handler(
        Script(tool_use("record", {"text": "a"}), tool_use("hold", {"text": "b"}), text("resumed"))
    )
    session = f"s{uuid.uuid4().hex[:10]}"

    def agent():
        return made.agent(fake_anthropic, "cutoff", session)

    running = asyncio.create_task(agent().prompt("go"))
    await asyncio.wait_for(holding.wait(), 30)
    handle = lattice_runtime.client.get_workflow_handle(f"cutoff-{session}-1")
    await handle.terminate("an operator")
    await asyncio.wait_for(running, 60)

    resumed = agent()
    result = await resumed.prompt("again")
    assert result.result == "resumed"
    assert roles(await resumed.get_history()) == [
        *["user", "assistant", "user", "assistant", "user"],
        *["user", "assistant"],
    ]
