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

__all__ = ["Committed", "LiveItem", "StreamReceiver", "StreamSender"]

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


Deliver = Callable[[LiveItem | Committed], Awaitable[None]]

# Receivers living in this process, by address: the in-memory fast path.
_LOCAL: dict[str, StreamReceiver] = {}

_CONNECT_TIMEOUT = 2.0
_ACK_TIMEOUT = 30.0
# receiver addresses this process could not reach, already warned about
_UNREACHABLE: set[str] = set()


class StreamReceiver:
    """Accepts stream events for the queries this process is running."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._host = host
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
        """Register a consumer; returns the channel id to put into the workflow input."""
        channel = secrets.token_urlsafe(16)
        self._channels[channel] = deliver
        return channel

    def discard(self, channel: str) -> None:
        self._channels.pop(channel, None)

    def deliverer(self, channel: str) -> Deliver | None:
        return self._channels.get(channel)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            header = json.loads(await reader.readline() or b"{}")
            deliver = self._channels.get(str(header.get("channel")))
            if deliver is None:
                writer.write(b"gone\n")
                await writer.drain()
                return
            writer.write(b"ready\n")
            await writer.drain()
            while line := await reader.readline():
                item = json.loads(line)
                if item.get("end"):
                    writer.write(b"ok\n")
                    await writer.drain()
                    return
                committed = item.get("committed")
                if committed is not None:
                    await deliver(Committed.model_validate(committed))
                else:
                    await deliver(LiveItem.model_validate(item))
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
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


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
        self._dead = False

    async def __aenter__(self) -> StreamSender:
        receiver = _LOCAL.get(self._address)
        if receiver is not None:
            self._local = receiver.deliverer(self._channel)
            self._dead = self._local is None
            return self
        try:
            host, port = self._address.removeprefix("tcp://").rsplit(":", 1)
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(host, int(port)), _CONNECT_TIMEOUT
            )
            self._writer.write(json.dumps({"channel": self._channel}).encode() + b"\n")
            await self._writer.drain()
            answer = await asyncio.wait_for(self._reader.readline(), _CONNECT_TIMEOUT)
            if answer.strip() != b"ready":
                self._fail("receiver has no such channel")
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
        except ValueError as err:
            self._fail(str(err))
        return self

    async def send(self, event: dict[str, Any]) -> None:
        if self._dead:
            return
        item = LiveItem(event=event, turn=self._turn, attempt=self._attempt, after=self._after)
        if self._local is not None:
            await self._local(item)
            return
        assert self._writer is not None
        try:
            self._writer.write(item.model_dump_json().encode() + b"\n")
            await self._writer.drain()
        except OSError as err:
            self._fail(str(err))

    async def __aexit__(self, *exc: object) -> None:
        if self._writer is None:
            return
        try:
            if not self._dead and exc[0] is None:
                self._writer.write(b'{"end": true}\n')
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
