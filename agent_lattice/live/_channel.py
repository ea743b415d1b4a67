"""The live side channel: model activities push raw stream events to whoever runs ``query()``.

Durable messages (assistant, user, result...) come from the workflow itself. Token-level
stream events are ephemeral and would bloat workflow history, so they take this side channel:
the querying process listens on a TCP port (``stream_to`` in the workflow input, no secret in
it but a random channel token) and the model activity, wherever it runs, connects and writes
one JSON line per event. When the activity runs in the same process as the listener the events
are handed over in memory. Either way the sender waits for the receiver's acknowledgement
before the activity completes, so every stream event of a turn is queued before that turn's
assistant message can reach the consumer; a slow consumer slows the sender (bounded queues
and TCP flow control), nothing is dropped or reordered.

Streaming is best effort: a sender that cannot reach its receiver goes on without it, the
durable messages still arrive. It says so once per receiver address, as a warning: a caller
on another host whose ``LATTICE_STREAM_HOST`` the worker cannot reach (the default,
127.0.0.1, is the worker's own loopback there) gets no live tokens.

The same channel carries commit notices (:class:`Committed`, ``worker/_commits``): once the
server has taken a workflow task, the worker that ran it sends what the task published, so
the caller's reader need not ask the server for it (``client/_follow``).

The channel id in the workflow input is readable by anyone who reads the run's history, so
it only names the channel: every line a worker sends over TCP is sealed with a channel key
(``live/_keys``) the history never carries, with a nonce the caller gives each connection
(``ready <nonce>``), and a line that does not open ends the connection unread. A feed that
ends before its end line (a worker killed, a connection cut, a line refused) is told to the
caller as :class:`LiveLost`: the rest of that request's tokens are not coming, its durable
messages still are.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from .._errors import LatticeError
from ._keys import ChannelKey, ForgedLine, Seal, channel_id, channel_key_for, new_nonce

__all__ = [
    "ChannelRefused",
    "Committed",
    "LiveItem",
    "LiveLost",
    "StreamReceiver",
    "StreamSender",
    "open_channel",
]

log = logging.getLogger("agent_lattice.stream")


class LiveItem(BaseModel):
    """One live stream event as the side channel carries it: the provider's raw event, the
    turn and attempt of the model request it belongs to, and ``after``: the durable messages
    the workflow had published before that request (the caller's ordering point)."""

    event: dict[str, Any]
    turn: int = 1
    attempt: int = 1
    after: int = 0


class Committed(BaseModel):
    """What a run's workflow task published, sent by its worker once the server has taken the
    task (so it is durable): the stream's wire items from ``from_offset`` (topic, base64
    payload, offset) up to ``upto``, the stream's length after the task."""

    from_offset: int
    upto: int
    items: list[dict[str, Any]]


class LiveLost(BaseModel):
    """A live feed that ended before its end line: the rest of that model request's tokens
    are not coming (its durable messages are). ``turn``/``attempt``/``after``: the request's,
    as its last event said (None: no event came); ``refused``: a line did not open with the
    channel's key (not sent by a worker holding it)."""

    turn: int | None = None
    attempt: int | None = None
    after: int = 0
    refused: bool = False


Deliver = Callable[[LiveItem | Committed | LiveLost], Awaitable[None]]

# Receivers living in this process, by address: the in-memory fast path.
_LOCAL: dict[str, StreamReceiver] = {}

_CONNECT_TIMEOUT = 2.0
_ACK_TIMEOUT = 30.0
# receiver addresses this process could not reach, already warned about
_UNREACHABLE: set[str] = set()


class ChannelRefused(LatticeError):
    """A caller's channel took no connection: gone, or one whose key this process lacks."""


async def open_channel(
    address: str, channel: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Seal]:
    """Connect to a caller's channel as a worker: the connection and its seal. Raises
    :class:`ChannelRefused` (the caller has no such channel, or this process does not hold its
    key), OSError or TimeoutError."""
    key = channel_key_for(channel)
    if key is None:
        raise ChannelRefused(f"no channel key {channel.partition('.')[0]!r} here")
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, int(port)), _CONNECT_TIMEOUT
    )
    try:
        writer.write(json.dumps({"channel": channel}).encode() + b"\n")
        await writer.drain()
        answer = (await asyncio.wait_for(reader.readline(), _CONNECT_TIMEOUT)).strip()
        word, _, nonce = answer.partition(b" ")
        if word != b"ready":
            raise ChannelRefused("the caller has no such channel (its query is over)")
        return reader, writer, key.seal(channel, bytes.fromhex(nonce.decode()))
    except BaseException:
        writer.close()
        raise


class StreamReceiver:
    """Accepts stream events for the queries this process is running."""

    def __init__(self, host: str = "127.0.0.1", key: ChannelKey | None = None) -> None:
        self._host = host
        # the key workers' lines are checked by (None: in-process senders only)
        self.key = key
        self._server: asyncio.base_events.Server | None = None
        self._channels: dict[str, Deliver] = {}
        self.address: str | None = None

    async def start(self) -> str:
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, self._host, 0, limit=2**24)
            port = self._server.sockets[0].getsockname()[1]
            self.address = f"tcp://{self._host}:{port}"
            _LOCAL[self.address] = self
        assert self.address is not None
        return self.address

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            _LOCAL.pop(self.address or "", None)
            self._server = None

    def open(self, deliver: Deliver) -> str:
        """Register a consumer; returns the channel id to put into the workflow input (it
        names the channel's key, by its fingerprint; ``local.``: this process's senders only)."""
        channel = channel_id(self.key) if self.key else f"local.{secrets.token_urlsafe(16)}"
        self._channels[channel] = deliver
        return channel

    def discard(self, channel: str) -> None:
        self._channels.pop(channel, None)

    def deliverer(self, channel: str) -> Deliver | None:
        return self._channels.get(channel)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lost: LiveLost | None = None  # what to tell if the feed ends without its end line
        deliver: Deliver | None = None
        try:
            header = json.loads(await reader.readline() or b"{}")
            channel = str(header.get("channel"))
            deliver = self._channels.get(channel)
            if deliver is None or self.key is None:  # a channel of its own key, or local
                writer.write(b"gone\n")
                await writer.drain()
                return
            nonce = new_nonce()
            writer.write(b"ready " + nonce.hex().encode() + b"\n")
            await writer.drain()
            seal = self.key.seal(channel, nonce)
            while line := await reader.readline():
                try:
                    item = json.loads(seal.open(line.rstrip(b"\n")))
                except ForgedLine as err:
                    log.warning("refused a live channel connection: %s", err)
                    lost = LiveLost(refused=True)
                    break
                if item.get("end"):
                    writer.write(b"ok\n")
                    await writer.drain()
                    return
                committed = item.get("committed")
                if committed is not None:
                    await deliver(Committed.model_validate(committed))
                else:
                    live = LiveItem.model_validate(item)
                    lost = LiveLost(turn=live.turn, attempt=live.attempt, after=live.after)
                    await deliver(live)
        except (
            ConnectionError,
            json.JSONDecodeError,
            ValidationError,
            asyncio.IncompleteReadError,
        ) as err:
            log.debug("stream connection ended: %s", err)
        except asyncio.CancelledError:
            # the process is ending with a worker's connection still open (commit notices
            # keep theirs between a run's tasks): end quietly, as asyncio's stream callback
            # would print a cancelled handler's traceback
            log.debug("stream connection cancelled")
            lost = None
        finally:
            writer.close()
            # a connection callback cancelled (again) while closing ends here: asyncio would
            # print the CancelledError of a stream callback as an unhandled exception
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()
        if lost is not None and deliver is not None:  # (a return above: nothing to tell)
            with contextlib.suppress(Exception):
                await deliver(lost)


class StreamSender:
    """Sends one model response's events to a receiver; never raises into the caller."""

    def __init__(
        self, address: str, channel: str, *, turn: int, attempt: int, after: int = 0
    ) -> None:
        self._address = address
        self._channel = channel
        # ``after``: durable messages the workflow published before this request.
        self._turn, self._attempt, self._after = turn, attempt, after
        self._local: Deliver | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._seal: Seal | None = None
        self._dead = False

    async def __aenter__(self) -> StreamSender:
        receiver = _LOCAL.get(self._address)
        if receiver is not None:
            self._local = receiver.deliverer(self._channel)
            self._dead = self._local is None
            return self
        try:
            self._reader, self._writer, self._seal = await open_channel(
                self._address, self._channel
            )
        except (ChannelRefused, ValueError) as err:  # (ValueError: a bad address or nonce)
            self._fail(str(err))
        except (TimeoutError, OSError) as err:
            self._fail(str(err))
            if self._address not in _UNREACHABLE:
                _UNREACHABLE.add(self._address)
                log.warning(
                    "live tokens cannot reach the caller at %s (%s): if it still runs, it gets "
                    "the durable messages only; set LATTICE_STREAM_HOST on the caller to an "
                    "address this worker reaches",
                    self._address,
                    err or type(err).__name__,
                )
        return self

    async def send(self, event: dict[str, Any]) -> None:
        if self._dead:
            return
        item = LiveItem(event=event, turn=self._turn, attempt=self._attempt, after=self._after)
        if self._local is not None:
            await self._local(item)
            return
        assert self._writer is not None and self._seal is not None
        try:
            self._writer.write(self._seal.seal(item.model_dump_json().encode()) + b"\n")
            await self._writer.drain()
        except OSError as err:
            self._fail(str(err))

    async def __aexit__(self, *exc: object) -> None:
        if self._writer is None:
            return
        try:
            if not self._dead and exc[0] is None:
                assert self._seal is not None
                self._writer.write(self._seal.seal(b'{"end": true}') + b"\n")
                await self._writer.drain()
                assert self._reader is not None
                await asyncio.wait_for(self._reader.readline(), _ACK_TIMEOUT)
        except (TimeoutError, OSError) as err:
            log.debug("stream acknowledgement lost: %s", err)
        finally:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()

    def _fail(self, why: str) -> None:
        log.debug("live streaming to %s disabled: %s", self._address, why)
        self._dead = True
