"""What every command shares: the consoles, errors as one red line and an exit code, the
logging set-up, signal handlers."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import typer
from rich.console import Console
from rich.text import Text
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode, TLSConfig
from typer.core import TyperCommand, TyperGroup, TyperOption

from .. import _settings
from .._errors import LatticeError, ServerUnreachableError
from ..client._reconnect import transport_reason, unreachable
from ..client._server import DevServer
from ..tracing._logs import configure_logging, configured_format
from ._status import Waiting

# `-h` as well as `--help`, on every command (sub-apps set it too: typer does not pass it on)
HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}

log = logging.getLogger("agent_lattice.cli")


def reflowed(text: str | None) -> str | None:
    """A docstring's paragraphs as single lines: the help wraps them to the terminal (typer
    keeps the source's line breaks after the first paragraph, which broke lines mid-sentence,
    short of a wide terminal and past a narrow one)."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def _without_flag_types(params: list[Any]) -> list[Any]:
    """A flag (``--json``, ``--worker/--no-worker``, ``-h``) shows no ``<bool>``: it takes no value."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    return params


class Command(TyperCommand):
    """Every ``lattice`` command: its help reflowed, its flags without a type."""

    def __init__(self, name: str | None, *, help: str | None = None, **attrs: Any) -> None:
        super().__init__(name, help=reflowed(help), **attrs)

    def get_params(self, ctx: Any) -> list[Any]:
        return _without_flag_types(super().get_params(ctx))


class Group(TyperGroup):
    """``lattice`` and its command groups (``server``, ``team``), as :class:`Command`."""

    def __init__(self, *, help: str | None = None, **attrs: Any) -> None:
        super().__init__(help=reflowed(help), **attrs)

    def get_params(self, ctx: Any) -> list[Any]:
        return _without_flag_types(super().get_params(ctx))


stdout = Console(soft_wrap=True, emoji=False, highlight=False)
stderr = Console(stderr=True, soft_wrap=True, emoji=False, highlight=False)
waiting = Waiting(stderr)  # the spinner while a command waits (a terminal's stderr only)


def print_json(value: object) -> None:
    """One JSON document on one stdout line, as it is (no markup, no wrapping)."""
    stdout.file.write(json.dumps(value, ensure_ascii=False) + "\n")
    stdout.file.flush()


def fail(message: str) -> None:
    if configured_format() == "json":  # stderr carries JSON lines only
        log.error(" ".join(message.split()))
        return
    stderr.print(Text("error: " + " ".join(message.split()), style="red"))


def _describe_error(err: BaseException) -> str:
    if unreachable(err):
        return f"the Temporal server at {_server_address()} is unreachable: {transport_reason(err)}"
    if isinstance(err, RPCError):
        if err.status == RPCStatusCode.NOT_FOUND:
            return f"not found: {err.message}"
        return f"Temporal {err.status.name}: {err.message}"
    if isinstance(err, LatticeError):
        return str(err)
    text = f"{type(err).__name__}: {err}"
    if err.__cause__ is not None:
        text += f" ({type(err.__cause__).__name__}: {err.__cause__})"
    return text


# the server this command connects to, as its connection flags and settings name it
_configured: list[str | None] = [None]


def set_server_address(address: str | None) -> None:
    _configured[0] = address


def _server_address() -> str:
    """The server a command connects to: the configured one, else the embedded one."""
    recorded = DevServer.recorded(_settings.lattice_home())
    return _configured[0] or (recorded.address if recorded else "?")


# Exit codes: a query's error result and other failures, usage errors (typer's own and an
# APP, AGENT or TEAM that cannot be loaded), a server that cannot be reached or was lost.
EXIT_FAILED, EXIT_USAGE, EXIT_NO_SERVER = 1, 2, 3


@contextlib.contextmanager
def errors_as_exit(code: int = EXIT_USAGE) -> Iterator[None]:
    """Map errors to one red line on stderr and exit ``code`` (EXIT_NO_SERVER for a server
    that cannot be reached), Ctrl-C to exit code 130."""
    try:
        yield
    except typer.Exit:
        raise
    except (KeyboardInterrupt, asyncio.CancelledError):
        raise typer.Exit(130) from None
    except Exception as err:
        if _settings.debug():
            raise
        fail(_describe_error(err))
        lost = isinstance(err, ServerUnreachableError) or unreachable(err)
        raise typer.Exit(EXIT_NO_SERVER if lost else code) from None


def execute(main: Callable[[], Coroutine[Any, Any, int]], *, spinner: bool = True) -> None:
    """Run a command's coroutine with ``asyncio.run``; its return value is the exit code.
    Its errors are failures of the command, not usage errors. ``spinner``: the command may
    show one while it waits (never with ``--json``), and a server outage does."""
    waiting.enable(spinner)
    try:
        with errors_as_exit(EXIT_FAILED):
            _configure_logging()
            code = asyncio.run(main())
    finally:
        waiting.stop()
    raise typer.Exit(code)


def _configure_logging() -> None:
    """A command without ``--log-level``/``--log-format`` (``_logs``) logs warnings and worse
    (or ``LATTICE_LOG_LEVEL``), one line each, on stderr: stdout carries only what the command
    prints (``--json`` stays pure)."""
    if configured_format() is None:
        configure_logging(default_level="WARNING")


def say(text: str | Text) -> None:
    """What a serving command tells on stdout (``serving 2 agents on ...``, ``ready``); with
    ``--log-format json`` a record of the ``agent_lattice.cli`` logger instead: a container's
    log then has JSON lines only."""
    if configured_format() == "json":
        log.info(" ".join((text.plain if isinstance(text, Text) else text).split()))
    else:
        stdout.print(text)


def note(text: str, style: str = "dim", level: int = logging.INFO) -> None:
    """A line for whoever watches a command on stderr; with ``--log-format json`` a record
    of the ``agent_lattice.cli`` logger (at ``level``) instead, so stderr stays JSON."""
    if configured_format() == "json":
        log.log(level, text)
    else:
        stderr.print(Text(text, style=style))


@contextlib.contextmanager
def on_signals(handler: Callable[[int], None], *signals: int) -> Iterator[None]:
    """Call ``handler(signum)`` on the running loop for ``signals`` (where supported)."""
    loop = asyncio.get_running_loop()
    installed = []
    for signum in signals:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, handler, signum)
            installed.append(signum)
    try:
        yield
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


def client_target(client: Client) -> str:
    """``host:7233 (namespace default, mTLS)``: where a command works, and how securely."""
    tls = client.service_client.config.tls
    how = "mTLS" if isinstance(tls, TLSConfig) and tls.client_cert else "TLS" if tls else ""
    return f"{client.service_client.config.target_host} (namespace {client.namespace}" + (
        f", {how})" if how else ")"
    )
