"""The live side channel cannot lie: what a caller reports as durable comes from a worker that
holds the channel's key, never from whoever read the channel's id in the run's history.

A query's caller listens on a TCP port named, with a channel id, in the run's workflow input,
which anyone with access to the server reads in plain text (``temporal workflow show``). A
local process that connects with that id and sends a commit notice carrying a forged result
gets nothing believed: every line a worker sends is sealed with a key the history never
carries (``live/_keys``), and a line that does not open ends the connection, which the
caller reports as a ``live_feed_lost`` system message. A feed cut before its end says so too.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os

from pydantic import BaseModel

from agent_lattice import ResultMessage, SystemMessage, Usage, tool
from agent_lattice.live._channel import (
    Committed,
    LiveItem,
    LiveLost,
    StreamReceiver,
    StreamSender,
    open_channel,
)
from agent_lattice.live._keys import ChannelKey, ForgedLine, new_nonce
from agent_lattice.testing import Script, assert_eventually, disconnect, text, tool_use
from agent_lattice.workflows._types import AgentRunInput

from crash_app import build_agent


class _Nothing(BaseModel):
    pass


def forged_notice(converter, offsets: range) -> bytes:
    """A commit notice whose every item is a forged successful result."""
    forged = ResultMessage(
        subtype="success", result="FORGED RESULT", session_id="x", usage=Usage(), num_turns=1
    )
    data = base64.b64encode(converter.to_payload(forged).SerializeToString()).decode()
    items = [{"topic": "messages", "data": data, "offset": i} for i in offsets]
    notice = Committed(from_offset=offsets.start, upto=offsets.stop, items=items)
    return json.dumps({"committed": notice.model_dump()}).encode()


async def test_a_notice_forged_with_the_channel_id_from_the_history_is_refused(
    make_agent, fake_anthropic, lattice_runtime
):
    """The channel id read from the run's history, a TCP connection to the caller's port and
    a commit notice carrying a forged result: the caller yields nothing of it, reports the
    refused connection, and ends with the run's real answer."""
    release = asyncio.Event()
    running = asyncio.Event()

    async def hold(_: _Nothing) -> str:
        running.set()
        await release.wait()
        return "held"

    fake_anthropic.set_handler(Script(tool_use("hold", {}), text("the real answer")))
    agent = make_agent(name="forged", tools=[tool("hold", "Hold.", _Nothing, hold)])
    run = agent.query("go")
    messages: list = []

    async def consume() -> None:
        async for message in run:
            messages.append(message)

    consuming = asyncio.create_task(consume())
    await asyncio.wait_for(running.wait(), 30)

    # what anyone reading the history sees: the caller's address and the channel id
    client = lattice_runtime.client
    await assert_eventually(lambda: messages)  # the init message names the run
    workflow_id = messages[0].workflow_id
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    (input,) = await client.data_converter.decode(started.input.payloads, [AgentRunInput])
    assert input.stream_to and input.stream_channel
    host, port = input.stream_to.removeprefix("tcp://").rsplit(":", 1)

    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(json.dumps({"channel": input.stream_channel}).encode() + b"\n")
    await writer.drain()
    assert (await reader.readline()).startswith(b"ready")
    # whatever the offsets the reader is at, a forged result waits at each
    line = forged_notice(client.data_converter.payload_converter, range(0, 12))
    writer.write(line + b"\n")
    await writer.drain()
    with contextlib.suppress(TimeoutError):  # (a caller that believed it waits for more)
        await asyncio.wait_for(reader.read(), 5)  # refused: the caller hung up
    writer.close()

    await asyncio.sleep(0.5)  # what the reader would have taken, it has had time to take
    release.set()
    await asyncio.wait_for(consuming, 60)
    assert "FORGED" not in json.dumps([m.model_dump(mode="json") for m in messages])
    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.result == "the real answer"
    lost = [m for m in messages if isinstance(m, SystemMessage) and m.subtype == "live_feed_lost"]
    assert len(lost) == 1 and "refused" in (lost[0].message or ""), lost


async def test_lines_open_only_with_their_key_connection_and_place():
    """A line sealed for one connection does not open on another, out of its place, or with
    another key; an encryption key's lines carry no plain text."""
    key, other = (ChannelKey.derive(s, sealed=False) for s in (b"k" * 32, b"o" * 32))
    nonce = new_nonce()
    sent = key.seal("c", nonce)
    first, second = sent.seal(b'{"a": 1}'), sent.seal(b'{"b": 2}')
    opened = key.seal("c", nonce)
    assert opened.open(first) == b'{"a": 1}' and opened.open(second) == b'{"b": 2}'
    for wrong in (key.seal("c", new_nonce()), key.seal("d", nonce), other.seal("c", nonce)):
        try:
            wrong.open(first)
        except ForgedLine:
            continue
        raise AssertionError("a line opened where it was not sealed")
    replayed = key.seal("c", nonce)
    replayed.open(first)
    try:
        replayed.open(first)  # the same line twice
    except ForgedLine:
        pass
    else:
        raise AssertionError("a replayed line opened")
    sealed = ChannelKey.derive(b"e" * 32, sealed=True)
    line = sealed.seal("c", nonce).seal(b"SECRET TOKENS")
    assert b"SECRET" not in line
    assert sealed.seal("c", nonce).open(line) == b"SECRET TOKENS"
    assert key.kid != other.kid and key.kid.startswith("m") and sealed.kid.startswith("e")


async def test_a_feed_cut_before_its_end_is_told_as_lost(monkeypatch, tmp_path):
    """A worker's feed that stops without its end line (killed, cut) reaches the caller as a
    LiveLost naming its turn; one that ends properly does not."""
    monkeypatch.setenv("LATTICE_HOME", str(tmp_path))
    from agent_lattice.live._keys import caller_channel_key

    receiver = StreamReceiver(key=caller_channel_key())
    address = await receiver.start()
    got: list = []

    async def deliver(item) -> None:
        got.append(item)

    try:
        channel = receiver.open(deliver)
        _, writer, seal = await open_channel(address, channel)
        item = LiveItem(event={"type": "ping"}, turn=3, attempt=2, after=5)
        writer.write(seal.seal(item.model_dump_json().encode()) + b"\n")
        await writer.drain()
        writer.close()  # no end line
        for _ in range(100):
            if len(got) == 2:
                break
            await asyncio.sleep(0.02)
        assert got == [item, LiveLost(turn=3, attempt=2, after=5)]

        got.clear()
        async with StreamSender(address, channel, turn=4, attempt=1) as sender:
            await sender.send({"type": "ping"})
        assert [type(g) for g in got] == [LiveItem]  # ended properly: nothing lost
    finally:
        await receiver.close()


async def test_a_worker_elsewhere_cut_mid_stream_shows_the_loss_then_the_answer(
    remote_runtime, fake_anthropic, workers
):
    """A model request cut mid-stream in a worker process: its caller sees the live feed of
    that attempt reported lost, then the retry's text and the answer."""
    fake_anthropic.set_handler(
        Script(
            disconnect(text("a long answer, cut after a few events"), after_events=3),
            text("the answer"),
        )
    )
    await workers()
    agent = build_agent(fake_anthropic.base_url)
    messages = [m async for m in agent.query("go", runtime=remote_runtime)]
    lost = [m for m in messages if isinstance(m, SystemMessage) and m.subtype == "live_feed_lost"]
    assert len(lost) == 1 and lost[0].turn == 1 and lost[0].attempt == 1, lost
    at = messages.index(lost[0])
    later = [m for m in messages[at:] if m.type == "stream_event"]
    assert later and all(m.attempt == 2 for m in later)
    assert isinstance(messages[-1], ResultMessage) and messages[-1].result == "the answer"


class Recorder:
    """A TCP proxy that keeps every byte it forwards (what a capture between hosts sees)."""

    def __init__(self, target: str) -> None:
        self.host, port = target.removeprefix("tcp://").rsplit(":", 1)
        self.port = int(port)
        self.seen = bytearray()
        self.address = ""

    async def start(self) -> Recorder:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.address = f"tcp://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(65536):
                self.seen += data
                dst.write(data)
                await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def close(self) -> None:
        self._server.close()


async def test_with_encryption_keys_a_capture_of_the_channel_shows_no_content(
    monkeypatch, tmp_path
):
    """Live tokens and a commit notice through a proxy between worker and caller: under a
    key derived from the encryption keys the proxy sees none of their text; under the home
    key (signed, not encrypted) it does, so the capture can fail."""
    monkeypatch.setenv("LATTICE_HOME", str(tmp_path))
    from agent_lattice.live._keys import caller_channel_key, learn_encryption_secrets

    secret = "SECRET-ANSWER-7f3a"
    event = {"type": "content_block_delta", "delta": {"type": "text_delta", "text": secret}}
    for sealed in (True, False):
        key = learn_encryption_secrets([os.urandom(32)])[0] if sealed else caller_channel_key()
        receiver = StreamReceiver(key=key)
        recorder = await Recorder(await receiver.start()).start()
        got: list = []

        async def deliver(item, got=got) -> None:
            got.append(item)

        try:
            channel = receiver.open(deliver)
            async with StreamSender(recorder.address, channel, turn=1, attempt=1) as sender:
                await sender.send(event)
            _, writer, seal = await open_channel(recorder.address, channel)
            notice = Committed(from_offset=0, upto=1, items=[{"data": secret, "offset": 0}])
            writer.write(seal.seal(json.dumps({"committed": notice.model_dump()}).encode()) + b"\n")
            writer.write(seal.seal(b'{"end": true}') + b"\n")
            await writer.drain()
            for _ in range(100):
                if len(got) == 2:
                    break
                await asyncio.sleep(0.02)
            writer.close()
            assert got == [LiveItem(event=event), notice]  # both arrived whole
            assert (secret.encode() in recorder.seen) is not sealed, (sealed, bytes(recorder.seen))
        finally:
            await recorder.close()
            await receiver.close()


def test_a_bad_channel_key_is_refused_where_the_process_starts(monkeypatch, tmp_path):
    """A channel key too short, or a key file that cannot be read, stops a worker or client
    as it is made, naming the setting and never the key's text."""
    from agent_lattice import ConfigurationError
    from agent_lattice.worker import LatticePlugin

    monkeypatch.setenv("LATTICE_CHANNEL_KEY", "short-Zq9")
    try:
        LatticePlugin()
    except ConfigurationError as err:
        assert "LATTICE_CHANNEL_KEY" in str(err) and "short-Zq9" not in str(err)
    else:
        raise AssertionError("a short channel key was accepted")
    monkeypatch.delenv("LATTICE_CHANNEL_KEY")
    monkeypatch.setenv("LATTICE_CHANNEL_KEY_FILE", str(tmp_path / "missing"))
    try:
        LatticePlugin()
    except ConfigurationError as err:
        assert "LATTICE_CHANNEL_KEY_FILE=" in str(err) and "cannot read it" in str(err)
    else:
        raise AssertionError("a missing channel key file was accepted")
