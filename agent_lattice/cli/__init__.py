"""The ``lattice`` command line: dev server, workers, queries, runs.

Every command but ``dev`` and ``server`` connects like :meth:`Runtime.connect` and the
Temporal CLI: its *Connection* flags (``--address``, ``--namespace``, ``--api-key``,
``--tls/--no-tls``, ``--tls-cert``, ``--tls-key``, ``--tls-ca``, ``--tls-server-name``,
``--profile``; ``_connect``) over the ``TEMPORAL_*`` environment (``TEMPORAL_ADDRESS``,
``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS*``, ``TEMPORAL_PROFILE``) over
the profile file (``TEMPORAL_CONFIG_FILE``); with no address from anywhere the embedded dev
server under ``LATTICE_HOME`` is started or reused (the ``dev`` extra); an unreachable server
is retried for ``LATTICE_RECONNECT_S`` (600 s by default) while stderr says so. Errors are
printed as one red line on stderr, with exit code 1 (the command failed: a query's error
result, a run not found, a certificate the server refused, a missing namespace, ...), 2
(usage: bad arguments, an APP, AGENT or TEAM that cannot be loaded, a certificate or profile
that cannot be read) or 3 (the Temporal server could not be reached, or was lost); set
``LATTICE_DEBUG=1`` to see the traceback instead.

Modules: ``_serve`` (dev, worker, server), ``_runs`` (run, interrupt, attach), ``_steer``
(steer), ``_find`` (runs, setup), ``_histories`` (runs export, replay), ``_team`` (team), ``_approvals`` (approvals, approve, deny), ``_codec_server``
(codec-server; who it answers: ``_codec_guard``), ``_keys`` (``--encryption-keys-file``), ``_render`` (how messages look),
``_connect`` (the connection flags), ``_plumbing`` (consoles, exit codes, logging, signals).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable
from importlib.metadata import version as _version
from typing import Annotated

import typer

from ._approvals import approvals, approve, deny
from ._codec_server import codec_server
from ._find import runs_app, setup
from ._histories import replay
from ._plumbing import HELP_OPTIONS, Command, Group
from ._render import Renderer
from ._runs import attach, interrupt, run
from ._serve import dev, server_app, worker
from ._steer import steer
from ._team import team_app

__all__ = ["Renderer", "app", "main"]

app = typer.Typer(
    name="lattice",
    cls=Group,
    help="Durable LLM agents on Temporal: dev server, workers, queries and runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings=HELP_OPTIONS,
    epilog="Every command but dev and server connects to the server its Connection options "
    "(--address, --namespace, --api-key, --tls-*, --profile), the TEMPORAL_* environment or a "
    "Temporal profile name, else to the embedded one.\n\n"
    "Exit codes: 0 success · 1 the command failed (a query's error result, a run not "
    "found) · 2 usage (bad arguments, an APP, AGENT or TEAM that cannot be loaded) · 3 the "
    "Temporal server could not be reached or was lost · 130 after Ctrl-C · 143 after SIGTERM "
    "(lattice run).",
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"lattice (agent-lattice) {_version('agent-lattice')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", callback=_print_version, is_eager=True
        ),
    ] = False,
) -> None:
    """Durable LLM agents on Temporal: dev server, workers, queries and runs."""


# The order of registration is the order of `lattice --help`.
app.add_typer(server_app, name="server")
for command in (dev, worker, run, interrupt, steer, attach):
    app.command(cls=Command)(command)
app.add_typer(team_app, name="team")
app.add_typer(runs_app, name="runs")
for command in (setup, approvals, approve, deny, replay):
    app.command(cls=Command)(command)
app.command("codec-server", cls=Command)(codec_server)


def main(argv: Iterable[str] | None = None) -> None:
    """Entry point of the ``lattice`` script. It leaves the process with ``os._exit`` once
    the command is done: an interpreter finalizing while Temporal Core's threads still run
    can abort (exit 134/139) after the command printed its output (the GIL is gone when a
    Core thread wants it back), which would turn a success into a failure for the caller."""
    try:
        app(args=list(argv) if argv is not None else None, prog_name="lattice")
        code = 0
    except SystemExit as exit:
        if isinstance(exit.code, str):
            print(exit.code, file=sys.stderr)
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
