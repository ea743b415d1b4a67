"""The ``LATTICE_*`` environment settings, read in this one module.

Each is a function read at call time, not a constant read at import: tests (and embedding
applications) set these variables after the package is imported, per test or per run.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from urllib.parse import unquote

from ._errors import ConfigurationError

__all__ = [
    "RECONNECT_ENV",
    "bash_sandbox",
    "build_id",
    "channel_key",
    "channel_key_file",
    "debug",
    "deployment_name",
    "drill_kill",
    "drill_log",
    "encryption_keys",
    "encryption_keys_file",
    "encryption_strict",
    "health_port",
    "inline_limit",
    "inline_workers",
    "lattice_home",
    "log_format",
    "log_level",
    "metrics_port",
    "model_api_key",
    "otel",
    "park_after",
    "reconnect_s",
    "secret",
    "service_name",
    "stream_host",
    "stream_port",
    "task_queue_prefix",
    "temporal_bin",
    "transcript_cache_mb",
    "transcript_dsn",
    "use_encryption_keys_file",
]

RECONNECT_ENV = "LATTICE_RECONNECT_S"


def lattice_home() -> Path:
    """``LATTICE_HOME``, else ``~/.agent``: the embedded server, transcripts, workspaces."""
    return Path(os.environ.get("LATTICE_HOME") or Path.home() / ".agent").expanduser()


def task_queue_prefix() -> str:
    """``LATTICE_TASK_QUEUE_PREFIX``: prepended to derived task queues and mailbox ids, so
    runs sharing one server (test sessions) stay apart."""
    return os.environ.get("LATTICE_TASK_QUEUE_PREFIX", "")


def inline_limit() -> int:
    """``LATTICE_INLINE_LIMIT`` (default 2048): tool results and prompts longer than this many
    characters of JSON travel by reference."""
    raw = os.environ.get("LATTICE_INLINE_LIMIT", "2048")
    try:
        return int(raw)
    except ValueError:
        raise ConfigurationError(
            f"LATTICE_INLINE_LIMIT={raw!r} is not a number of characters"
        ) from None


def transcript_dsn() -> str | None:
    """``LATTICE_TRANSCRIPT_DSN`` (or ``LATTICE_TRANSCRIPT_DSN_FILE``, a file holding it): a
    Postgres store shared by several hosts (else SQLite)."""
    return secret("LATTICE_TRANSCRIPT_DSN")


def model_api_key() -> str | None:
    """``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_API_KEY_FILE``, a file holding it): the model
    provider's key where an agent gives none, read by the worker that calls the model."""
    return secret("ANTHROPIC_API_KEY")


def secret(name: str) -> str | None:
    """A secret setting: variable ``name``, or the contents of the file that ``<name>_FILE``
    names (a mounted secret: nothing in the environment), stripped; one of the two, not both.
    None when neither is set; a ConfigurationError naming the file it cannot read."""
    given = os.environ.get(name, "").strip()
    path = os.environ.get(f"{name}_FILE", "").strip()
    if given and path:
        raise ConfigurationError(f"set {name} or {name}_FILE, not both")
    if not path:
        return given or None
    try:
        value = Path(path).read_text(encoding="utf-8").strip()
    except OSError as err:
        raise ConfigurationError(f"{name}_FILE={path}: cannot read it ({err.strerror})") from None
    if not value:
        raise ConfigurationError(f"{name}_FILE={path}: the file is empty")
    return value


def stream_host() -> str:
    """``LATTICE_STREAM_HOST`` (default 127.0.0.1): where live token events are received
    (by a query's caller) and served (by a worker, to attached readers)."""
    return os.environ.get("LATTICE_STREAM_HOST", "127.0.0.1")


def stream_port() -> int | None:
    """``LATTICE_STREAM_PORT``: the fixed ports of the live side channel, so that a network
    policy can name them. A worker serves attached readers its live tokens on this port; a
    query's caller takes the workers' tokens on the next one (port + 1). None when unset: each
    listener takes a free port."""
    raw = os.environ.get("LATTICE_STREAM_PORT", "").strip()
    if not raw:
        return None
    try:
        port = int(raw)
    except ValueError:
        port = 0
    if not 0 < port < 65535:
        raise ConfigurationError(
            f"LATTICE_STREAM_PORT={raw!r} is not a port number from 1 to 65534 (a caller "
            "listens on the next one)"
        )
    return port


def live_feeds() -> bool:
    """``LATTICE_LIVE_FEEDS`` (default on): workers serve live tokens to attached readers."""
    return os.environ.get("LATTICE_LIVE_FEEDS", "1") not in ("0", "false", "no")


def inline_workers() -> bool:
    """``LATTICE_INLINE_WORKERS`` (default on; ``0``/``false``/``no`` turn it off)."""
    return os.environ.get("LATTICE_INLINE_WORKERS", "1") not in ("0", "false", "no")


def reconnect_s() -> float | None:
    """``LATTICE_RECONNECT_S`` as seconds, or None when unset (the caller's default)."""
    raw = os.environ.get(RECONNECT_ENV, "").strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise ConfigurationError(f"{RECONNECT_ENV}={raw!r} is not a number of seconds") from None


def temporal_bin() -> str | None:
    """``LATTICE_TEMPORAL_BIN``: the ``temporal`` CLI to use instead of the bundled one."""
    return os.environ.get("LATTICE_TEMPORAL_BIN") or None


def debug() -> bool:
    """``LATTICE_DEBUG``: the CLI shows tracebacks and full log records."""
    return bool(os.environ.get("LATTICE_DEBUG"))


def otel() -> bool:
    """``LATTICE_OTEL``: trace queries with OpenTelemetry, exported over OTLP (``1``/``true``/
    ``yes`` turn it on; the ``OTEL_*`` variables say where to)."""
    return os.environ.get("LATTICE_OTEL", "").strip().lower() in ("1", "true", "yes")


DEFAULT_SERVICE_NAME = "agent-lattice"


def service_name() -> str:
    """The service this process is, as OpenTelemetry names it: ``OTEL_SERVICE_NAME``, else
    ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``, else ``agent-lattice`` (the spans'
    resource and the metrics' ``service_name`` label)."""
    name = os.environ.get("OTEL_SERVICE_NAME", "").strip()
    if name:
        return name
    for pair in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, _, value = pair.partition("=")
        if key.strip() == "service.name" and value.strip():
            return unquote(value.strip())
    return DEFAULT_SERVICE_NAME


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")


def log_level() -> str | None:
    """``LATTICE_LOG_LEVEL``: the level of this process's logs (``debug``, ``info``,
    ``warning``, ``error``, ``critical``), or None when unset."""
    raw = os.environ.get("LATTICE_LOG_LEVEL", "").strip()
    if not raw:
        return None
    if raw.upper() not in LOG_LEVELS:
        raise ConfigurationError(
            f"LATTICE_LOG_LEVEL={raw!r} is not a log level ({', '.join(LOG_LEVELS).lower()})"
        )
    return raw.upper()


def log_format() -> str | None:
    """``LATTICE_LOG_FORMAT``: ``text`` (one line per record) or ``json`` (one JSON object
    per line), or None when unset."""
    raw = os.environ.get("LATTICE_LOG_FORMAT", "").strip().lower()
    if not raw:
        return None
    if raw not in LOG_FORMATS:
        raise ConfigurationError(f"LATTICE_LOG_FORMAT={raw!r} is not a log format (text, json)")
    return raw


def transcript_cache_mb() -> float:
    """``LATTICE_TRANSCRIPT_CACHE_MB`` (default 64): how much transcript (in MB of JSON) a
    process keeps in memory, so that a running conversation's next model request reads none."""
    raw = os.environ.get("LATTICE_TRANSCRIPT_CACHE_MB", "64").strip()
    return _at_least_zero("LATTICE_TRANSCRIPT_CACHE_MB", raw, "a number of megabytes >= 0")


def _at_least_zero(name: str, raw: str, what: str) -> float:
    """``raw`` as a number >= 0, else a ConfigurationError saying ``name`` is not ``what``."""
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value >= 0:  # NaN too
        raise ConfigurationError(f"{name}={raw!r} is not {what}")
    return value


def drill_log() -> str | None:
    """``LATTICE_DRILL_LOG``: a testing hook (``testing.crash_drill`` sets it on its workers):
    the file where a worker notes its tool calls and model requests (``activities/_drill``)."""
    return os.environ.get("LATTICE_DRILL_LOG", "").strip() or None


def drill_kill() -> str | None:
    """``LATTICE_DRILL_KILL``: a testing hook (``testing.crash_drill`` sets it on the worker it
    kills): the point where the worker SIGKILLs itself (``mid_tool:NAME``, ``after_tool:NAME``,
    ``mid_stream``, ``between_turns``; ``activities/_drill``)."""
    return os.environ.get("LATTICE_DRILL_KILL", "").strip() or None


def park_after() -> float | None:
    """``LATTICE_PARK_AFTER``: seconds a run waits idle before its worker parks it (evicts it
    from its cache, see ``worker/_park``); ``off``/``never`` never parks; None when unset."""
    raw = os.environ.get("LATTICE_PARK_AFTER", "").strip().lower()
    if not raw:
        return None
    if raw in ("off", "never"):
        return math.inf
    return _at_least_zero("LATTICE_PARK_AFTER", raw, "a number of seconds >= 0 (or 'off')")


def sdk_fast_paths() -> bool:
    """``LATTICE_SDK_FAST_PATHS``: ``off`` turns off every fast path that rests on temporalio's
    internals (``worker/_sdk_internals``); default on (where the installed temporalio is the
    one they were written for)."""
    return _on_unless_off("LATTICE_SDK_FAST_PATHS")


def commit_notices() -> bool:
    """``LATTICE_COMMIT_NOTICES``: whether workers tell a query's reader what each workflow task
    published (``worker/_commits``); ``off`` makes the reader ask the server (default on)."""
    return _on_unless_off("LATTICE_COMMIT_NOTICES")


def bash_sandbox() -> str:
    """``LATTICE_SANDBOX``: ``required`` makes the Bash tools left at ``sandbox="auto"`` (the
    default) refuse to run commands where the OS sandbox does not work, as
    ``sandbox="required"`` does; ``auto`` (default) leaves them as they are. Read where the
    command runs (the worker): the worker image sets it."""
    raw = os.environ.get("LATTICE_SANDBOX", "").strip().lower()
    if raw in ("", "auto"):
        return "auto"
    if raw == "required":
        return raw
    raise ConfigurationError(f"LATTICE_SANDBOX={raw!r} is not 'auto' or 'required'")


def metrics_port() -> int | None:
    """``LATTICE_METRICS_PORT``: serve this process's metrics for Prometheus on that port (every
    interface), or None when unset."""
    return _port("LATTICE_METRICS_PORT")


def health_port() -> int | None:
    """``LATTICE_HEALTH_PORT``: a worker serves ``/livez`` and ``/readyz`` for probes on that
    port (every interface; ``worker/_health``), or None when unset."""
    return _port("LATTICE_HEALTH_PORT")


def _port(name: str) -> int | None:
    """The port number variable ``name`` holds, None when unset; a ConfigurationError naming
    it when it holds no port number."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        port = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r} is not a port number") from None
    if not 0 < port < 65536:
        raise ConfigurationError(f"{name}={raw!r} is not a port number")
    return port


def deployment_name() -> str | None:
    """``LATTICE_DEPLOYMENT_NAME``: the Temporal worker deployment a ``lattice worker`` joins
    (with ``LATTICE_BUILD_ID``; see ``worker/_versioning``), or None when unset."""
    return os.environ.get("LATTICE_DEPLOYMENT_NAME", "").strip() or None


def build_id() -> str | None:
    """``LATTICE_BUILD_ID``: the build of the code a ``lattice worker`` runs, within its
    deployment (``LATTICE_DEPLOYMENT_NAME``), or None when unset."""
    return os.environ.get("LATTICE_BUILD_ID", "").strip() or None


def encryption_keys() -> str | None:
    """``LATTICE_ENCRYPTION_KEYS``: ``KEY_ID:BASE64_KEY`` entries, comma-separated, that
    encrypt payloads (the first) and decrypt them (all); see ``_encryption``."""
    return os.environ.get("LATTICE_ENCRYPTION_KEYS", "").strip() or None


def use_encryption_keys_file(path: str) -> None:
    """Make ``path`` this process's ``LATTICE_ENCRYPTION_KEYS_FILE``, over both variables (a
    command's ``--encryption-keys-file``: every runtime the process makes reads it)."""
    os.environ.pop("LATTICE_ENCRYPTION_KEYS", None)
    os.environ["LATTICE_ENCRYPTION_KEYS_FILE"] = path


def encryption_keys_file() -> str | None:
    """``LATTICE_ENCRYPTION_KEYS_FILE``: a file holding the same (a mounted secret)."""
    return os.environ.get("LATTICE_ENCRYPTION_KEYS_FILE", "").strip() or None


def codec_token() -> str | None:
    """``LATTICE_CODEC_TOKEN``: the bearer token ``lattice codec-server`` asks of its callers
    (``--token-file`` wins over it)."""
    return os.environ.get("LATTICE_CODEC_TOKEN", "").strip() or None


def channel_key() -> str | None:
    """``LATTICE_CHANNEL_KEY``: a secret shared by callers and workers on several hosts that
    signs the live side channel when no encryption keys are set (``live/_keys``)."""
    return os.environ.get("LATTICE_CHANNEL_KEY", "").strip() or None


def channel_key_file() -> str | None:
    """``LATTICE_CHANNEL_KEY_FILE``: a file holding the same (a mounted secret)."""
    return os.environ.get("LATTICE_CHANNEL_KEY_FILE", "").strip() or None


def encryption_strict() -> bool:
    """``LATTICE_ENCRYPTION_STRICT`` (default on; it matters only with encryption keys): a
    worker refuses every payload that reaches a run unencrypted (a start, a signal, an update,
    a result); ``0``/``off`` accepts them, while runs from before encryption was turned on
    finish (see ``worker/_encryption``)."""
    return _on_unless_off("LATTICE_ENCRYPTION_STRICT", hint=" (1 or 0)")


def _on_unless_off(name: str, *, hint: str = "") -> bool:
    """A switch that is on unless ``name`` says off (``off``/``0``/``false``/``no``); any
    other value is refused, naming it as given."""
    raw = os.environ.get(name, "").strip()
    if raw.lower() in ("", "on", "1", "true", "yes"):
        return True
    if raw.lower() in ("off", "0", "false", "no"):
        return False
    raise ConfigurationError(f"{name}={raw!r} is not 'on' or 'off'{hint}")
