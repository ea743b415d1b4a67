"""A delegated child's own history store (an agent tool's live Agent, a team member) gets
each of the child's messages as it lands (the prompt, each assistant message, each
tool-results message), exactly once across retries and a worker crash; a child's store
bound to fail_on_error stops the child at its first failed append."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from pydantic import BaseModel
from test_history_landing import shape
from test_history_safety import replayer

from agent_lattice import (
    ModelMessage,
    ToolResult,
    agent_tool,
    create_jsonl_history_store,
    create_team,
    define_history_store,
    team_member,
    tool,
)
from agent_lattice.testing import (
    RecordedRequest,
    Reply,
    Script,
    assert_eventually,
    message,
    text,
    tool_use,
    tool_use_block,
)

from conftest import API_KEY, WorkerProcess, by_agent, keep_history, named_agent

HERE = Path(__file__).parent


class Note(BaseModel):
    text: str


async def replays(runtime, workflow_id: str, name: str) -> None:
    """The run's history replays (and, with LATTICE_RECORD_HISTORIES=1, is committed)."""
    history = await keep_history(runtime, workflow_id, name)
    await replayer().replay_workflow(history)
    assert API_KEY not in history.to_json()


def noting(store_log: list[ModelMessage], seen: dict[str, list[str]], ran: list[str]):
    """The child's ``note`` tool: notes what the child's store held while it ran."""

    async def note(input: Note) -> ToolResult:
        seen.setdefault(f"during note {input.text}", shape(store_log))
        ran.append(input.text)
        return ToolResult(content=f"noted {input.text}")

    return tool("note", "Note something", Note, note)


def scribe_model(store_log: list[ModelMessage], seen: dict[str, list[str]]):
    """The child: note the task, then answer; at its answer's request it notes what its
    store held."""

    def model(request: RecordedRequest) -> Reply:
        if not request.tool_results:
            return tool_use("note", {"text": request.last_user_text or ""})
        seen.setdefault(f"answering {len(request.messages)}", shape(store_log))
        return text(f"Noted: {request.last_user_text}")

    return model


async def test_a_child_s_store_gets_each_message_as_it_lands(make_agent, fake_anthropic):
    appended: list[ModelMessage] = []
    replaced: list[list[ModelMessage]] = []
    seen: dict[str, list[str]] = {}
    ran: list[str] = []
    fake_anthropic.set_handler(
        by_agent(
            boss=Script(
                tool_use("ask_scribe", {"task": "A"}),
                text("Done A."),
                tool_use("ask_scribe", {"task": "B"}),
                text("Done B."),
            ),
            scribe=scribe_model(appended, seen),
        )
    )
    store = define_history_store(load=list, append=appended.append, replace=replaced.append)
    scribe = make_agent(
        name="scribe",
        system_prompt="You are scribe.",
        history_store=store,
        tools=[noting(appended, seen, ran)],
    )
    boss = make_agent(
        name="boss", system_prompt="You are boss.", tools=[agent_tool("ask_scribe", scribe)]
    )

    assert (await boss.prompt("Have A noted.")).result == "Done A."
    assert (await boss.prompt("Have B noted.")).result == "Done B."

    assert ran == ["A", "B"]
    # while the child ran, its store held each message that had landed (before: nothing
    # until the child's run ended)
    turn = ["user:text", "assistant:tool_use", "user:tool_result", "assistant:text"]
    assert seen == {
        "during note A": turn[:2],
        "answering 3": turn[:3],
        "during note B": [*turn, *turn[:2]],
        "answering 7": [*turn, *turn[:3]],
    }
    history = await scribe.get_history()
    assert shape(history) == turn * 2
    assert appended == history  # each message once, in order: the run's end wrote nothing more
    assert replaced == []
    await replays(make_agent.runtime, f"scribe-{scribe.session_id}-2", "child_landing")


async def test_a_child_s_fail_on_error_store_stops_the_child_at_its_first_failed_append(
    make_agent, fake_anthropic
):
    appended: list[ModelMessage] = []
    ran: list[str] = []

    def append(message: ModelMessage) -> None:
        if message.role == "assistant":
            raise OSError("disk full")
        appended.append(message)

    fake_anthropic.set_handler(
        by_agent(
            boss=Script(tool_use("ask_scribe", {"task": "A"}), text("The scribe failed.")),
            scribe=Script(tool_use("note", {"text": "A"}), text("never asked")),
        )
    )
    scribe = make_agent(
        name="scribe",
        system_prompt="You are scribe.",
        history_store=define_history_store(
            load=list, append=append, replace=list, fail_on_error=True
        ),
        tools=[noting([], {}, ran)],
    )
    boss = make_agent(
        name="boss", system_prompt="You are boss.", tools=[agent_tool("ask_scribe", scribe)]
    )

    result = await boss.prompt("Have A noted.")

    assert result.result == "The scribe failed."  # the parent's query goes on
    scribe_requests = [r for r in fake_anthropic.requests if "scribe." in (r.system or "")]
    assert len(scribe_requests) == 1  # no model request after the failed append
    assert ran == []  # the calls of a reply that could not be stored do not run
    (answer,) = fake_anthropic.requests[-1].tool_results
    assert answer["is_error"] is True
    assert answer["content"] == (
        "agent 'scribe' did not finish: error_during_execution: "
        "history store append() failed: OSError: disk full"
    )
    assert shape(appended) == ["user:text"]  # the prompt landed, nothing after the failure
    history = await scribe.get_history()
    assert shape(history) == ["user:text", "assistant:tool_use", "user:tool_result"]
    assert "not run" in history[2].blocks[0].content
    assert scribe.interrupt() is False  # idle again
    await replays(make_agent.runtime, f"scribe-{scribe.session_id}-1", "child_store_failed")


async def test_a_child_whose_prompt_cannot_be_stored_makes_no_model_request(
    make_agent, fake_anthropic
):
    def broken(*_):
        raise OSError("read-only file system")

    fake_anthropic.set_handler(
        by_agent(
            boss=Script(tool_use("ask_scribe", {"task": "A"}), text("The scribe failed.")),
            scribe=Script(text("never asked")),
        )
    )
    scribe = make_agent(
        name="scribe",
        system_prompt="You are scribe.",
        history_store=define_history_store(
            load=list, append=broken, replace=broken, fail_on_error=True
        ),
    )
    boss = make_agent(
        name="boss", system_prompt="You are boss.", tools=[agent_tool("ask_scribe", scribe)]
    )

    assert (await boss.prompt("Have A noted.")).result == "The scribe failed."
    assert not any("scribe." in (r.system or "") for r in fake_anthropic.requests)
    (answer,) = fake_anthropic.requests[-1].tool_results
    assert "history store append() failed: OSError: read-only file system" in answer["content"]


async def test_a_team_member_s_store_gets_its_handoff_messages_as_they_land(
    fake_anthropic, lattice_runtime, tmp_path
):
    path = tmp_path / "writer.jsonl"
    seen: dict[str, list[str]] = {}

    def stored() -> list[str]:
        return [f"{m['role']}" for m in map(json.loads, path.read_text().splitlines())]

    def writer(request: RecordedRequest) -> Reply:
        if not request.tool_results:
            return tool_use("note", {"text": "draft"})
        seen["answering"] = stored()
        return text("draft done")

    async def note(input: Note) -> ToolResult:
        seen["during note"] = stored()
        return ToolResult(content="noted")

    def lead(request: RecordedRequest) -> Reply:
        if len(request.messages) == 1:
            return message(
                [tool_use_block("writer", {"mode": "handoff", "task": "draft it"})],
                stop_reason="tool_use",
            )
        return text("Reported.")

    fake_anthropic.set_handler(by_agent(lead=lead, writer=writer))
    member = named_agent(
        fake_anthropic,
        "writer",
        history_store=create_jsonl_history_store(path=path),
        tools=[tool("note", "Note something", Note, note)],
    )
    team = create_team(
        name="desk",
        lead=named_agent(fake_anthropic, "lead"),
        members=[team_member(name="writer", role="executor", agent=member)],
    )

    result = await team.prompt("Draft it.")

    assert result.result == "Reported."
    assert seen == {
        "during note": ["user", "assistant"],
        "answering": ["user", "assistant", "user"],
    }
    stored_messages = await create_jsonl_history_store(path=path).load()
    assert stored_messages == await member.get_history()
    assert shape(stored_messages) == [
        "user:text",
        "assistant:tool_use",
        "user:tool_result",
        "assistant:text",
    ]


# -- a worker killed mid-child ---------------------------------------------------------------


@pytest.fixture
def child_store(tmp_path, monkeypatch) -> Path:
    """The JSONL store of the worker app's child agent (``LATTICE_TEST_CHILD_STORE``)."""
    path = tmp_path / "scribe.jsonl"
    monkeypatch.setenv("LATTICE_TEST_CHILD_STORE", str(path))
    effects = tmp_path / "effects.log"
    effects.touch()
    monkeypatch.setenv("LATTICE_TEST_EFFECTS", str(effects))
    return path


class KeeperRun:
    """``keeper`` (crash_app.py, served by worker processes) asks its child ``scribe``, which
    calls ``tool_name`` then answers; at its answer's request the scribe's store is noted
    (``seen``)."""

    def __init__(self, tool_name: str, child_store: Path, fake, workers, runtime) -> None:
        self.tool_name, self.child_store, self.fake = tool_name, child_store, fake
        self.workers, self.runtime = workers, runtime
        self.seen: dict[str, list[str]] = {}

    def stored(self) -> list[str]:
        """The roles of the messages the scribe's store holds."""
        path = self.child_store
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line)["role"] for line in lines]

    def model(self, request: RecordedRequest) -> Reply:
        done = [r["content"] for r in request.tool_results]
        if "You are keeper." in (request.system or ""):
            return tool_use("ask_scribe", {"task": "note A"}) if not done else text(done[0])
        if not done:
            return tool_use(self.tool_name, {"text": "A"})
        self.seen["answering"] = self.stored()
        return text("Noted A.")

    async def start(self) -> tuple[WorkerProcess, asyncio.Future]:
        """A first worker, and the keeper's query on it."""
        from crash_app import build_keeping_supervisor

        self.fake.set_handler(self.model)
        first = await self.workers()
        keeper = build_keeping_supervisor(self.fake.base_url)
        return first, asyncio.ensure_future(keeper.prompt("Have A noted.", runtime=self.runtime))


def effects_log() -> str:
    """The worker app's side effects (crash_app.py records the child store's replaces)."""
    return Path(os.environ["LATTICE_TEST_EFFECTS"]).read_text()


async def scribe_store_after(child_store: Path, result) -> None:
    assert result.subtype == "success" and result.result == "Noted A."
    assert "replaced" not in effects_log()
    assert shape(await create_jsonl_history_store(path=child_store).load()) == [
        "user:text",
        "assistant:tool_use",
        "user:tool_result",
        "assistant:text",
    ]  # each once, appended: the new worker wrote nothing twice, the run's end nothing again


@pytest.mark.slow
async def test_a_worker_killed_mid_child_loses_no_child_message_and_writes_none_twice(
    remote_runtime, fake_anthropic, workers, child_store
):
    run = KeeperRun("block", child_store, fake_anthropic, workers, remote_runtime)
    first, query = await run.start()
    await assert_eventually(lambda: "block-start:A" in effects_log(), within=30)
    at_kill = run.stored()
    first.kill()  # while the child's tool runs
    await workers()
    result = await asyncio.wait_for(query, 90)

    assert at_kill == ["user", "assistant"]  # what had landed was in the store at the kill
    # the new worker went on writing each message as it landed
    assert run.seen == {"answering": ["user", "assistant", "user"]}
    await scribe_store_after(child_store, result)


@pytest.mark.slow
async def test_a_worker_killed_right_after_a_child_message_was_written_writes_it_once(
    remote_runtime, fake_anthropic, workers, child_store, monkeypatch
):
    """The worker dies inside the store's append, after the write and before its activity
    completed: the new worker's attempt finds the message in the store and writes it no
    more."""
    monkeypatch.setenv("LATTICE_TEST_DIE_AFTER_APPEND", "assistant")
    run = KeeperRun("record", child_store, fake_anthropic, workers, remote_runtime)
    first, query = await run.start()
    await asyncio.to_thread(first.proc.wait, 60)  # killed by its own append
    assert run.stored() == ["user", "assistant"]
    await workers()
    result = await asyncio.wait_for(query, 90)

    assert run.seen == {"answering": ["user", "assistant", "user"]}
    assert len([r for r in fake_anthropic.requests if "scribe." in (r.system or "")]) == 2
    await scribe_store_after(child_store, result)
