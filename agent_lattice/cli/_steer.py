"""``lattice steer``: a message for a running query's model."""

from __future__ import annotations

from typing import Annotated

import typer

from .._steer import Steer, check_steer
from ..client._connection import TemporalConnection
from ..client._runtime import Runtime
from ..client._steer import send_steer
from ._connect import connection_options
from ._plumbing import errors_as_exit, execute, fail, stdout


@connection_options
def steer(
    workflow_id: Annotated[
        str, typer.Argument(help="The run of the query (a delegated child's run too).")
    ],
    text: Annotated[str, typer.Argument(help="What the model should take into account.")],
    *,
    connection: TemporalConnection,
) -> None:
    """Tell a running query something without stopping it: the model reads TEXT at its
    next request, after the results of the tool calls that are running.

    Exit code 1 when no query runs under WORKFLOW_ID (none, ended, or ending now) or no
    worker serves it: then nothing was sent.
    """
    with errors_as_exit():
        checked = check_steer(text)
    execute(lambda: _steer(connection, workflow_id, checked))


async def _steer(connection: TemporalConnection, workflow_id: str, checked: Steer) -> int:
    runtime = await Runtime.connect(connection=connection, inline_workers=False)
    try:
        why = await send_steer(runtime.client, workflow_id, checked)
    finally:
        await runtime.close()
    if why is not None:
        fail(f"not steered: {why}")
        return 1
    stdout.print(f"steered {workflow_id}: its model reads it at its next request")
    return 0
