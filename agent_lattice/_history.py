"""History stores: seed an Agent's conversation from durable storage and mirror every write
(seeds: Persistent History And Resume).

A store is host code: it runs in the process that owns the Agent, never in workflow code.
``load()`` runs once per Agent, lazily before its first query; ``append(message)`` follows every
message added to the history; ``replace(messages)`` follows compaction and
``agent.replace_history()``. Store failures are logged and the conversation continues in memory,
unless the store was created with ``fail_on_error=True``: then they raise
:class:`HistoryStoreError` out of ``query()``/``prompt()``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
import threading
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ._errors import ConfigurationError, HistoryStoreError, OptionError
from ._messages import ModelMessage

__all__ = [
    "HistoryStore",
    "as_messages",
    "create_jsonl_history_store",
    "create_postgres_history_store",
    "define_history_store",
]

log = logging.getLogger("agent_lattice.history")

Load = Callable[[], Awaitable[Iterable[Any]] | Iterable[Any]]
Append = Callable[[ModelMessage], Awaitable[None] | None]
Replace = Callable[[list[ModelMessage]], Awaitable[None] | None]


def as_messages(items: Iterable[Any], *, where: str) -> list[ModelMessage]:
    """Validate messages given as :class:`ModelMessage` objects or wire-shaped dicts."""
    out: list[ModelMessage] = []
    for i, item in enumerate(items):
        try:
            out.append(
                item if isinstance(item, ModelMessage) else ModelMessage.model_validate(item)
            )
        except ValidationError as err:
            raise OptionError(f"{where}: message {i} is not a valid message: {err}") from None
    return out


class HistoryStore:
    """A history store port: methods only. Build one with :func:`define_history_store` or a
    factory; ``fail_on_error`` is bound at creation."""

    def __init__(self, load: Load, append: Append, replace: Replace, *, fail_on_error: bool):
        self._load, self._append, self._replace = load, append, replace
        self._fail_on_error = fail_on_error

    async def load(self) -> list[ModelMessage]:
        """The stored conversation; ``[]`` (logged) when the store fails and errors are not
        bound to fail."""
        try:
            loaded = await _call(self._load)
            return as_messages(loaded or [], where="history store load()")
        except Exception as err:
            return self._failed("load", err) or []

    async def append(self, message: ModelMessage) -> None:
        try:
            await _call(self._append, message.model_copy(deep=True))
        except Exception as err:
            self._failed("append", err)

    async def replace(self, messages: list[ModelMessage]) -> None:
        try:
            await _call(self._replace, [m.model_copy(deep=True) for m in messages])
        except Exception as err:
            self._failed("replace", err)

    def _failed(self, op: str, err: Exception) -> None:
        if self._fail_on_error:
            raise HistoryStoreError(
                f"history store {op}() failed: {type(err).__name__}: {err}"
            ) from err
        log.warning("history store %s() failed (continuing in memory)", op, exc_info=True)


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    out = fn(*args)
    if inspect.isawaitable(out):
        out = await out
    return out


def define_history_store(
    *, load: Load, append: Append, replace: Replace, fail_on_error: bool = False
) -> HistoryStore:
    """A custom store from three functions, each sync or async."""
    for name, fn in (("load", load), ("append", append), ("replace", replace)):
        if not callable(fn):
            raise OptionError(f"define_history_store(): {name} must be callable")
    return HistoryStore(load, append, replace, fail_on_error=fail_on_error)


# -- JSONL ---------------------------------------------------------------------------------


def create_jsonl_history_store(*, path: str | Path, fail_on_error: bool = False) -> HistoryStore:
    """One JSON message per line at ``path`` (parent folders created). ``load()`` skips
    malformed lines, so a torn final write loses nothing else; ``replace()`` rewrites the file
    atomically."""
    target = Path(path)
    lock = threading.Lock()

    def read() -> list[ModelMessage]:
        try:
            lines = target.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                out.append(ModelMessage.model_validate_json(line))
            except ValidationError:
                log.warning("%s:%d: skipped a malformed history line", target, n)
        return out

    def write(messages: list[ModelMessage], mode: str) -> None:
        data = "".join(_line(m) for m in messages)
        with lock:
            target.parent.mkdir(parents=True, exist_ok=True)
            if mode == "a":
                with target.open("a+b") as f:
                    # after a torn write the file does not end in a newline: start a fresh line
                    if f.tell() > 0:
                        f.seek(-1, 2)
                        if f.read(1) != b"\n":
                            data = "\n" + data
                    f.write(data.encode("utf-8"))
                return
            tmp = target.with_name(target.name + ".tmp")
            tmp.write_text(data, encoding="utf-8")
            tmp.replace(target)

    async def load() -> list[ModelMessage]:
        return await asyncio.to_thread(read)

    async def append(message: ModelMessage) -> None:
        await asyncio.to_thread(write, [message], "a")

    async def replace(messages: list[ModelMessage]) -> None:
        await asyncio.to_thread(write, messages, "w")

    return HistoryStore(load, append, replace, fail_on_error=fail_on_error)


def _line(message: ModelMessage) -> str:
    return json.dumps(message.model_dump(mode="json", exclude_none=True), ensure_ascii=False) + "\n"


# -- Postgres ------------------------------------------------------------------------------

_TABLE_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def create_postgres_history_store(
    *,
    dsn: str,
    conversation_id: str,
    table: str = "lattice_history",
    fail_on_error: bool = False,
) -> HistoryStore:
    """The conversation ``conversation_id`` in a Postgres table (created on first use), one
    row per message in order. Needs ``psycopg`` (``agent-lattice[postgres]``)."""
    if not isinstance(dsn, str) or not dsn:
        raise OptionError("create_postgres_history_store(): dsn must be a connection string")
    if not isinstance(conversation_id, str) or not conversation_id:
        raise OptionError(
            "create_postgres_history_store(): conversation_id must be a non-empty string"
        )
    if not _TABLE_RE.match(table):
        raise OptionError(
            f"create_postgres_history_store(): table must be a lowercase SQL identifier; got {table!r}"
        )
    try:
        import psycopg
    except ImportError:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            'the Postgres history store needs psycopg: pip install "agent-lattice[postgres]"'
        ) from None
    ready = False
    lock = asyncio.Lock()

    async def connect() -> Any:
        nonlocal ready
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        if not ready:
            async with lock:
                await conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {table} ("
                    " conversation_id text NOT NULL, seq integer NOT NULL, message jsonb NOT NULL,"
                    " PRIMARY KEY (conversation_id, seq))"
                )
                ready = True
        return conn

    async def load() -> list[ModelMessage]:
        async with await connect() as conn:
            cur = await conn.execute(
                f"SELECT message FROM {table} WHERE conversation_id = %s ORDER BY seq",
                (conversation_id,),
            )
            return [ModelMessage.model_validate(row[0]) for row in await cur.fetchall()]

    async def append(message: ModelMessage) -> None:
        async with await connect() as conn:
            await conn.execute(
                f"INSERT INTO {table} (conversation_id, seq, message) SELECT %s,"
                f" COALESCE(MAX(seq), 0) + 1, %s FROM {table} WHERE conversation_id = %s",
                (conversation_id, _jsonb(message), conversation_id),
            )

    async def replace(messages: list[ModelMessage]) -> None:
        async with await connect() as conn, conn.transaction():
            await conn.execute(
                f"DELETE FROM {table} WHERE conversation_id = %s", (conversation_id,)
            )
            async with conn.cursor() as cur:
                await cur.executemany(
                    f"INSERT INTO {table} (conversation_id, seq, message) VALUES (%s, %s, %s)",
                    [(conversation_id, i, _jsonb(m)) for i, m in enumerate(messages, 1)],
                )

    return HistoryStore(load, append, replace, fail_on_error=fail_on_error)


def _jsonb(message: ModelMessage) -> Any:
    from psycopg.types.json import Jsonb

    return Jsonb(message.model_dump(mode="json", exclude_none=True))


def check_history_store(value: Any) -> HistoryStore | None:
    if value is not None and not isinstance(value, HistoryStore):
        raise OptionError(
            "AgentOptions: history_store must be a HistoryStore (create_jsonl_history_store(), "
            f"define_history_store(), ...); got {type(value).__name__}"
        )
    return value
