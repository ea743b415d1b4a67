"""``--log-level`` and ``--log-format`` of the long-running commands (``worker``, ``dev``,
``run``, ``codec-server``), as one bundle: :func:`log_options` adds them to a command and sets
up the process's logging (``_logs.configure_logging``) before the command runs."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from ..tracing._logs import configure_logging
from ._plumbing import errors_as_exit

__all__ = ["log_options"]

PANEL = "Logging"

FLAGS: dict[str, Any] = {
    "log_level": Annotated[
        str | None,
        typer.Option(
            "--log-level",
            metavar="LEVEL",
            help="Log records at this level and above on stderr: debug (with tracebacks), "
            "info, warning, error (LATTICE_LOG_LEVEL).",
            rich_help_panel=PANEL,
            show_default=False,
        ),
    ],
    "log_format": Annotated[
        str | None,
        typer.Option(
            "--log-format",
            metavar="text|json",
            help="text: one line per record; json: one JSON object per line with time, "
            "level, logger, message and the run's workflow_id, run_id, agent, activity "
            "(LATTICE_LOG_FORMAT; default text).",
            rich_help_panel=PANEL,
            show_default=False,
        ),
    ],
}


def log_options(default_level: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A command with ``--log-level`` (default ``LATTICE_LOG_LEVEL``, else ``default_level``)
    and ``--log-format``; a value that is neither is a usage error (exit code 2)."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(command, eval_str=True)
        flags = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind)
            for name, kind in FLAGS.items()
        ]

        def with_logs(*args: Any, **kwargs: Any) -> None:
            level, format = kwargs.pop("log_level"), kwargs.pop("log_format")
            with errors_as_exit():
                configure_logging(level, format, default_level=default_level)
            command(*args, **kwargs)

        with_logs.__name__ = command.__name__
        with_logs.__qualname__ = command.__qualname__
        with_logs.__doc__ = command.__doc__
        with_logs.__module__ = command.__module__
        parameters = [*signature.parameters.values(), *flags]
        parameters.sort(key=lambda p: p.kind)  # keyword-only after the others
        with_logs.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        with_logs.__annotations__ = {p.name: p.annotation for p in parameters}
        return with_logs

    return decorate
