"""Transcript store: the conversation by reference, so Temporal history grows linearly.

A query's workflow never carries the transcript. It holds a *head*: a content-addressed link
naming the last message and, through its parent link, every message before it
(``head = sha256(parent + sha256(message))``). The model activity loads the transcript from the
head, appends what is new, and returns the new head; only new content enters workflow history.
Large tool results are stored once as blobs and travel as references
(:attr:`ToolResultBlock.content_ref`), resolved again before a model request and before the
caller sees them.

Writes are idempotent (the same content gives the same keys), so an activity retried after a
crash writes nothing twice. The store also keeps each finished tool call's result under its
idempotency key, workflow run and activity (``lattice_tool_calls``), so a call whose
completion was lost with its worker is answered from that record rather than run again. Like everything here those rows are kept with
the transcripts: nothing is deleted today. Where it lives: SQLite under ``LATTICE_HOME`` by default (every
process on one machine shares it); set ``LATTICE_TRANSCRIPT_DSN=postgresql://...`` when
workers run on several hosts.

With encryption keys (``keys=``: the process's ``LATTICE_ENCRYPTION_KEYS``, handed down by its
runtime or worker) every row that holds content — a message, a blob, a tool call's result —
is stored encrypted, its key id in the row's ``key_id`` column, and every key and reference
is a keyed hash (``_at_rest``). Rows written before keys were set (``key_id`` NULL) and the
heads that name them read as before; the keys encrypt rows, never the in-memory cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .. import _settings
from .._errors import ConfigurationError, TranscriptMissing
from .._keys import EncryptionKeys
from .._messages import ModelMessage, ToolResultBlock
from ._at_rest import RecordCipher, cipher_of, open_record
from ._transcript_cache import Blobs, Entry, TranscriptCache

__all__ = [
    "TranscriptMissing",
    "TranscriptStore",
    "hydrate",
    "open_transcript_store",
    "run_transcript",
]

_PREVIEW = 160


def _digest(data: str) -> str:
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


# a link as stored: its head, parent and chunk (the message's hash), the message as stored
# (encrypted with keys) and the id of the key that encrypted it (None: plain)
Link = tuple[str, str | None, str, str, str | None]


def _place(kind: str, key: str) -> bytes:
    """Where a record is (its table and key): what its encryption is bound to."""
    return f"{kind}\0{key}".encode()


def _message_json(message: ModelMessage) -> str:
    return json.dumps(
        message.model_dump(mode="json", exclude_none=True), sort_keys=True, ensure_ascii=False
    )


class TranscriptStore:
    """Content-addressed messages and blobs. Subclasses provide the four primitives.

    Transcripts are immutable (a head names its content), so recently used ones are kept in
    memory (:class:`TranscriptCache`): the next turn's transcript is the cached one plus what was
    appended, with no read. ``cipher``: the encryption keys' (``_at_rest``), else None.
    """

    cipher: RecordCipher | None = None

    def _address(self, text: str) -> str:
        """The hash that names ``text``: keyed under encryption keys, else SHA-256."""
        return _digest(text) if self.cipher is None else self.cipher.address(text)

    def _seal(self, text: str, place: bytes) -> tuple[str, str | None]:
        """``text`` as stored at ``place``, and the id of its key (None: plain)."""
        return (text, None) if self.cipher is None else self.cipher.seal(text, place)

    def _open(self, stored: str, key_id: str | None, place: bytes, what: str) -> str:
        return open_record(self.cipher, stored, key_id, place, what)

    def _cache(self) -> TranscriptCache:
        cache = self.__dict__.get("_transcripts")
        if cache is None:
            cache = self.__dict__["_transcripts"] = TranscriptCache(_settings.transcript_cache_mb())
        return cache

    def _blobs(self) -> Blobs:
        blobs = self.__dict__.get("_blob_cache")
        if blobs is None:  # an eighth of the transcripts' share
            blobs = self.__dict__["_blob_cache"] = Blobs(self._cache().limit // 8)
        return blobs

    async def append(self, head: str | None, messages: Sequence[ModelMessage]) -> str | None:
        """Store ``messages`` after ``head``; returns the new head (``head`` if none)."""
        heads = await self.append_each(head, messages)
        return heads[-1] if heads else head

    async def append_each(
        self, head: str | None, messages: Sequence[ModelMessage]
    ) -> list[str | None]:
        """Store ``messages`` after ``head`` in one write; the head after each of them."""
        links: list[Link] = []
        bodies: list[str] = []
        start = head
        for message in messages:
            body = _message_json(message)
            chunk = self._address(body)
            new_head = self._address(f"{head or ''}/{chunk}")
            links.append((new_head, head, chunk, *self._seal(body, _place("chunk", chunk))))
            bodies.append(body)
            head = new_head
        if links:
            await self._write(self._put_links, links)
            cache = self._cache()
            before = cache.take(start) if start is not None else Entry((), 0, ())
            if before is not None and head is not None:
                copies = tuple(ModelMessage.model_validate_json(body) for body in bodies)
                added = sum(len(body) for body in bodies)
                # what was resolved stays resolved: the next request resolves only these
                after = Entry(
                    (*before.messages, *copies), before.size + added, before.resolved, before.wire
                )
                cache.put(head, after)
        return [link[0] for link in links]

    async def messages(self, head: str | None, *, copies: bool = True) -> list[ModelMessage]:
        """Every message up to and including ``head``, oldest first (copies: yours to change;
        ``copies=False``: the cached messages themselves, for a caller that only reads them,
        as a deep copy costs O(turns) per request)."""
        if head is None:
            return []
        cached = (await self._entry(head)).messages
        return [m.model_copy(deep=True) for m in cached] if copies else list(cached)

    async def resolved(self, head: str | None, *, copies: bool = True) -> list[ModelMessage]:
        """The same messages with every tool result stored by reference resolved
        (:func:`hydrate`). The cache keeps them resolved, so the next request of a running
        conversation resolves only the messages added since: one blob read per new large
        result, not one per large result of the whole conversation."""
        if head is None:
            return []
        done = await self._resolved_in(head, await self._entry(head))
        return [m.model_copy(deep=True) for m in done] if copies else list(done)

    async def encoded(self, head: str | None) -> tuple[list[ModelMessage], list[str]]:
        """:meth:`resolved`'s messages (the cache's own: to be read only) and each one's JSON
        as a Messages API request carries it (``ModelMessage.wire_json``). The cache keeps
        them encoded, so a request of a running conversation encodes only what is new: its
        body costs a join, not an encoding of the whole conversation."""
        if head is None:
            return [], []
        entry = await self._entry(head)
        done = await self._resolved_in(head, entry)
        wire = entry.wire
        if len(wire) < len(done):
            added = tuple(m.wire_json() for m in done[len(wire) :])
            if entry.wire is wire and entry.resolved is done:  # still the cache's own
                entry.wire = (*wire, *added)
                self._cache().grow(head, entry, sum(len(w) for w in added))
            wire = (*wire, *added)
        return list(done), list(wire[: len(done)])

    async def _resolved_in(self, head: str, entry: Entry) -> tuple[ModelMessage, ...]:
        """``entry``'s messages resolved, the cache's entry extended to them (unless another
        request extended it meanwhile)."""
        done, stored = entry.resolved, entry.messages
        if len(done) < len(stored):
            added, extra = await _resolve(stored[len(done) :], self)
            if entry.resolved is done:  # no other request resolved them meanwhile
                entry.resolved = (*done, *added)
                self._cache().grow(head, entry, extra)
                return entry.resolved
            done = (*done, *added)
        return done

    async def _entry(self, head: str) -> Entry:
        """The cached transcript at ``head``, read from the store (and cached) on a miss."""
        cache = self._cache()
        entry = cache.get(head)
        if entry is None:
            bodies = await asyncio.to_thread(self._bodies, head)
            if bodies is None:
                raise TranscriptMissing(_missing("transcript", head))
            messages = tuple(ModelMessage.model_validate_json(b) for b in bodies)
            entry = Entry(messages, sum(len(b) for b in bodies), ())
            cache.put(head, entry)
        return entry

    def _bodies(self, head: str) -> list[str] | None:
        rows = self._chain(head)
        if rows is None:
            return None
        what = "a transcript message"
        return [self._open(body, kid, _place("chunk", chunk), what) for chunk, body, kid in rows]

    async def put_blob(self, data: str) -> str:
        ref = self._address(data)
        await self._write(self._put_blob, ref, *self._seal(data, _place("blob", ref)))
        self._blobs().put(ref, data)
        return ref

    async def get_blob(self, ref: str) -> str:
        blobs = self._blobs()
        data = blobs.get(ref)
        if data is None:
            row = await asyncio.to_thread(self._get_blob, ref)
            if row is None:
                raise TranscriptMissing(_missing("tool result", ref))
            data = self._open(*row, _place("blob", ref), "a stored tool result")
            blobs.put(ref, data)
        return data

    async def tool_call(self, key: str) -> tuple[bool, str | None]:
        """The record of the tool call with idempotency key ``key``: whether it started (only
        calls that mark their start say so) and its result (JSON), when it finished."""
        row = await asyncio.to_thread(self._get_tool_call, key)
        if row is None or row[0] is None:
            return (row is not None, None)
        return (True, self._open(row[0], row[1], _place("tool call", key), "a tool call's record"))

    async def tool_call_started(self, key: str) -> None:
        await self._write(self._put_tool_call, key, None, None)

    async def tool_call_finished(self, key: str, result: str) -> None:
        """Record a call's result; the first one recorded stays (a late attempt changes nothing)."""
        await self._write(self._put_tool_call, key, *self._seal(result, _place("tool call", key)))

    async def externalize(self, block: ToolResultBlock) -> ToolResultBlock:
        """A large result as a reference with a short preview; small ones unchanged."""
        data = json.dumps(block.content, ensure_ascii=False)
        if len(data) <= _settings.inline_limit() or block.content_ref is not None:
            return block
        ref = await self.put_blob(data)
        text = block.content if isinstance(block.content, str) else data
        preview = text[:_PREVIEW] + f"… [{len(data)} characters stored by reference]"
        return block.model_copy(update={"content": preview, "content_ref": ref})

    # primitives ------------------------------------------------------------------------------

    async def _write(self, put: Callable[..., None], *args: Any) -> None:
        """Run the write primitive ``put`` without blocking the event loop (in a thread)."""
        await asyncio.to_thread(put, *args)

    # rows as stored: content (encrypted under keys) with the id of its key (None: plain)

    def _put_links(self, links: list[Link]) -> None:
        raise NotImplementedError

    def _chain(self, head: str) -> list[tuple[str, str, str | None]] | None:
        """The chain's (chunk, body, key id) rows, oldest first; None: no such head."""
        raise NotImplementedError

    def _put_blob(self, ref: str, data: str, key_id: str | None) -> None:
        raise NotImplementedError

    def _get_blob(self, ref: str) -> tuple[str, str | None] | None:
        raise NotImplementedError

    def _put_tool_call(self, key: str, result: str | None, key_id: str | None) -> None:
        raise NotImplementedError

    def _get_tool_call(self, key: str) -> tuple[str | None, str | None] | None:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _missing(what: str, key: str) -> str:
    return (
        f"{what} {key[:12]}… is not in this process's transcript store: the client and every "
        "worker must share one (same LATTICE_HOME on one machine, or LATTICE_TRANSCRIPT_DSN)"
    )


_CHAIN_SQL = """
WITH RECURSIVE chain(head, parent, chunk, depth) AS (
    SELECT head, parent, chunk, 0 FROM lattice_links WHERE head = {p}
    UNION ALL
    SELECT l.head, l.parent, l.chunk, c.depth + 1
    FROM lattice_links l JOIN chain c ON l.head = c.parent
)
SELECT c.chunk, b.body, b.key_id FROM chain c JOIN lattice_chunks b ON b.hash = c.chunk
ORDER BY c.depth DESC
"""


# One row per tool call that recorded its start or its result (result NULL: started only).
# recorded_at (epoch seconds) is there for a cleanup that does not exist yet: rows are kept.
# The tables; key_id (the key that encrypted the row's content; NULL: plain) is added to the
# tables of a store made before it (_KEYED: those tables).
_TABLES_SQL = (
    "CREATE TABLE IF NOT EXISTS lattice_chunks (hash TEXT PRIMARY KEY, body TEXT NOT NULL,"
    " key_id TEXT);"
    "CREATE TABLE IF NOT EXISTS lattice_links (head TEXT PRIMARY KEY, parent TEXT,"
    " chunk TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS lattice_blobs (ref TEXT PRIMARY KEY, data TEXT NOT NULL,"
    " key_id TEXT);"
    "CREATE TABLE IF NOT EXISTS lattice_tool_calls (call_key TEXT PRIMARY KEY, result TEXT,"
    " recorded_at {real} NOT NULL DEFAULT {now}, key_id TEXT);"
)
_KEYED = ("lattice_chunks", "lattice_blobs", "lattice_tool_calls")
# a result replaces a start mark, never another result
_PUT_TOOL_CALL_SQL = (
    "INSERT INTO lattice_tool_calls (call_key, result, key_id) VALUES ({p}, {p}, {p})"
    " ON CONFLICT (call_key) DO UPDATE SET result = excluded.result, key_id = excluded.key_id"
    " WHERE lattice_tool_calls.result IS NULL"
)


# every so many writes of a process go through a thread whose connection checkpoints the WAL
# (SQLite's auto-checkpoint, at 1,000 pages); the others are tried on the loop's thread
_CHECKPOINT_EVERY = 64


class SqliteTranscriptStore(TranscriptStore):
    """The embedded default: one SQLite file (WAL) shared by the processes of a machine."""

    def __init__(self, path: Path, keys: EncryptionKeys | None = None) -> None:
        self.path = path
        self.cipher = cipher_of(keys)
        self._local = threading.local()
        # One writer at a time in this process. SQLite lets one connection write; the others
        # wait in its busy handler, which sleeps 1, 2, 5, ... 100 ms between tries, while a
        # thread waiting on this lock wakes as soon as it is free. (Other processes on the
        # file still meet the busy handler.)
        self._writing = threading.Lock()
        self._writes = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(
                _TABLES_SQL.format(real="REAL", now="((julianday('now') - 2440587.5) * 86400.0)")
            )
            for table in _KEYED:  # a store from before key ids
                if "key_id" not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
                    try:
                        db.execute(f"ALTER TABLE {table} ADD COLUMN key_id TEXT")
                    except sqlite3.OperationalError as err:
                        if "duplicate column" not in str(err):  # another process's was first
                            raise

    def _connect(self, *, inline: bool = False) -> sqlite3.Connection:
        """This thread's connection: one that waits for the file's other writers (30 s) and
        checkpoints the WAL, or ``inline`` (``_write``'s) one that never waits and never
        checkpoints."""
        name = "inline_db" if inline else "db"
        db = getattr(self._local, name, None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=0 if inline else 30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            if inline:
                db.execute("PRAGMA wal_autocheckpoint=0")
            setattr(self._local, name, db)
        return db

    async def _write(self, put: Callable[..., None], *args: Any) -> None:
        """Run ``put`` on the event loop's thread when SQLite takes it at once, else in a thread.

        An uncontended write to the WAL file (no fsync: ``synchronous=NORMAL``) takes ~0.1 ms,
        and the hop to a thread and back cost more than the write: 0.4-0.6 ms of a model
        request's and a tool call's time in a busy worker (bench/README.md, ninth round). So a
        write is first tried here on a connection that never waits (busy timeout 0) and never
        checkpoints (a checkpoint syncs the database file): a write that would wait, on this
        process's other writers or another process's, goes to a thread as before, and so does
        every ``_CHECKPOINT_EVERY``-th write, whose connection checkpoints the WAL once it grew
        past SQLite's threshold.
        """
        self._writes += 1
        if self._writes % _CHECKPOINT_EVERY and self._writing.acquire(blocking=False):
            try:
                self._local.inline = self._connect(inline=True)
                put(*args)
                return
            except sqlite3.OperationalError as err:
                if err.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                    raise
            finally:
                self._local.inline = None
                self._writing.release()
        await asyncio.to_thread(put, *args)

    @contextlib.contextmanager
    def _writer(self) -> Iterator[sqlite3.Connection]:
        """The connection a write primitive uses: ``_write``'s on the loop's thread (it holds
        the lock), else this thread's, taking turns on the lock."""
        inline = getattr(self._local, "inline", None)
        if inline is not None:
            yield inline
            return
        with self._writing:
            yield self._connect()

    def _put_links(self, links: list[Link]) -> None:
        with self._writer() as db, db:
            db.execute("BEGIN")
            db.executemany(
                "INSERT OR IGNORE INTO lattice_chunks (hash, body, key_id) VALUES (?, ?, ?)",
                [(chunk, body, key_id) for _, _, chunk, body, key_id in links],
            )
            db.executemany(
                "INSERT OR IGNORE INTO lattice_links (head, parent, chunk) VALUES (?, ?, ?)",
                [(head, parent, chunk) for head, parent, chunk, *_ in links],
            )

    def _chain(self, head: str) -> list[tuple[str, str, str | None]] | None:
        return self._connect().execute(_CHAIN_SQL.format(p="?"), (head,)).fetchall() or None

    def _put_blob(self, ref: str, data: str, key_id: str | None) -> None:
        with self._writer() as db:
            db.execute(
                "INSERT OR IGNORE INTO lattice_blobs (ref, data, key_id) VALUES (?, ?, ?)",
                (ref, data, key_id),
            )

    def _get_blob(self, ref: str) -> tuple[str, str | None] | None:
        return (
            self._connect()
            .execute("SELECT data, key_id FROM lattice_blobs WHERE ref = ?", (ref,))
            .fetchone()
        )

    def _put_tool_call(self, key: str, result: str | None, key_id: str | None) -> None:
        with self._writer() as db:
            db.execute(_PUT_TOOL_CALL_SQL.format(p="?"), (key, result, key_id))

    def _get_tool_call(self, key: str) -> tuple[str | None, str | None] | None:
        return (
            self._connect()
            .execute("SELECT result, key_id FROM lattice_tool_calls WHERE call_key = ?", (key,))
            .fetchone()
        )


class PostgresTranscriptStore(TranscriptStore):
    """For workers on several hosts (``LATTICE_TRANSCRIPT_DSN``); needs psycopg."""

    def __init__(self, dsn: str, keys: EncryptionKeys | None = None) -> None:
        self.cipher = cipher_of(keys)
        try:
            import psycopg
        except ImportError:  # pragma: no cover - depends on the install
            raise ConfigurationError(
                'LATTICE_TRANSCRIPT_DSN needs psycopg: pip install "agent-lattice[postgres]"'
            ) from None
        self._psycopg = psycopg
        self._dsn = dsn
        self._local = threading.local()
        with self._connect().cursor() as cur:
            cur.execute(
                _TABLES_SQL.format(real="double precision", now="extract(epoch from now())")
            )
            for table in _KEYED:  # a store from before key ids (ALTER only then: it locks)
                known = "SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass"
                if not cur.execute(f"{known} AND attname = 'key_id'", (table,)).fetchone():
                    cur.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS key_id text")

    def _connect(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = self._psycopg.connect(self._dsn, autocommit=True)
            self._local.conn = conn
        return conn

    def _put_links(self, links: list[Link]) -> None:
        conn = self._connect()
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO lattice_chunks (hash, body, key_id) VALUES (%s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                [(chunk, body, key_id) for _, _, chunk, body, key_id in links],
            )
            cur.executemany(
                "INSERT INTO lattice_links (head, parent, chunk) VALUES (%s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                [(head, parent, chunk) for head, parent, chunk, *_ in links],
            )

    def _chain(self, head: str) -> list[tuple[str, str, str | None]] | None:
        return self._connect().execute(_CHAIN_SQL.format(p="%s"), (head,)).fetchall() or None

    def _put_blob(self, ref: str, data: str, key_id: str | None) -> None:
        self._connect().execute(
            "INSERT INTO lattice_blobs (ref, data, key_id) VALUES (%s, %s, %s)"
            " ON CONFLICT DO NOTHING",
            (ref, data, key_id),
        )

    def _get_blob(self, ref: str) -> tuple[str, str | None] | None:
        return (
            self._connect()
            .execute("SELECT data, key_id FROM lattice_blobs WHERE ref = %s", (ref,))
            .fetchone()
        )

    def _put_tool_call(self, key: str, result: str | None, key_id: str | None) -> None:
        self._connect().execute(_PUT_TOOL_CALL_SQL.format(p="%s"), (key, result, key_id))

    def _get_tool_call(self, key: str) -> tuple[str | None, str | None] | None:
        return (
            self._connect()
            .execute("SELECT result, key_id FROM lattice_tool_calls WHERE call_key = %s", (key,))
            .fetchone()
        )


_STORES: dict[tuple[str, EncryptionKeys | None], TranscriptStore] = {}
_STORES_LOCK = threading.Lock()


def open_transcript_store(
    home: Path | None = None, *, keys: EncryptionKeys | None = None
) -> TranscriptStore:
    """This process's store: ``LATTICE_TRANSCRIPT_DSN`` (Postgres) or SQLite in ``home``
    (default ``LATTICE_HOME``), its rows encrypted with ``keys`` (the process's encryption
    keys, handed down by its runtime or worker; None: plain). One instance per location and
    keys."""
    dsn = _settings.transcript_dsn()
    if dsn:
        where = f"pg:{dsn}"
    else:
        where = f"sqlite:{(home or _settings.lattice_home()) / 'transcripts.db'}"
    with _STORES_LOCK:
        store = _STORES.get((where, keys))
        if store is None:
            store = (
                PostgresTranscriptStore(dsn, keys)
                if dsn
                else SqliteTranscriptStore(Path(where.removeprefix("sqlite:")), keys)
            )
            _STORES[(where, keys)] = store
        return store


async def hydrate(messages: Sequence[ModelMessage], store: TranscriptStore) -> list[ModelMessage]:
    """The same messages with every tool result stored by reference resolved."""
    return (await _resolve(messages, store))[0]


async def _resolve(
    messages: Sequence[ModelMessage], store: TranscriptStore
) -> tuple[list[ModelMessage], int]:
    """:func:`hydrate`'s messages, and the characters the resolved results added."""
    out: list[ModelMessage] = []
    extra = 0
    for message in messages:
        if isinstance(message.content, str) or not any(
            isinstance(b, ToolResultBlock) and b.content_ref for b in message.content
        ):
            out.append(message)
            continue
        blocks = []
        for block in message.content:
            if isinstance(block, ToolResultBlock) and block.content_ref:
                data = await store.get_blob(block.content_ref)
                extra += len(data)
                block = block.model_copy(update={"content": json.loads(data), "content_ref": None})
            blocks.append(block)
        out.append(message.model_copy(update={"content": blocks}))
    return out, extra


async def run_transcript(
    store: TranscriptStore, output: Any, history: Sequence[ModelMessage] = ()
) -> tuple[list[ModelMessage], list[ModelMessage], str | None]:
    """A finished query's whole conversation, the messages it added, and its final head.
    ``output`` is an ``AgentRunOutput``; runs from before transcripts carry their messages by
    value (``history``: what went into them)."""
    if output.head is None and not output.unsent:
        return [*history, *output.new_messages], list(output.new_messages), None
    head = await store.append(output.head, output.unsent)
    messages = await hydrate(await store.messages(head), store)
    return messages, messages[len(messages) - output.new_count :], head
