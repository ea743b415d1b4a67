"""The connection flags of every command that connects, as one bundle.

``--address``, ``--namespace``, ``--api-key``, ``--tls/--no-tls``, ``--tls-cert``,
``--tls-key``, ``--tls-ca``, ``--tls-server-name`` and ``--profile`` go over the ``TEMPORAL_*``
environment and the profile file (see ``client._connection``), like the Temporal CLI's. A
command takes them with :func:`connection_options`: its ``connection`` parameter becomes
these flags (in the help's *Connection* panel) and receives the loaded
:class:`TemporalConnection`. Loading reads the certificates, so a wrong one is a usage
error (exit code 2) before anything connects. ``--encryption-keys-file`` rides along: the
payload keys of every runtime the command makes (see :func:`use_keys_file`).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from .. import _settings
from ..client._connection import TemporalConnection
from ..client._default import connect_default_with, default_runtime_if_any, set_default_runtime
from ._keys import EncryptionKeysFile, encryption_keys_from_flag
from ._plumbing import errors_as_exit, set_server_address

__all__ = ["connection_options", "default_connection"]

PANEL = "Connection"


def _option(*decls: str, help: str) -> Any:
    return typer.Option(*decls, help=help, rich_help_panel=PANEL, show_default=False)


# name → (annotation); their defaults are all None: "not given", so the environment counts
FLAGS: dict[str, Any] = {
    "address": Annotated[
        str | None,
        _option(
            "--address",
            help="Temporal frontend host:port (TEMPORAL_ADDRESS; none anywhere: the embedded "
            "dev server).",
        ),
    ],
    "namespace": Annotated[
        str | None, _option("--namespace", help="Temporal namespace (TEMPORAL_NAMESPACE).")
    ],
    "api_key": Annotated[
        str | None,
        _option(
            "--api-key", help="API key, e.g. Temporal Cloud's; turns TLS on (TEMPORAL_API_KEY)."
        ),
    ],
    "tls": Annotated[
        bool | None,
        _option(
            "--tls/--no-tls",
            help="TLS on or off (TEMPORAL_TLS; default: on with a key or certificate).",
        ),
    ],
    "tls_cert": Annotated[
        Path | None,
        _option(
            "--tls-cert", help="Client certificate PEM, for mTLS (TEMPORAL_TLS_CLIENT_CERT_PATH)."
        ),
    ],
    "tls_key": Annotated[
        Path | None,
        _option("--tls-key", help="Client private key PEM (TEMPORAL_TLS_CLIENT_KEY_PATH)."),
    ],
    "tls_ca": Annotated[
        Path | None,
        _option(
            "--tls-ca",
            help="CA certificate PEM the server's certificate is checked "
            "against (TEMPORAL_TLS_SERVER_CA_CERT_PATH; default: the system's).",
        ),
    ],
    "tls_server_name": Annotated[
        str | None,
        _option(
            "--tls-server-name",
            help="Name the server's certificate must have "
            "(TEMPORAL_TLS_SERVER_NAME; default: the address's host).",
        ),
    ],
    "encryption_keys_file": EncryptionKeysFile,
    "profile": Annotated[
        str | None,
        _option(
            "--profile",
            help="Profile of the Temporal config file (TEMPORAL_PROFILE, "
            "TEMPORAL_CONFIG_FILE; default: default).",
        ),
    ],
}


def connection_options(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with the connection flags in place of its ``connection`` parameter, which
    it receives loaded (a bad certificate or profile: one red line, exit code 2)."""
    signature = inspect.signature(command, eval_str=True)
    kept = [p for p in signature.parameters.values() if p.name != "connection"]
    flags = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind)
        for name, kind in FLAGS.items()
    ]

    def with_connection(*args: Any, **kwargs: Any) -> None:
        given = {name: kwargs.pop(name) for name in FLAGS}
        keys_file = given.pop("encryption_keys_file")
        with errors_as_exit():
            connection = TemporalConnection.load(given.pop("address"), **given)
            use_keys_file(keys_file)
        set_server_address(connection.address)
        command(*args, connection=connection, **kwargs)

    with_connection.__name__ = command.__name__
    with_connection.__qualname__ = command.__qualname__
    with_connection.__doc__ = command.__doc__
    with_connection.__module__ = command.__module__
    parameters = [*kept, *flags]
    with_connection.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    with_connection.__annotations__ = {p.name: p.annotation for p in parameters}
    return with_connection


def use_keys_file(path: Path | None) -> None:
    """``--encryption-keys-file``: checked now (a usage error naming the key id at fault), then
    made this process's setting, over ``LATTICE_ENCRYPTION_KEYS[_FILE]``. A setting, not an
    argument, because a command makes more runtimes than its own: the process default one of
    a team's members and mailbox reads the settings, and all must encrypt alike."""
    if path is None:
        return
    encryption_keys_from_flag(path)
    _settings.use_encryption_keys_file(str(path))


@contextlib.asynccontextmanager
async def default_connection(connection: TemporalConnection) -> AsyncIterator[None]:
    """The process runtime (of agents and mailboxes bound to none: a team's members, its
    workflow mailbox) connects with ``connection`` if it is needed, and is closed at the end."""
    connect_default_with(connection)
    try:
        yield
    finally:
        connect_default_with(None)
        runtime = default_runtime_if_any()
        if runtime is not None:
            set_default_runtime(None)
            await runtime.close()
