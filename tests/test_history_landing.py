"""History stores get each message as it lands (the prompt, each assistant message, each
tool-results message), exactly once across retries, interrupts, compaction and crashes; a
store bound to fail_on_error stops the query at its first failed append; the JSONL store
survives a write torn inside a multi-byte character."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from history_app import PROMPT, build
from test_compaction import handler as compacting_handler

from agent_lattice import (
    HistoryStoreError,
    HookError,
    ModelMessage,
    StreamEventMessage,
    ToolResult,
    create_jsonl_history_store,
    define_history_store,
    tool,
)
from agent_lattice.testing import (
    RecordedRequest,
    Reply,
    Script,
    assert_eventually,
    collect,
    hang,
    slow,
    text,
    tool_use,
)

from conftest import Expr, make_calculator

HERE = Path(__file__).parent


def shape(messages: list[ModelMessage]) -> list[str]:
    """Each message as role:kind (``user:text``, ``assistant:tool_use``, ``user:tool_result``)."""
    out = []
    for m in messages:
        kind = "text" if isinstance(m.content, str) else m.blocks[-1].type
        out.append(f"{m.role}:{kind}")
    return out


async def run(agent, prompt: str, how: str, **options):
    """The query's result through ``query()`` or ``prompt()``."""
    if how == "query":
        return (await collect(agent.query(prompt, **options)))[-1]
    return await agent.prompt(prompt, **options)


# -- JSONL: a torn write --------------------------------------------------------------------


async def test_jsonl_load_loses_only_a_line_torn_inside_a_multibyte_character(
    make_agent, fake_anthropic, tmp_path
):
    path = tmp_path / "torn.jsonl"
    first = {"role": "user", "content": "Je m'appelle Zoé."}
    # U+2028 is a line separator to str.splitlines(), not to JSONL (json.dumps keeps it raw)
    second = {"role": "assistant", "content": [{"type": "text", "text": "Enchanté,\u2028Zoé."}]}
    path.write_bytes(
        json.dumps(first, ensure_ascii=False).encode()
        + b'\n{"role":"user","content":"caf\xc3\n'
        + json.dumps(second, ensure_ascii=False).encode()
        + b"\n"
    )
    store = create_jsonl_history_store(path=path)

    assert [m.to_wire() for m in await store.load()] == [first, second]

    fake_anthropic.set_handler(Script(text("Zoé.")))
    agent = make_agent(history_store=store)
    result = await agent.prompt("Comment je m'appelle ?")
    assert result.result == "Zoé."
    assert fake_anthropic.requests[0].messages[:2] == [first, second]
    assert await store.load() == await agent.get_history()


# -- as they land ----------------------------------------------------------------------------


def held_until(appended: list[ModelMessage], count: int, seen: list[list[str]]):
    """A final reply that waits (10 s at most) until the store holds ``count`` messages, and
    notes what the store held when the model was asked."""

    def reply(request: RecordedRequest) -> Reply:
        deadline = time.monotonic() + 10
        while len(appended) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        seen.append(shape(appended))
        return text("2")

    return reply


@pytest.mark.parametrize("how", ["query", "prompt"])
async def test_each_message_reaches_the_store_as_it_lands(make_agent, fake_anthropic, how):
    appended: list[ModelMessage] = []
    replaced: list[list[ModelMessage]] = []
    seen: list[list[str]] = []
    fake_anthropic.set_handler(
        Script(tool_use("calculator", {"expr": "1+1"}), held_until(appended, 3, seen))
    )
    store = define_history_store(load=list, append=appended.append, replace=replaced.append)
    agent = make_agent(history_store=store, tools=[make_calculator()])

    result = await run(agent, "What is 1+1?", how)

    assert result.result == "2"
    # the prompt, the first assistant message and its tool results were in the store before
    # the final model request was answered (before: nothing until the query ended)
    assert seen == [["user:text", "assistant:tool_use", "user:tool_result"]]
    assert appended == await agent.get_history()  # each message once, in order
    assert replaced == []


@pytest.mark.parametrize("how", ["query", "prompt"])
async def test_fail_on_error_stops_the_query_at_the_first_failed_append(
    make_agent, fake_anthropic, how
):
    appended: list[ModelMessage] = []
    failed = asyncio.Event()
    ran: list[str] = []

    def append(message: ModelMessage) -> None:
        if message.role == "assistant":
            failed.set()
            raise OSError("disk full")
        appended.append(message)

    async def calculator(input: Expr) -> ToolResult:
        # the tool is still running when the append fails; the run then stops without
        # asking the model again (before: the failure surfaced after the whole query)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(failed.wait(), 10)
        await asyncio.sleep(0.5)
        ran.append(input.expr)
        return ToolResult(content="2")

    fake_anthropic.set_handler(Script(tool_use("calculator", {"expr": "1+1"}), text("2")))
    store = define_history_store(load=list, append=append, replace=list, fail_on_error=True)
    agent = make_agent(
        history_store=store, tools=[tool("calculator", "Add 'a+b'", Expr, calculator)]
    )

    with pytest.raises(HistoryStoreError, match="append\\(\\) failed: OSError: disk full"):
        await run(agent, "What is 1+1?", how)

    assert len(fake_anthropic.requests) == 1  # no model request after the failed append
    assert ran == ["1+1"]  # the running tool finished once; its result is kept
    assert shape(await agent.get_history()) == [
        "user:text",
        "assistant:tool_use",
        "user:tool_result",
    ]
    assert shape(appended) == ["user:text"]
    assert agent.interrupt() is False  # idle again


async def test_a_failed_prompt_append_starts_no_run(make_agent, fake_anthropic):
    def broken(*_):
        raise OSError("read-only file system")

    fake_anthropic.set_handler(Script(text("never")))
    agent = make_agent(
        history_store=define_history_store(
            load=list, append=broken, replace=broken, fail_on_error=True
        )
    )
    with pytest.raises(HistoryStoreError, match="read-only file system"):
        await agent.prompt("hi")
    assert fake_anthropic.requests == []
    assert await agent.get_history() == []


async def test_an_interrupted_query_leaves_what_landed_and_no_partial_reply(
    make_agent, fake_anthropic, tmp_path
):
    path = tmp_path / "interrupted.jsonl"
    store = create_jsonl_history_store(path=path)
    fake_anthropic.set_handler(
        Script(
            tool_use("calculator", {"expr": "1+1"}),
            slow(text("The answer is a long one " * 20), delay=0.2),
            text("Asked again: 2."),
        )
    )
    agent = make_agent(history_store=store, tools=[make_calculator()])
    at_interrupt: list[str] = []

    async for message in agent.query("What is 1+1?"):
        if isinstance(message, StreamEventMessage) and message.turn == 2 and not at_interrupt:
            if message.event["type"] == "content_block_delta":
                at_interrupt.extend(shape(await store.load()))
                agent.interrupt()
    assert message.subtype == "interrupted"

    # the turn before the interrupt was in the file while the reply streamed
    assert at_interrupt == ["user:text", "assistant:tool_use", "user:tool_result"]
    assert await store.load() == await agent.get_history()
    assert "long one" not in path.read_text()  # the interrupted reply is never stored

    result = await agent.prompt("Again?")
    assert result.result == "Asked again: 2."
    assert await store.load() == await agent.get_history()


async def test_a_cancelled_prompt_leaves_the_store_equal_to_the_history(
    make_agent, fake_anthropic, tmp_path
):
    store = create_jsonl_history_store(path=tmp_path / "cancelled.jsonl")
    fake_anthropic.set_handler(Script(tool_use("calculator", {"expr": "1+1"}), hang(30)))
    agent = make_agent(history_store=store, tools=[make_calculator()])

    task = asyncio.ensure_future(agent.prompt("What is 1+1?"))
    await assert_eventually(lambda: len(fake_anthropic.requests) == 2)  # the hung request
    await assert_eventually(async_len(store, 3))  # what landed is stored while it hangs
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert shape(await agent.get_history()) == [
        "user:text",
        "assistant:tool_use",
        "user:tool_result",
    ]
    assert await store.load() == await agent.get_history()


def async_len(store, n: int):
    async def check() -> bool:
        return len(await store.load()) >= n

    return check


async def test_a_turn_the_run_drops_leaves_the_store_too(make_agent, fake_anthropic, tmp_path):
    """A failing hook drops its turn from the conversation after the assistant message had
    landed: the store is rewritten to the conversation (no tool_use without its result)."""
    store = create_jsonl_history_store(path=tmp_path / "dropped.jsonl")

    def on_tool_result(ctx):
        raise RuntimeError("hook broke")

    fake_anthropic.set_handler(Script(tool_use("calculator", {"expr": "1+1"})))
    agent = make_agent(
        history_store=store, tools=[make_calculator()], hooks={"on_tool_result": on_tool_result}
    )
    with pytest.raises(HookError):
        await agent.prompt("What is 1+1?")
    assert shape(await agent.get_history()) == ["user:text"]
    assert await store.load() == await agent.get_history()


def compacting(make_agent, fake_anthropic, **options):
    """An agent whose first query compacts between its tool call and its answer
    (``4, as computed.``); the model answers ``Still 4.`` afterwards."""
    fake_anthropic.set_handler(
        compacting_handler(
            tool_use(
                "calculator", {"expr": "2+2"}, usage={"input_tokens": 500, "output_tokens": 5}
            ),
            text("4, as computed.", usage={"input_tokens": 20, "output_tokens": 4}),
            text("Still 4."),
        )
    )
    return make_agent(
        tools=[make_calculator()],
        auto_compact={"threshold_tokens": 100, "keep_recent_messages": 2},
        **options,
    )


async def test_a_compacted_query_ends_with_the_store_replaced_once(
    make_agent, fake_anthropic, tmp_path
):
    store = create_jsonl_history_store(path=tmp_path / "compacted.jsonl")
    agent = compacting(make_agent, fake_anthropic, history_store=store)
    result = await agent.prompt("What is 2+2?")
    assert result.result == "4, as computed."
    history = await agent.get_history()
    assert len(history) == 4 and "The user asked for 2+2" in history[0].blocks[0].text
    assert await store.load() == history  # replaced by the compacted conversation, no duplicates


async def test_a_store_the_host_cut_is_not_caught_up_from_temporal(
    make_agent, fake_anthropic, tmp_path
):
    """Catching up appends only to a store cut inside a query (a dead process's), never to
    one the host cut with replace_history() in another Agent over the session."""
    path, session = tmp_path / "cut.jsonl", f"s{uuid.uuid4().hex[:10]}"
    fake_anthropic.set_handler(Script(text("1"), text("2"), text("3")))
    first = make_agent(session_id=session, history_store=create_jsonl_history_store(path=path))
    await first.prompt("one")
    await first.prompt("two")
    undo = make_agent(session_id=session, history_store=create_jsonl_history_store(path=path))
    await undo.replace_history((await first.get_history())[:2])  # the last exchange dropped

    later = make_agent(session_id=session, history_store=create_jsonl_history_store(path=path))
    result = await later.prompt("three")

    assert result.workflow_id.endswith(f"{session}-3")  # the numbering goes on
    assert [m["content"] for m in fake_anthropic.requests[-1].messages][::2] == ["one", "three"]
    assert await create_jsonl_history_store(path=path).load() == await later.get_history()


async def test_a_store_cut_inside_a_compacted_query_takes_temporal_s_conversation(
    make_agent, fake_anthropic, tmp_path
):
    """A process that died inside a query the run then compacted left its store uncompacted
    and ending with a tool call: the next Agent over the session replaces it with what
    Temporal kept (before: the store's cut conversation, a tool_use without its result)."""
    session = f"s{uuid.uuid4().hex[:10]}"
    ran = compacting(make_agent, fake_anthropic, session_id=session)
    await ran.prompt("What is 2+2?")
    # what the dead process's store held: the prompt and the tool call, as they landed
    path = tmp_path / "cut.jsonl"
    tool_call = (await ran.get_history())[1]
    assert shape([tool_call]) == ["assistant:tool_use"]
    await create_jsonl_history_store(path=path).replace(
        [ModelMessage(role="user", content="What is 2+2?"), tool_call]
    )
    later = make_agent(
        session_id=session,
        tools=[make_calculator()],
        history_store=create_jsonl_history_store(path=path),
    )
    result = await later.prompt("And now?")

    assert result.result == "Still 4."
    history = await later.get_history()
    assert "The user asked for 2+2" in history[0].blocks[0].text  # the compacted conversation
    assert await create_jsonl_history_store(path=path).load() == history


async def test_a_store_cut_inside_a_terminated_query_keeps_its_prompt(
    make_agent, fake_anthropic, tmp_path
):
    """The last query's workflow was terminated (``temporal workflow terminate``) after its
    process died inside it, waiting on its model: the next Agent continues from what that run
    had landed, its prompt included, and the store that holds it is left as it is (before:
    it was rewound to the query before; earlier still, emptied)."""
    session = f"s{uuid.uuid4().hex[:10]}"
    fake_anthropic.set_handler(Script(text("1"), hang(30), text("3")))
    first = make_agent(session_id=session)
    await first.prompt("one")
    hung = asyncio.ensure_future(first.prompt("two"))
    await assert_eventually(lambda: len(fake_anthropic.requests) == 2)
    await make_agent.runtime.client.get_workflow_handle(f"agent-{session}-2").terminate()
    assert (await hung).is_error
    # what the dead process's store held: the first exchange and the terminated prompt
    path = tmp_path / "terminated.jsonl"
    held = [*(await first.get_history())[:2], ModelMessage(role="user", content="two")]
    await create_jsonl_history_store(path=path).replace(held)

    later = make_agent(session_id=session, history_store=create_jsonl_history_store(path=path))
    result = await later.prompt("three")

    assert result.result == "3"
    sent = fake_anthropic.requests[-1].messages
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert "two" in json.dumps(sent[2]) and "three" in json.dumps(sent[2])  # one user turn
    stored = await create_jsonl_history_store(path=path).load()
    assert stored[:3] == held and stored == await later.get_history()


# -- crashes ---------------------------------------------------------------------------------


@pytest.fixture
def app_env(lattice_server, fake_anthropic, task_queue_prefix) -> dict[str, str]:
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": lattice_server,
        "LATTICE_TEST_BASE_URL": fake_anthropic.base_url,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "PYTHONUNBUFFERED": "1",
    }


def spawn(*argv: object, env: dict[str, str], log: Path | None = None) -> subprocess.Popen[bytes]:
    """``python ARGV...`` with its output in ``log`` (or dropped)."""
    with open(log or os.devnull, "wb") as out:
        return subprocess.Popen(
            [sys.executable, *map(str, argv)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


@pytest.fixture
def workers(app_env, tmp_path):
    """``lattice worker tests/history_app.py`` processes, stopped at the end."""
    started: list[subprocess.Popen[bytes]] = []

    async def start() -> subprocess.Popen[bytes]:
        log = tmp_path / f"worker{len(started)}.out"
        proc = spawn(
            "-m",
            "agent_lattice.cli",
            "worker",
            HERE / "history_app.py",
            env=app_env,
            log=log,
        )
        started.append(proc)
        await assert_eventually(lambda: "ready" in log.read_text(errors="replace"), within=60)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def first_answer_killed(kill: threading.Event, path: Path, seen: list[list[str]]) -> object:
    """The model: record A, then answer; the first request is killed while it streams. The
    answer waits (10 s at most) for the store at ``path`` to hold the turn before it."""
    calls = {"first": 0}

    def model(request: RecordedRequest) -> Reply:
        if request.tool_results:
            deadline = time.monotonic() + 10
            while path.read_text().count("\n") < 3 and time.monotonic() < deadline:
                time.sleep(0.02)
            seen.append([json.loads(line)["role"] for line in path.read_text().splitlines()])
            return text("Recorded.")
        calls["first"] += 1
        if calls["first"] == 1:
            kill.set()
            return slow(tool_use("record", {"text": "A"}), delay=0.5)
        return tool_use("record", {"text": "A"})

    return model


@pytest.mark.slow
async def test_a_retried_model_request_is_stored_once(
    remote_runtime, fake_anthropic, workers, tmp_path
):
    kill = threading.Event()
    path, seen = tmp_path / "retried.jsonl", []
    path.touch()
    fake_anthropic.set_handler(first_answer_killed(kill, path, seen))
    first = await workers()
    store = create_jsonl_history_store(path=path)
    agent = build(history_store=store)

    query = asyncio.ensure_future(agent.prompt(PROMPT, runtime=remote_runtime))
    await assert_eventually(kill.is_set, within=60)
    first.send_signal(signal.SIGKILL)  # mid-stream of the first model request
    first.wait(10)
    await workers()
    result = await asyncio.wait_for(query, 60)

    assert result.subtype == "success" and result.result == "Recorded."
    assert len(fake_anthropic.requests) == 3  # the first request ran twice
    assert seen == [["user", "assistant", "user"]]  # stored as they landed, the retried once
    stored = await store.load()
    assert shape(stored) == [
        "user:text",
        "assistant:tool_use",
        "user:tool_result",
        "assistant:text",
    ]
    assert stored == await agent.get_history()


def answered_once_dead(answer: threading.Event):
    """The model of the killed-client tests: record A; the final answer waits until
    ``answer`` is set (the client is dead); "No." to the later Agent's prompt."""

    def model(request: RecordedRequest) -> Reply:
        if request.last_user_text == "Anything else?":
            return text("No.")
        if not request.tool_results:
            return tool_use("record", {"text": "A"})
        answer.wait(20)
        return text("Recorded.")

    return model


async def killed_after_a_tool_result(client: subprocess.Popen[bytes], path: Path):
    """SIGKILL ``client`` once its store at ``path`` holds a tool result; the store, which
    already holds every message that landed before the death."""
    try:
        await assert_eventually(
            lambda: path.exists() and path.read_text().count("\n") >= 3, within=30
        )
        client.send_signal(signal.SIGKILL)
        client.wait(10)
    finally:
        if client.poll() is None:
            client.kill()
    store = create_jsonl_history_store(path=path)
    assert shape(await store.load()) == ["user:text", "assistant:tool_use", "user:tool_result"]
    return store


async def caught_up(result, session: str, store, later) -> None:
    """The later Agent's query ran on the whole conversation, and its store holds it once:
    the dead client's run's last message was appended when the Agent loaded the store."""
    assert result.result == "No." and result.workflow_id == f"keeper-{session}-2"
    stored = await store.load()
    assert shape(stored) == [
        "user:text",
        "assistant:tool_use",
        "user:tool_result",
        "assistant:text",  # the dead client's run's last message
        "user:text",
        "assistant:text",
    ]
    assert stored == await later.get_history()


@pytest.mark.slow
async def test_a_killed_client_leaves_what_landed_and_a_later_process_catches_up(
    remote_runtime, fake_anthropic, workers, app_env, tmp_path, lattice_server
):
    answer = threading.Event()
    fake_anthropic.set_handler(answered_once_dead(answer))
    await workers()
    path = tmp_path / "client.jsonl"
    session = f"s{uuid.uuid4().hex[:10]}"
    try:
        store = await killed_after_a_tool_result(
            spawn(HERE / "history_app.py", lattice_server, session, path, env=app_env), path
        )
    finally:
        answer.set()

    # the worker finished the run; a later process over the same session and store continues
    await remote_runtime.client.get_workflow_handle(f"keeper-{session}-1").result()
    later = build(session_id=session, history_store=create_jsonl_history_store(path=path))
    result = await later.prompt("Anything else?", runtime=remote_runtime)

    await caught_up(result, session, store, later)
    assert len(fake_anthropic.requests[-1].messages) == 5


@pytest.mark.slow
async def test_a_killed_inline_client_s_run_is_adopted_and_its_store_caught_up(
    lattice_runtime, fake_anthropic, app_env, tmp_path, lattice_server
):
    """The client served its own query (no worker) and died: a later process over the same
    session and store adopts the orphaned run, and the store gets its last messages."""
    answer = threading.Event()
    fake_anthropic.set_handler(answered_once_dead(answer))
    path = tmp_path / "inline.jsonl"
    session = f"s{uuid.uuid4().hex[:10]}"
    store = await killed_after_a_tool_result(
        spawn(HERE / "history_app.py", lattice_server, session, path, "inline", env=app_env), path
    )
    answer.set()

    later = build(
        session_id=session,
        history_store=create_jsonl_history_store(path=path),
        base_url=fake_anthropic.base_url,
    )
    result = await later.prompt("Anything else?", runtime=lattice_runtime)

    await caught_up(result, session, store, later)
