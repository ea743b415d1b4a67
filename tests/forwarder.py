"""A TCP forwarder for tests: ``listen`` (a random port) to ``target``, bytes copied both ways.

It runs its own event loop in a thread, so a busy test loop never holds what goes through it
and other processes (CLI runs, hosts in network namespaces) can use it too. ``cut()`` aborts
every open connection and stops accepting: the client is cut off its server mid-stream;
``retarget()`` aborts them and sends the next ones elsewhere: another server took its place.
``ssl`` makes it terminate TLS (``tls_proxy.TLSProxy``); ``accepted`` sees each connection's
writer first (its peer certificate, say).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl as _ssl
import threading
from collections.abc import Callable


class Forwarder:
    def __init__(
        self,
        target: str | tuple[str, int],
        *,
        listen: str = "127.0.0.1",
        ssl: _ssl.SSLContext | None = None,
        accepted: Callable[[asyncio.StreamWriter], None] | None = None,
    ) -> None:
        if isinstance(target, str):
            host, _, port = target.rpartition(":")
            target = (host, int(port))
        self._target, self._listen, self._ssl, self._accepted = target, listen, ssl, accepted
        self._connections: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, listen, 0, ssl=ssl), self._loop
        ).result(10)
        self.port: int = self._server.sockets[0].getsockname()[1]

    @property
    def address(self) -> str:
        return f"{self._listen}:{self.port}"

    def __enter__(self) -> Forwarder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cut(self) -> None:
        """Stop accepting and abort every open connection, both ways."""

        async def cut() -> None:
            self._server.close()
            for writer in self._writers:
                writer.transport.abort()

        asyncio.run_coroutine_threadsafe(cut(), self._loop).result(10)

    def retarget(self, target: str) -> None:
        """Abort every open connection; the next ones go to ``target`` (another server now
        answers at this address)."""
        host, _, port = target.rpartition(":")

        async def retarget() -> None:
            self._target = (host, int(port))
            for writer in self._writers:
                writer.transport.abort()

        asyncio.run_coroutine_threadsafe(retarget(), self._loop).result(10)

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def stop() -> None:
            self._server.close()
            # the open connections' pipes end here, not with the loop's garbage
            for task in self._connections:
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._accepted is not None:
            self._accepted(writer)
        task = asyncio.ensure_future(self._forward(reader, writer))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        pair = {writer, up_writer}
        self._writers |= pair
        try:
            await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
        finally:
            self._writers -= pair


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, _ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()
