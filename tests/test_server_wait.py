"""An activity's outcome waits for the server to answer (``worker/_server_wait``): activities
that end together share one health check, and an answer counts for ``FRESH_S``."""

from __future__ import annotations

import asyncio

from temporalio.client import Client

from agent_lattice.worker._server_wait import FRESH_S, _checks

from conftest import note_rpcs
from forwarder import Forwarder


async def test_activities_ending_together_share_one_health_check(lattice_server, monkeypatch):
    client = await Client.connect(lattice_server)
    service = client.service_client
    sent = note_rpcs(monkeypatch, service, "check_health")
    checks = _checks(service)
    assert all(await asyncio.gather(*(checks.answers(service) for _ in range(20))))
    assert len(sent) == 1
    assert await checks.answers(service)  # it answered within FRESH_S
    assert len(sent) == 1
    await asyncio.sleep(FRESH_S * 1.5)
    assert await checks.answers(service)
    assert len(sent) == 2


async def test_a_server_cut_off_is_asked_again_each_time(lattice_server):
    with Forwarder(lattice_server) as proxy:
        client = await Client.connect(proxy.address)
        service = client.service_client
        checks = _checks(service)
        assert await checks.answers(service)
        proxy.cut()
        await asyncio.sleep(FRESH_S * 1.5)
        assert not await checks.answers(service)
        assert not await checks.answers(service)  # a failed check is not remembered as one
