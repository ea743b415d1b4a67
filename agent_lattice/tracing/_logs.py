"""Logs an operator can ship: one line per record, as text or as one JSON object, naming the
run a record is about (``workflow_id``, ``run_id``, ``agent``, ``activity``) where it is known.

:func:`configure_logging` sets up this process's logging (a handler of the root logger, on
stderr): the CLI's long-running commands (``--log-level``, ``--log-format``), and
``create_worker``/``Runtime.connect`` when given a level or format, or when
``LATTICE_LOG_LEVEL``/``LATTICE_LOG_FORMAT`` are set. Nothing is configured otherwise: a host
application's own logging stays as it is.

A record's run comes from Temporal's loggers (``activity.logger`` puts the activity's details
on each record as ``temporal_activity``, ``workflow.logger`` the workflow's as
``temporal_workflow``), else from the activity the record is logged in, and the agent it
serves (:func:`serving`). Temporal's loggers also append those details to the message; here
they are fields only. An exception is a field of its record (its
type and message; in JSON its traceback too, as one string), never a multi-line traceback.

The stdlib only: the JSON formatter is a few lines here, where python-json-logger would be a
dependency the project has not chosen for what ``json.dumps`` of a dict does.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import traceback
from datetime import UTC, datetime
from typing import Any

from .. import _settings
from .._errors import ConfigurationError

__all__ = [
    "JsonFormatter",
    "TextFormatter",
    "configure_if_asked",
    "configure_logging",
    "configured_format",
    "serving",
]

LEVELS = _settings.LOG_LEVELS
FORMATS = _settings.LOG_FORMATS

# the activity being run and the agent it serves (an activity's task has its own context copy)
_activity: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "lattice_activity", default=None
)

# what a LogRecord has of its own: everything else on a record is an ``extra`` field
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}
_MAPPED = {"temporal_activity", "temporal_workflow", "activity_info", "workflow_info"}


def serving(agent: str, activity: dict[str, Any]) -> None:
    """The current activity (its details as Temporal's ``activity.logger`` gives them:
    ``workflow_id``, ``workflow_run_id``, ``activity_type``, ...) serves ``agent``: records
    logged while it runs say so, whatever their logger."""
    _activity.set({**activity, "agent": agent})


def _context(record: logging.LogRecord) -> dict[str, Any]:
    """The run a record is about: workflow_id, run_id, agent, activity, ... where known."""
    fields: dict[str, Any] = {}
    bound = _activity.get()
    details = getattr(record, "temporal_activity", None)
    if not isinstance(details, dict):
        details = bound
    if isinstance(details, dict):
        fields |= {
            "workflow_id": details.get("workflow_id"),
            "run_id": details.get("workflow_run_id"),
            "workflow_type": details.get("workflow_type"),
            "activity": details.get("activity_type"),
            "activity_id": details.get("activity_id"),
            "attempt": details.get("attempt"),
            "task_queue": details.get("task_queue"),
        }
    run = getattr(record, "temporal_workflow", None)
    if isinstance(run, dict):
        fields |= {
            "workflow_id": run.get("workflow_id"),
            "run_id": run.get("run_id"),
            "workflow_type": run.get("workflow_type"),
            "task_queue": run.get("task_queue"),
        }
        if "update_name" in run:
            fields["update"] = run["update_name"]
    agent = getattr(record, "agent", None) or (bound or {}).get("agent")
    if agent:
        fields["agent"] = agent
    return {k: v for k, v in fields.items() if v is not None and v != ""}


def _message(record: logging.LogRecord) -> str:
    """The record's message, without the run's details Temporal's loggers append to it as
    `` ({...})`` (they are fields here)."""
    message = record.getMessage()
    if (
        isinstance(getattr(record, "temporal_activity", None), dict)
        or isinstance(getattr(record, "temporal_workflow", None), dict)
    ) and message.endswith("})"):
        head, brace, _ = message.rpartition(" ({")
        if brace:
            return head
    return message


def _extra(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra`` fields a logger gave (never one of Temporal's private ones)."""
    return {
        k: v
        for k, v in vars(record).items()
        if k not in _RECORD_ATTRIBUTES and k not in _MAPPED and not k.startswith("_")
    }


def _error(record: logging.LogRecord) -> BaseException | None:
    return record.exc_info[1] if record.exc_info else None


def _error_text(error: BaseException) -> str:
    text = " ".join(str(error).split())  # one line, whatever the message had
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _time(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: ``time`` (UTC, ISO 8601), ``level``,
    ``logger``, ``message``; the run's ``workflow_id``, ``run_id``, ``agent``, ``activity``
    (and ``activity_id``, ``attempt``, ``workflow_type``, ``task_queue``) where known; the
    record's ``extra`` fields; an exception as ``error`` (``Type: message``) and ``exc_info``
    (its traceback, one string)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _time(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": _message(record),
        }
        line |= _context(record)
        for key, value in _extra(record).items():
            line.setdefault(key, value)
        error = _error(record)
        if error is not None:
            line["error"] = _error_text(error)
            line["exc_info"] = "".join(traceback.format_exception(error)).rstrip()
        elif record.exc_text:
            line["exc_info"] = record.exc_text
        if record.stack_info:
            line["stack_info"] = record.stack_info
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """One line per record: ``TIME LEVEL logger: message: Error: what [key=value ...]`` (the
    run's fields, then the record's extra ones). ``tracebacks``: a record's exception also
    prints its traceback beneath (``--log-level debug``, ``LATTICE_DEBUG=1``)."""

    def __init__(self, *, tracebacks: bool = False) -> None:
        super().__init__()
        self.tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        text = f"{_time(record)} {record.levelname} {record.name}: {_message(record)}"
        error = _error(record)
        if error is not None:
            text += f": {_error_text(error)}"
        fields = _context(record)
        fields |= {k: v for k, v in _extra(record).items() if k not in fields}
        if fields:
            text += " [" + " ".join(f"{k}={_shown(v)}" for k, v in fields.items()) + "]"
        if self.tracebacks and error is not None:
            text += "\n" + "".join(traceback.format_exception(error)).rstrip()
        return text


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return (
        json.dumps(text, ensure_ascii=False)
        if not text or any(c in text for c in ' "=[]')
        else text
    )


# what this module set up: (level, format), or None
_CONFIGURED: list[tuple[str, str] | None] = [None]


def configured_format() -> str | None:
    """``text`` or ``json`` once :func:`configure_logging` ran in this process, else None."""
    return _CONFIGURED[0][1] if _CONFIGURED[0] else None


def configure_if_asked(level: str | None, format: str | None) -> None:
    """What a library entry point (``create_worker``, ``Runtime.connect``) does: set up this
    process's logging when given a ``level`` or ``format`` (the ones not given stay as they
    were set up, else come from the environment), or when ``LATTICE_LOG_LEVEL`` or
    ``LATTICE_LOG_FORMAT`` is set and nothing set it up yet (the CLI's flags stay). Else
    nothing: a host's own logging is left alone."""
    current = _CONFIGURED[0]
    if level is None and format is None:
        if current is not None or (
            _settings.log_level() is None and _settings.log_format() is None
        ):
            return
    elif current is not None:
        level, format = level or current[0], format or current[1]
    configure_logging(level, format)


def _level(level: str | None, default: str) -> str:
    chosen = level if level is not None else _settings.log_level() or default
    if chosen.upper() not in LEVELS:
        raise ConfigurationError(
            f"log level {chosen!r}: not one of {', '.join(x.lower() for x in LEVELS)}"
        )
    return chosen.upper()


def _format(format: str | None) -> str:
    chosen = (format if format is not None else _settings.log_format() or "text").lower()
    if chosen not in FORMATS:
        raise ConfigurationError(f"log format {format!r}: not one of {', '.join(FORMATS)}")
    return chosen


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler on whatever ``sys.stderr`` is when it writes (a test runner swaps it)."""

    @property
    def stream(self) -> Any:  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


# libraries that say every request at INFO: quiet unless the level is DEBUG
_CHATTY = ("httpx", "httpcore")


def configure_logging(
    level: str | None = None, format: str | None = None, *, default_level: str = "INFO"
) -> None:
    """This process's logs go to stderr, one line per record, at ``level`` and above
    (default ``LATTICE_LOG_LEVEL``, else ``default_level``) as ``text`` or ``json``
    (default ``LATTICE_LOG_FORMAT``, else text). Called again, it replaces its own set-up;
    other handlers of the root logger are left as they are."""
    chosen_level, chosen_format = _level(level, default_level), _format(format)
    debug = chosen_level == "DEBUG" or _settings.debug()
    handler = _Stderr()
    handler.setFormatter(
        JsonFormatter() if chosen_format == "json" else TextFormatter(tracebacks=debug)
    )
    handler.lattice_logs = True  # type: ignore[attr-defined]
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "lattice_logs", False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(chosen_level)
    for name in _CHATTY:
        logging.getLogger(name).setLevel(logging.NOTSET if debug else logging.WARNING)
    _CONFIGURED[0] = (chosen_level, chosen_format)
