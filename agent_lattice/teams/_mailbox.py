"""Team mailboxes (seeds: Team Mailbox Collaboration, Team runtime drain).

A mailbox id names a member of a team as the seeds write it: ``"engineering::researcher"``.
A message is ``pending`` in its ``to`` mailbox until that member's runtime claims it
(``processing``); it ends ``done``, ``failed`` or ``cancelled``. Routing is explicit: a
message belongs to its ``to`` mailbox, and ``claim_next`` only ever takes from the one asked.

Backends: ``create_workflow_mailbox`` (the default, in ``client/_mailbox``: a Temporal
workflow keeps the messages), :func:`create_memory_mailbox` (one process),
:func:`create_sqlite_mailbox` (stdlib ``sqlite3``, a file or a connection the host owns;
processes of one machine), :func:`create_postgres_mailbox` (psycopg; claims with
``FOR UPDATE SKIP LOCKED``, so concurrent runtimes never take the same message), or any host
object implementing :class:`TeamMailbox`.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, Field

from .._errors import ConfigurationError, OptionError

__all__ = [
    "MessageStatus",
    "TeamMailbox",
    "TeamMessage",
    "create_memory_mailbox",
    "create_postgres_mailbox",
    "create_sqlite_mailbox",
    "mailbox_id",
]

T = TypeVar("T")

MessageStatus = Literal["pending", "processing", "done", "failed", "cancelled"]
MessageKind = Literal["task", "reply", "followup", "message"]
FINAL_STATUSES = frozenset({"done", "failed", "cancelled"})


def mailbox_id(team: str, member: str) -> str:
    """``"engineering::researcher"``."""
    return f"{team}::{member}"


class TeamMessage(BaseModel):
    id: str = Field(default_factory=lambda: f"msg_{uuid.uuid4().hex[:20]}")
    from_mailbox: str
    to_mailbox: str
    kind: MessageKind = "task"
    subject: str | None = None
    body: str
    thread_id: str = ""
    reply_to: str | None = None
    status: MessageStatus = "pending"
    metadata: dict[str, Any] = Field(default_factory=dict)
    result: str | None = None
    created_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)

    def model_post_init(self, _context: Any) -> None:
        if not self.thread_id:
            self.thread_id = self.id


@runtime_checkable
class TeamMailbox(Protocol):
    """What a team runtime needs from a mailbox backend (all coroutines)."""

    async def send(self, message: TeamMessage) -> TeamMessage: ...

    async def claim_next(self, mailbox: str) -> TeamMessage | None: ...

    async def get(self, message_id: str) -> TeamMessage | None: ...

    async def inbox(
        self, mailbox: str, *, status: MessageStatus | None = None
    ) -> list[TeamMessage]: ...

    async def thread(self, thread_id: str) -> list[TeamMessage]: ...

    async def set_status(
        self, message_id: str, status: MessageStatus, *, result: str | None = None
    ) -> TeamMessage: ...


@runtime_checkable
class MirroringMailbox(Protocol):
    """A backend that takes a team runtime's view of a message in one step (the workflow
    mailbox: one signal, no worker waited on) instead of a read and a write."""

    async def mirror(self, message: TeamMessage) -> None: ...

    async def settle(self, message_id: str, status: MessageStatus, result: str | None) -> None: ...


def _transition(message: TeamMessage, status: MessageStatus, result: str | None) -> TeamMessage:
    if message.status in FINAL_STATUSES:
        raise OptionError(
            f"message {message.id} is already {message.status}; it cannot become {status}"
        )
    return message.model_copy(
        update={
            "status": status,
            "result": result if result is not None else message.result,
            "updated_at": time.time(),
        }
    )


def _unknown(message_id: str) -> OptionError:
    return OptionError(f"no message {message_id!r} in this mailbox")


# -- memory --------------------------------------------------------------------------------


class _MemoryMailbox:
    def __init__(self) -> None:
        self._messages: dict[str, TeamMessage] = {}
        self._lock = asyncio.Lock()

    async def send(self, message: TeamMessage) -> TeamMessage:
        async with self._lock:
            self._messages[message.id] = message.model_copy()
        return message

    async def claim_next(self, mailbox: str) -> TeamMessage | None:
        async with self._lock:
            for m in self._messages.values():  # insertion order: oldest first
                if m.to_mailbox == mailbox and m.status == "pending":
                    claimed = _transition(m, "processing", None)
                    self._messages[m.id] = claimed
                    return claimed.model_copy()
        return None

    async def get(self, message_id: str) -> TeamMessage | None:
        m = self._messages.get(message_id)
        return m.model_copy() if m else None

    async def inbox(
        self, mailbox: str, *, status: MessageStatus | None = None
    ) -> list[TeamMessage]:
        return [
            m.model_copy()
            for m in self._messages.values()
            if m.to_mailbox == mailbox and (status is None or m.status == status)
        ]

    async def thread(self, thread_id: str) -> list[TeamMessage]:
        return [m.model_copy() for m in self._messages.values() if m.thread_id == thread_id]

    async def set_status(
        self, message_id: str, status: MessageStatus, *, result: str | None = None
    ) -> TeamMessage:
        async with self._lock:
            current = self._messages.get(message_id)
            if current is None:
                raise _unknown(message_id)
            self._messages[message_id] = _transition(current, status, result)
            return self._messages[message_id].model_copy()


def create_memory_mailbox() -> TeamMailbox:
    """Messages in this process's memory (lost when it exits)."""
    return _MemoryMailbox()


# -- SQL backends ----------------------------------------------------------------------------

_COLUMNS = (
    "id, from_mailbox, to_mailbox, kind, subject, body, thread_id, reply_to, status, "
    "metadata, result, created_at, updated_at"
)
_TABLE_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def _row(message: TeamMessage) -> tuple[Any, ...]:
    d = message.model_dump()
    d["metadata"] = json.dumps(d["metadata"], ensure_ascii=False)
    return tuple(d[c.strip()] for c in _COLUMNS.split(","))


def _message(row: Any) -> TeamMessage:
    d = dict(zip([c.strip() for c in _COLUMNS.split(",")], row, strict=True))
    if isinstance(d["metadata"], str):
        d["metadata"] = json.loads(d["metadata"])
    return TeamMessage.model_validate(d)


def _check_table(table: str, where: str) -> None:
    if not _TABLE_RE.match(table):
        raise OptionError(f"{where}: table must be a lowercase SQL identifier; got {table!r}")


# one lock per host connection (by id: a reused id only shares a lock, which stays correct),
# so mailboxes over the same connection never interleave their transactions
_HOST_LOCKS: dict[int, threading.Lock] = {}
_HOST_LOCKS_GUARD = threading.Lock()


def _host_lock(database: sqlite3.Connection) -> threading.Lock:
    with _HOST_LOCKS_GUARD:
        return _HOST_LOCKS.setdefault(id(database), threading.Lock())


def _check_database(database: Any, where: str) -> sqlite3.Connection:
    """A host connection the mailbox can use from its worker threads."""
    if not isinstance(database, sqlite3.Connection):
        raise OptionError(
            f"{where}: database must be a sqlite3.Connection; got {type(database).__name__}"
        )
    failure: list[BaseException] = []

    def probe() -> None:
        try:
            database.execute("SELECT 1").close()
        except sqlite3.Error as e:
            failure.append(e)

    prober = threading.Thread(target=probe)
    prober.start()
    prober.join()
    if failure:
        error = str(failure[0])
        if "same thread" in error:
            error = (
                "it was created with check_same_thread=True; the mailbox runs its queries on "
                "worker threads, so create it with sqlite3.connect(..., check_same_thread=False)"
            )
        raise OptionError(f"{where}: database is not usable: {error}")
    return database


class _SqliteMailbox:
    def __init__(
        self, table: str, *, path: Path | None = None, database: sqlite3.Connection | None = None
    ) -> None:
        self._path, self._table, self._host = path, table, database
        self._local = threading.local()
        self._lock = _host_lock(database) if database is not None else None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

        def create(db: sqlite3.Connection) -> None:
            db.execute(
                f"CREATE TABLE IF NOT EXISTS {table} (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
                " id TEXT UNIQUE NOT NULL, from_mailbox TEXT NOT NULL, to_mailbox TEXT NOT NULL,"
                " kind TEXT NOT NULL, subject TEXT, body TEXT NOT NULL, thread_id TEXT NOT NULL,"
                " reply_to TEXT, status TEXT NOT NULL, metadata TEXT NOT NULL, result TEXT,"
                " created_at REAL NOT NULL, updated_at REAL NOT NULL)"
            )
            db.execute(
                f"CREATE INDEX IF NOT EXISTS {table}_inbox ON {table} (to_mailbox, status, seq)"
            )

        self._locked(self._write, create)

    def _db(self) -> sqlite3.Connection:
        if self._host is not None:
            return self._host
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self._path or "", timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            self._local.db = db
        return db

    def _locked(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn`` alone on a host connection (its own per-thread connection needs no lock)."""
        if self._lock is None:
            return fn(*args)
        with self._lock:
            return fn(*args)

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(self._locked, fn, *args)

    def _select(self, where: str, args: tuple[Any, ...]) -> list[TeamMessage]:
        rows = (
            self._db()
            .execute(f"SELECT {_COLUMNS} FROM {self._table} WHERE {where} ORDER BY seq", args)
            .fetchall()
        )
        return [_message(r) for r in rows]

    async def send(self, message: TeamMessage) -> TeamMessage:
        def insert(db: sqlite3.Connection) -> None:
            db.execute(
                f"INSERT INTO {self._table} ({_COLUMNS}) VALUES ({', '.join('?' * 13)})",
                _row(message),
            )

        await self._run(self._write, insert)
        return message

    def _write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """``body`` in a write transaction taken at once (``BEGIN IMMEDIATE``): one writer at
        a time, so a read-then-update never races another process's."""
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            done = body(db)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return done

    async def claim_next(self, mailbox: str) -> TeamMessage | None:
        def claim(db: sqlite3.Connection) -> TeamMessage | None:
            row = db.execute(
                f"SELECT {_COLUMNS} FROM {self._table} WHERE to_mailbox = ? AND "
                "status = 'pending' ORDER BY seq LIMIT 1",
                (mailbox,),
            ).fetchone()
            if row is None:
                return None
            claimed = _transition(_message(row), "processing", None)
            db.execute(
                f"UPDATE {self._table} SET status = ?, updated_at = ? WHERE id = ?",
                (claimed.status, claimed.updated_at, claimed.id),
            )
            return claimed

        return await self._run(self._write, claim)

    async def get(self, message_id: str) -> TeamMessage | None:
        found = await self._run(self._select, "id = ?", (message_id,))
        return found[0] if found else None

    async def inbox(
        self, mailbox: str, *, status: MessageStatus | None = None
    ) -> list[TeamMessage]:
        if status is None:
            return await self._run(self._select, "to_mailbox = ?", (mailbox,))
        return await self._run(self._select, "to_mailbox = ? AND status = ?", (mailbox, status))

    async def thread(self, thread_id: str) -> list[TeamMessage]:
        return await self._run(self._select, "thread_id = ?", (thread_id,))

    async def set_status(
        self, message_id: str, status: MessageStatus, *, result: str | None = None
    ) -> TeamMessage:
        def update(db: sqlite3.Connection) -> TeamMessage:
            found = self._select("id = ?", (message_id,))
            if not found:
                raise _unknown(message_id)
            changed = _transition(found[0], status, result)
            db.execute(
                f"UPDATE {self._table} SET status = ?, result = ?, updated_at = ? WHERE id = ?",
                (changed.status, changed.result, changed.updated_at, changed.id),
            )
            return changed

        return await self._run(self._write, update)


def create_sqlite_mailbox(
    *,
    path: str | Path | None = None,
    database: sqlite3.Connection | None = None,
    table: str = "lattice_team_messages",
) -> TeamMailbox:
    """Messages in SQLite, shared by the processes of one machine; give exactly one of:

    - ``path``: a database file the mailbox opens itself (WAL, one connection per thread);
    - ``database``: an open ``sqlite3.Connection`` the host owns (the mailbox never closes
      it, nor changes its settings). The mailbox runs its queries on worker threads, one at a
      time per connection, so create it with ``check_same_thread=False``; each write is its own
      ``BEGIN IMMEDIATE`` transaction, so leave no transaction open on it while the mailbox is
      in use, and do not use it from other threads at the same time.
    """
    where = "create_sqlite_mailbox()"
    if (path is None) == (database is None):
        raise OptionError(
            f"{where}: give exactly one of path= (a file) or database= (a connection)"
        )
    _check_table(table, where)
    if database is not None:
        return _SqliteMailbox(table, database=_check_database(database, where))
    return _SqliteMailbox(table, path=Path(path or ""))


class _PostgresMailbox:
    def __init__(self, dsn: str, table: str) -> None:
        try:
            import psycopg
        except ImportError:  # pragma: no cover - depends on the install
            raise ConfigurationError(
                'the Postgres mailbox needs psycopg: pip install "agent-lattice[postgres]"'
            ) from None
        self._psycopg, self._dsn, self._table = psycopg, dsn, table
        self._ready = False

    async def _conn(self) -> Any:
        conn = await self._psycopg.AsyncConnection.connect(self._dsn, autocommit=True)
        if not self._ready:
            t = self._table
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {t} (seq bigserial PRIMARY KEY,"
                " id text UNIQUE NOT NULL, from_mailbox text NOT NULL, to_mailbox text NOT NULL,"
                " kind text NOT NULL, subject text, body text NOT NULL, thread_id text NOT NULL,"
                " reply_to text, status text NOT NULL, metadata text NOT NULL, result text,"
                " created_at double precision NOT NULL, updated_at double precision NOT NULL)"
            )
            await conn.execute(
                f"CREATE INDEX IF NOT EXISTS {t}_inbox ON {t} (to_mailbox, status, seq)"
            )
            self._ready = True
        return conn

    async def _select(self, where: str, args: tuple[Any, ...]) -> list[TeamMessage]:
        async with await self._conn() as conn:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM {self._table} WHERE {where} ORDER BY seq", args
            )
            return [_message(r) for r in await cur.fetchall()]

    async def send(self, message: TeamMessage) -> TeamMessage:
        async with await self._conn() as conn:
            await conn.execute(
                f"INSERT INTO {self._table} ({_COLUMNS}) VALUES ({', '.join(['%s'] * 13)})",
                _row(message),
            )
        return message

    async def claim_next(self, mailbox: str) -> TeamMessage | None:
        t = self._table
        async with await self._conn() as conn:
            cur = await conn.execute(
                f"UPDATE {t} SET status = 'processing', updated_at = %s WHERE id = ("
                f" SELECT id FROM {t} WHERE to_mailbox = %s AND status = 'pending'"
                " ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED)"
                f" RETURNING {_COLUMNS}",
                (time.time(), mailbox),
            )
            row = await cur.fetchone()
        return _message(row) if row else None

    async def get(self, message_id: str) -> TeamMessage | None:
        found = await self._select("id = %s", (message_id,))
        return found[0] if found else None

    async def inbox(
        self, mailbox: str, *, status: MessageStatus | None = None
    ) -> list[TeamMessage]:
        if status is None:
            return await self._select("to_mailbox = %s", (mailbox,))
        return await self._select("to_mailbox = %s AND status = %s", (mailbox, status))

    async def thread(self, thread_id: str) -> list[TeamMessage]:
        return await self._select("thread_id = %s", (thread_id,))

    async def set_status(
        self, message_id: str, status: MessageStatus, *, result: str | None = None
    ) -> TeamMessage:
        t = self._table
        async with await self._conn() as conn, conn.transaction():
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM {t} WHERE id = %s FOR UPDATE", (message_id,)
            )
            row = await cur.fetchone()
            if row is None:
                raise _unknown(message_id)
            changed = _transition(_message(row), status, result)
            await conn.execute(
                f"UPDATE {t} SET status = %s, result = %s, updated_at = %s WHERE id = %s",
                (changed.status, changed.result, changed.updated_at, changed.id),
            )
            return changed


def create_postgres_mailbox(*, dsn: str, table: str = "lattice_team_messages") -> TeamMailbox:
    """Messages in Postgres (table created on first use); claims use ``SKIP LOCKED``."""
    if not isinstance(dsn, str) or not dsn:
        raise OptionError("create_postgres_mailbox(): dsn must be a connection string")
    _check_table(table, "create_postgres_mailbox()")
    return _PostgresMailbox(dsn, table)


def check_mailbox(value: Any, where: str) -> TeamMailbox:
    if not isinstance(value, TeamMailbox):
        missing = [
            name
            for name in ("send", "claim_next", "get", "inbox", "thread", "set_status")
            if not callable(getattr(value, name, None))
        ]
        raise OptionError(f"{where}: mailbox must implement TeamMailbox; missing {missing}")
    return value
