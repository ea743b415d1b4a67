"""An activity's outcome waits for the server to answer (``worker/_server_wait``): activities
that end together share one health check, and an answer counts for ``FRESH_S``."""

from __future__ import annotations

import asyncio
import contextlib

from temporalio.client import Client

from agent_lattice.worker._server_wait import FRESH_S, _checks


class _Proxy:
    """A TCP proxy to the test server, to cut the client off it."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.pipes: set[asyncio.StreamWriter] = set()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.pipes |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        self.server.close()
        for writer in self.pipes:
            writer.transport.abort()


async def test_activities_ending_together_share_one_health_check(lattice_server):
    client = await Client.connect(lattice_server)
    service = client.service_client
    sent: list[float] = []
    real = service.check_health

    async def counted(**options):  # the real RPC, counted
        sent.append(asyncio.get_running_loop().time())
        return await real(**options)

    service.check_health = counted  # type: ignore[method-assign]
    checks = _checks(service)
    assert all(await asyncio.gather(*(checks.answers(service) for _ in range(20))))
    assert len(sent) == 1
    assert await checks.answers(service)  # it answered within FRESH_S
    assert len(sent) == 1
    await asyncio.sleep(FRESH_S * 1.5)
    assert await checks.answers(service)
    assert len(sent) == 2


async def test_a_server_cut_off_is_asked_again_each_time(lattice_server):
    proxy = _Proxy(lattice_server)
    client = await Client.connect(await proxy.start())
    service = client.service_client
    checks = _checks(service)
    assert await checks.answers(service)
    proxy.cut()
    await asyncio.sleep(FRESH_S * 1.5)
    assert not await checks.answers(service)
    assert not await checks.answers(service)  # a failed check is not remembered as an answer
