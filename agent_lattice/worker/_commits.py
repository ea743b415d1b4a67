"""Commit notices: a run's caller hears what each workflow task published once the server has
taken the task, from the worker that ran it, over the run's side channel.

``query()``'s reader otherwise learns of every task from a long poll of the run's history and
reads what it published with the stream's poll query (``client/_follow``): under load about
seven history pages and two queries per tool turn, a third of a streamed query's CPU between
server, worker and caller. The worker has both at hand: the run's stream, and the moment the
server took the task (the worker's core resolves an activation's completion once the server
answered it). Nothing is told before that, so a notice never carries a message a replay could
take back: not from a replay (told already, or the reader asks), a failed task, or a task the
core holds while local activities run. A notice lost (a worker killed between the server's
answer and the send, a caller the worker cannot reach) costs its reader one stream query.
The SDK has no hook after a completion: this is the ``commit_notices`` fast path of
``_sdk_internals``, off with the others (``LATTICE_SDK_FAST_PATHS=off``, another temporalio),
when readers read instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable

from temporalio.worker import Worker

from ..live._channel import _LOCAL, ChannelRefused, Committed, open_channel
from ..live._keys import sealed
from ._sdk_internals import Notice, tell_when_taken

__all__ = ["send_commit_notices"]

log = logging.getLogger("agent_lattice.worker")

IDLE_S = 10.0  # a caller's connection closes after this long with nothing to tell
RETRY_UNREACHABLE_S = 60.0  # a caller's address that could not be reached is left this long
_CONNECT_TIMEOUT = 2.0


def send_commit_notices(worker: Worker) -> Callable[[], None] | None:
    """Each run's caller hears what a task of ``worker``'s published once the server took
    it; returns what undoes it (None when the fast paths are off)."""
    # with encryption keys, what a run published crosses the network only encrypted: to
    # callers whose channel is sealed under an encryption key's channel key (``e...``)
    channels = _Channels(sealed_only=worker.client.data_converter.payload_codec is not None)

    def tell(notice: Notice, ending: bool) -> None:
        address, channel, committed = notice
        channels.send(address, channel, committed, last=ending)

    undone = tell_when_taken(worker, tell)
    if undone is None:
        return None

    def undo() -> None:
        undone()
        channels.close()

    return undo


class _Channels:
    """One connection per caller's channel, kept while its run goes on."""

    def __init__(self, *, sealed_only: bool = False) -> None:
        self._open: dict[tuple[str, str], _Channel] = {}
        self._failed: dict[str, float] = {}  # addresses that could not be reached, and when
        self._sealed_only = sealed_only

    def send(self, address: str, channel: str, notice: Committed, *, last: bool) -> None:
        if self._sealed_only and address not in _LOCAL and not sealed(channel):
            return  # its reader reads (under the codec) instead
        failed = self._failed.get(address)
        if failed is not None and time.monotonic() - failed < RETRY_UNREACHABLE_S:
            return  # its reader reads instead
        key = (address, channel)
        open = self._open.get(key)
        if open is None:
            open = self._open[key] = _Channel(address, channel, self._forget)
        open.queue.put_nowait((notice, last))

    def _forget(self, channel: _Channel) -> None:
        if channel.failed:
            self._failed[channel.address] = time.monotonic()
        if self._open.get((channel.address, channel.channel)) is channel:
            del self._open[(channel.address, channel.channel)]

    def close(self) -> None:
        for channel in list(self._open.values()):
            channel.task.cancel()
        self._open.clear()


class _Channel:
    def __init__(self, address: str, channel: str, done: Callable[[_Channel], None]) -> None:
        self.address, self.channel, self._done = address, channel, done
        self.queue: asyncio.Queue[tuple[Committed, bool]] = asyncio.Queue()
        self.failed = False  # the caller could not be reached
        self.task = asyncio.ensure_future(self._run())

    async def _next(self) -> tuple[Committed, bool] | None:
        """The next notice, or None once idle for IDLE_S (the channel is then closed)."""
        try:
            return await asyncio.wait_for(self.queue.get(), IDLE_S)
        except TimeoutError:
            if self.queue.empty():  # no await between this and done(): nothing is lost
                self._done(self)
                return None
            return self.queue.get_nowait()

    async def _run(self) -> None:
        receiver = _LOCAL.get(self.address)
        try:
            if receiver is not None:  # the caller is in this process
                while (item := await self._next()) is not None:
                    deliver = receiver.deliverer(self.channel)
                    if deliver is None:
                        break  # the query is over
                    await deliver(item[0])
                    if item[1]:
                        break
                return
            await self._send_tcp()
        except Exception as err:  # notices save reads; the reader goes on without them
            log.debug("commit notices to %s stopped: %s", self.address, err)
            self.failed = True
        finally:
            self._done(self)

    async def _send_tcp(self) -> None:
        try:
            reader, writer, seal = await open_channel(self.address, self.channel)
        except ChannelRefused:
            return  # the query is over, or this worker does not hold its channel's key
        try:
            while (item := await self._next()) is not None:
                line = json.dumps({"committed": item[0].model_dump()}).encode()
                writer.write(seal.seal(line) + b"\n")
                await writer.drain()
                if item[1]:
                    break
            writer.write(seal.seal(b'{"end": true}') + b"\n")
            await writer.drain()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader.readline(), _CONNECT_TIMEOUT)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
