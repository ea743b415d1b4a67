"""Run histories as files: ``lattice runs export`` saves them, ``lattice replay`` replays them
against this agent-lattice (a CI job's check of production runs before an upgrade ships).
The files and the replay: ``worker/_histories``, ``worker/_replay``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text
from temporalio.client import WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from .. import _settings
from .._keys import EncryptionKeys, EncryptionKeysLike, UnknownEncryptionKeyError
from ..client._connection import TemporalConnection
from ..worker._histories import export_history
from ..worker._replay import replay_histories
from ._connect import connection_options
from ._find import connect_running, runs_app
from ._keys import EncryptionKeysFile, encryption_keys_from_flag
from ._plumbing import (
    EXIT_FAILED,
    EXIT_USAGE,
    Command,
    client_target,
    errors_as_exit,
    execute,
    fail,
    stdout,
)

__all__ = ["export", "replay"]


@runs_app.command("export", cls=Command)
@connection_options
def export(
    workflow_ids: Annotated[
        list[str],
        typer.Argument(
            metavar="WORKFLOW_ID",
            help="The runs to save: each workflow's latest run (the one a new worker takes over).",
            show_default=False,
        ),
    ],
    to: Annotated[
        Path,
        typer.Option(
            "--to",
            metavar="DIR",
            help="Where to write them, one WORKFLOW_ID.json each (made if missing).",
            show_default=False,
        ),
    ],
    encrypted: Annotated[
        bool,
        typer.Option(
            "--encrypted",
            help="Keep the payloads as the server holds them (encrypted runs stay encrypted; "
            "replaying them needs the keys). Default: decoded with the configured keys.",
        ),
    ] = False,
    *,
    connection: TemporalConnection,
) -> None:
    """Save run histories as JSON files (Temporal's history JSON) for `lattice replay`.

    Decoded, a file holds the run's prompts, tool inputs and answers in plain text: keep it
    as you keep the runs, or export with --encrypted. Connects like `lattice runs`: the
    configured server, or the embedded one if it is running.
    """
    execute(lambda: _export(connection, workflow_ids, to, encrypted))


async def _export(
    connection: TemporalConnection, workflow_ids: list[str], to: Path, encrypted: bool
) -> int:
    runtime = await connect_running(connection)
    if runtime is None:
        fail(
            "no Temporal server is running: none is configured (--address, TEMPORAL_ADDRESS, "
            f"a profile) and the embedded server under {_settings.lattice_home()} is not started"
        )
        return EXIT_FAILED
    keys = None if encrypted else EncryptionKeys.from_settings()
    try:
        for workflow_id in workflow_ids:
            try:
                saved = await export_history(
                    runtime.client, workflow_id, to, encrypted=encrypted, keys=keys
                )
            except UnknownEncryptionKeyError as err:
                fail(f"{workflow_id}: {err}; or save it as it is: --encrypted")
                return EXIT_FAILED
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                fail(f"no run {workflow_id!r} on {client_target(runtime.client)}")
                return EXIT_FAILED
            how = "encrypted" if encrypted else "decoded" if saved.decoded else "plain"
            stdout.print(
                Text.assemble(
                    (workflow_id, "bold"),
                    f" → {saved.path}",
                    (f"  {saved.events} events, {how}", "dim"),
                )
            )
    finally:
        await runtime.close()
    return 0


def replay(
    where: Annotated[
        Path,
        typer.Argument(
            metavar="DIR",
            help="Exported histories: every *.json under DIR (or one history file).",
            show_default=False,
        ),
    ],
    keys_file: EncryptionKeysFile = None,
) -> None:
    """Replay exported run histories against this agent-lattice; exit code 1 at the first
    that does not replay (a non-determinism: this version's workflows would fail that run).

    Run it in CI with the version you are about to deploy, on histories saved with
    `lattice runs export` (or `temporal workflow show --output json`). Histories saved with
    --encrypted need the keys (LATTICE_ENCRYPTION_KEYS[_FILE], --encryption-keys-file).
    Connects to no server.
    """
    if not where.exists():
        fail(f"{where}: no such file or directory")
        raise typer.Exit(EXIT_USAGE)
    with errors_as_exit():
        keys = encryption_keys_from_flag(keys_file)
    execute(lambda: _replay(where, keys), spinner=False)


async def _replay(where: Path, keys: EncryptionKeysLike | None) -> int:
    def replayed(path: Path, history: WorkflowHistory) -> None:
        stdout.print(
            Text.assemble(
                ("ok ", "green"),
                str(path),
                (f"  {history.workflow_id}, {len(history.events)} events", "dim"),
            )
        )

    count = await replay_histories(where, encryption_keys=keys, replayed=replayed)
    stdout.print(f"{count} histor{'y' if count == 1 else 'ies'} replayed, none non-deterministic")
    return 0
