"""The process runtime: one :class:`Runtime` per event loop, for agents bound to none."""

from __future__ import annotations

import asyncio
from typing import Any

from ._connection import TemporalConnection
from ._runtime import Runtime

__all__ = [
    "connect_default_with",
    "create_runtime",
    "default_runtime_if_any",
    "get_default_runtime",
    "set_default_runtime",
]

_DEFAULT: dict[int, Runtime] = {}
_DEFAULT_LOCKS: dict[int, asyncio.Lock] = {}
# what the process runtime connects with (the CLI's flags); None: Runtime.connect()'s own
_CONNECTION: list[TemporalConnection | None] = [None]


def connect_default_with(connection: TemporalConnection | None) -> None:
    """Connect the process runtime with ``connection`` when it is first made."""
    _CONNECTION[0] = connection


async def get_default_runtime() -> Runtime:
    """The process runtime for the running event loop, connected on first use."""
    loop_id = id(asyncio.get_running_loop())
    lock = _DEFAULT_LOCKS.setdefault(loop_id, asyncio.Lock())
    async with lock:
        runtime = _DEFAULT.get(loop_id)
        if runtime is None:
            runtime = await Runtime.connect(connection=_CONNECTION[0])
            _DEFAULT[loop_id] = runtime
        return runtime


def default_runtime_if_any() -> Runtime | None:
    """The process runtime of the running event loop if one was made (none is made here)."""
    return _DEFAULT.get(id(asyncio.get_running_loop()))


def set_default_runtime(runtime: Runtime | None) -> None:
    """Use ``runtime`` for agents of the running event loop that have none bound."""
    loop_id = id(asyncio.get_running_loop())
    if runtime is None:
        _DEFAULT.pop(loop_id, None)
    else:
        _DEFAULT[loop_id] = runtime


async def create_runtime(address: str | None = None, **options: Any) -> Runtime:
    """A connected :class:`Runtime`: the same as ``Runtime.connect(address, **options)``
    (``otel=True`` traces its queries with OpenTelemetry, ``metrics_port=`` serves metrics,
    ``encryption_keys=`` encrypts payloads, ``inline_workers=``, ``namespace=``, ``api_key=``,
    ``tls=``, ``tls_cert=``, ``tls_key=``, ``tls_ca=``, ``tls_server_name=``, ``profile=``,
    ``connection=``, ``settings=``, ``reconnect_s=``)."""
    return await Runtime.connect(address, **options)
