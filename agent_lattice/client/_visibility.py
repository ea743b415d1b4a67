"""The Lattice search attributes on a server: whether they are registered, and registering
them (``lattice setup`` on a remote cluster; the embedded server has them from its start)."""

from __future__ import annotations

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError

from ..workflows._visibility import LATTICE_ATTRIBUTES

__all__ = ["missing_attributes", "register_attributes"]


async def missing_attributes(client: Client) -> dict[str, int]:
    """The Lattice attributes this namespace lacks (or has with another type), by name and
    ``IndexedValueType``; every one of them when the server will not say."""
    wanted = {k.name: int(k.indexed_value_type) for k in LATTICE_ATTRIBUTES}
    try:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    except RPCError:
        return wanted
    have = {**listed.system_attributes, **listed.custom_attributes}
    return {name: kind for name, kind in wanted.items() if have.get(name) != kind}


async def register_attributes(client: Client) -> list[str]:
    """Add the missing ones; returns their names. An attribute registered with another
    type raises RPCError from the server (it cannot be changed in place)."""
    missing = await missing_attributes(client)
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=client.namespace,
                search_attributes={
                    name: IndexedValueType.ValueType(kind) for name, kind in missing.items()
                },
            )
        )
    return sorted(missing)
