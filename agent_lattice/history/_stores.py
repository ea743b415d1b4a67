"""History stores: seed an Agent's conversation from durable storage and mirror every write
(seeds: Persistent History And Resume).

A store is host code: it runs in the process that owns the Agent, never in workflow code.
``load()`` runs once per Agent, lazily before its first query; ``append(message)`` follows every
message added to the history, as it lands (see :class:`QueryMirror`; a delegated run's, in
the worker serving it: :class:`RunLandings`); ``replace(messages)``
follows compaction and ``agent.replace_history()``. Store failures are logged and the conversation continues in memory,
unless the store was created with ``fail_on_error=True``: then they raise
:class:`HistoryStoreError` out of ``query()``/``prompt()``.

The JSONL and Postgres stores take ``encryption_keys=``: each message is then stored
AES-256-GCM encrypted as ``{"encrypted": ..., "key_id": ...}`` (``_at_rest``; the first key
encrypts, every listed key decrypts), and the messages stored before, plain, still read.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from .._errors import ConfigurationError, HistoryStoreError, OptionError
from .._keys import EncryptionKeys, EncryptionKeysLike, process_keys
from .._messages import ModelMessage, ToolResultBlock
from ._at_rest import RecordCipher, cipher_of, open_sealed, sealed

__all__ = [
    "HistoryStore",
    "as_messages",
    "create_jsonl_history_store",
    "create_postgres_history_store",
    "define_history_store",
    "same_messages",
    "unanswered",
]

log = logging.getLogger("agent_lattice.history")

Load = Callable[[], Awaitable[Iterable[Any]] | Iterable[Any]]
Append = Callable[[ModelMessage], Awaitable[None] | None]
Replace = Callable[[list[ModelMessage]], Awaitable[None] | None]
# a store's encryption_keys=: keys, the process's lattice keys ("runtime"), or none
HistoryKeys = EncryptionKeysLike | Literal["runtime"] | None
_PLACE = b"history\0"  # what a stored message's encryption is bound to (and its conversation)
_WHAT = "a history store message"


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
        return (await self.load_checked())[0]

    async def load_checked(self) -> tuple[list[ModelMessage], bool]:
        """The stored conversation, and False when loading failed and the failure was
        swallowed (not ``fail_on_error``): the runtime then keeps its own copy."""
        try:
            loaded = await _call(self._load)
            return as_messages(loaded or [], where="history store load()"), True
        except Exception as err:
            self._failed("load", err)
            return [], False

    async def append(self, message: ModelMessage) -> None:
        await self.append_checked(message)

    async def replace(self, messages: list[ModelMessage]) -> None:
        await self.replace_checked(messages)

    async def append_checked(self, message: ModelMessage) -> bool:
        """Append; False when it failed and the failure was swallowed (not ``fail_on_error``),
        so the runtime knows the store no longer holds the conversation."""
        return await self._write("append", self._append, message.model_copy(deep=True))

    async def replace_checked(self, messages: list[ModelMessage]) -> bool:
        """Replace; False when it failed and the failure was swallowed."""
        return await self._write(
            "replace", self._replace, [m.model_copy(deep=True) for m in messages]
        )

    async def _write(self, op: str, fn: Callable[..., Any], arg: Any) -> bool:
        try:
            await _call(fn, arg)
            return True
        except Exception as err:
            self._failed(op, err)
            return False

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


def same_messages(a: list[ModelMessage], b: list[ModelMessage]) -> bool:
    """The same messages, compared as stored (a JSON round trip drops nothing else)."""
    return len(a) == len(b) and all(
        x.model_dump(mode="json", exclude_none=True) == y.model_dump(mode="json", exclude_none=True)
        for x, y in zip(a, b, strict=True)
    )


class QueryMirror:
    """One query's messages written to a history store as they land: the prompt when the
    query starts, then each assistant and tool-result message as the run's durable stream
    delivers it (in order, each once: a retried model request publishes nothing twice), and
    at the end whatever the kept conversation holds that the store does not (:meth:`settle`).

    ``landed`` is what the query added so far; while ``synced``, the store holds exactly the
    history before the query plus ``landed``. A swallowed failure clears ``synced``, and the
    next write rewrites the whole conversation instead of appending after a gap."""

    def __init__(self, store: HistoryStore, before: list[ModelMessage], *, synced: bool) -> None:
        self.store = store
        self._before = list(before)
        self.synced = synced
        self.landed: list[ModelMessage] = []
        self.error: HistoryStoreError | None = None  # fail_on_error: the first failure
        self._writing: asyncio.Future[None] | None = None

    @classmethod
    def of_run(
        cls, store: HistoryStore, landed: list[ModelMessage], *, synced: bool, failed: bool
    ) -> QueryMirror:
        """What a run's own activities wrote as its messages landed (a delegated run's, see
        :class:`RunLandings`): ``landed``, the store then holding the conversation unless
        ``synced`` is False; ``failed``: a store bound to fail_on_error failed (the run
        stopped on it), so :meth:`settle` writes nothing."""
        mirror = cls(store, [], synced=synced)
        mirror.landed = list(landed)
        if failed:
            mirror.error = HistoryStoreError("the history store failed while the run ran")
        return mirror

    async def add(self, message: ModelMessage) -> None:
        """Write a message that landed; raises :class:`HistoryStoreError` (the first failure,
        then again) when the store is bound to fail."""
        if self.error is not None:
            raise self.error
        self._writing = asyncio.ensure_future(self._add(message))
        # shielded: a reader cancelled mid-write must not leave settle() guessing what the
        # store holds (a thread's write goes on regardless)
        await asyncio.shield(self._writing)

    async def _add(self, message: ModelMessage) -> None:
        self.landed.append(message)
        try:
            if self.synced:
                self.synced = await self.store.append_checked(message)
            else:
                self.synced = await self.store.replace_checked([*self._before, *self.landed])
        except HistoryStoreError as err:
            self.synced, self.error = False, err
            raise

    async def settle(
        self, history: list[ModelMessage], added: list[ModelMessage], *, compacted: bool
    ) -> bool:
        """Make the store hold ``history``, the conversation the query left (``added`` its
        new messages): the messages still missing are appended, or, when the store holds
        something else (a compaction, a turn the run dropped, a failed write), the whole
        history replaces it. True when the store holds it. After a fail_on_error failure
        nothing is written (the query raised it); the next query's first write heals."""
        if self._writing is not None:
            with contextlib.suppress(BaseException):
                await self._writing
        if self.error is not None:
            return False
        n = len(self.landed)
        if self.synced and not compacted and same_messages(self.landed, added[:n]):
            for message in added[n:]:
                if not await self.store.append_checked(message):
                    return False
            return True
        return await self.store.replace_checked(history)


class RunLandings:
    """The messages of delegated runs written to one history store as they land, each once.

    The run counts what landed (durably, in its workflow) and asks for message ``index``
    once the one before was written. This process remembers, per run, the index it may
    append next without reading the store; a run it does not know that far (this worker is
    new after a crash, another worker wrote the last message, an attempt was cut off mid
    write) reads the store once and writes only what it lacks."""

    KEPT = 64  # runs remembered; a forgotten one costs one read of the store

    def __init__(self, store: HistoryStore) -> None:
        self.store = store
        self._next: OrderedDict[str, int] = OrderedDict()
        self._lock = asyncio.Lock()

    def expect(self, run: str) -> None:
        """``run`` starts on a conversation the store holds: its prompt is appended as is."""
        self._remember(run, 0)

    def _remember(self, run: str, next_index: int) -> None:
        self._next[run] = next_index
        while len(self._next) > self.KEPT:
            self._next.popitem(last=False)

    async def land(
        self,
        run: str,
        index: int,
        message: ModelMessage,
        conversation: Callable[[], Awaitable[list[ModelMessage]]],
        *,
        synced: bool,
    ) -> bool:
        """Write message ``index`` of ``run`` (``conversation``: the whole conversation up to
        and including it; ``synced``: the store held it up to the message before). True when
        the store holds the conversation; raises :class:`HistoryStoreError` when bound to
        fail."""
        async with self._lock:
            known = self._next.pop(run, None)  # in doubt until this write is done
            if synced and known == index:
                ok = await self.store.append_checked(message)
            else:
                ok = await self._catch_up(await conversation(), synced=synced)
            if ok:
                self._remember(run, index + 1)
            return ok

    async def _catch_up(self, conversation: list[ModelMessage], *, synced: bool) -> bool:
        if synced:
            stored, loaded = await self.store.load_checked()
            if loaded and same_messages(stored, conversation):
                return True  # an attempt cut off after its write
            if loaded and same_messages(stored, conversation[:-1]):
                return await self.store.append_checked(conversation[-1])
        return await self.store.replace_checked(conversation)


async def caught_up(
    store: HistoryStore, kept: list[ModelMessage] | None
) -> tuple[list[ModelMessage], bool]:
    """The conversation an Agent continues from its store and what Temporal kept for its
    session (``kept``; None for a new session), and whether the store holds it.

    A store that ends with a finished reply is the conversation, as the seeds make the store
    the source (the host may have cut it, e.g. ``replace_history()`` dropping the last turns).
    A store cut inside a query (ending with its prompt, a tool call or tool results: its
    process died) is brought to what Temporal kept of that query: the missing tail is
    appended, or, when the run rewrote the conversation (compaction, a dropped turn, a run
    that never started), the store is replaced. A store that failed to load (swallowed) is
    left alone and the session continues from Temporal's copy, in memory."""
    stored, ok = await store.load_checked()
    if not ok:
        return kept or [], True
    finished = bool(stored) and stored[-1].role == "assistant" and not stored[-1].tool_uses
    if kept is None or finished or same_messages(stored, kept):
        return stored, True
    n = len(stored)
    if len(kept) > n and same_messages(stored, kept[:n]):
        for message in kept[n:]:
            if not await store.append_checked(message):
                return kept, False
        return kept, True
    if n > len(kept) and same_messages(stored[: len(kept)], kept):
        # the store holds more of the last query than Temporal kept (its run ended from
        # outside before it landed them): never rewound; a tool call left without a result
        # gets one saying it did not finish
        answer = unanswered(stored)
        if answer is None:
            return stored, True
        return [*stored, answer], await store.append_checked(answer)
    return kept, await store.replace_checked(kept)


def unanswered(messages: list[ModelMessage]) -> ModelMessage | None:
    """The tool results a conversation cut after a reply with tool calls lacks, or None."""
    last = messages[-1] if messages else None
    if last is None or last.role != "assistant" or not last.tool_uses:
        return None
    return ModelMessage(
        role="user",
        content=[
            ToolResultBlock(
                tool_use_id=call.id,
                content=f"Tool {call.name!r} did not finish: its query ended before its result "
                "was recorded. Whether it took effect is unknown: check before calling it again.",
                is_error=True,
            )
            for call in last.tool_uses
        ],
    )


def define_history_store(
    *, load: Load, append: Append, replace: Replace, fail_on_error: bool = False
) -> HistoryStore:
    """A custom store from three functions, each sync or async."""
    for name, fn in (("load", load), ("append", append), ("replace", replace)):
        if not callable(fn):
            raise OptionError(f"define_history_store(): {name} must be callable")
    return HistoryStore(load, append, replace, fail_on_error=fail_on_error)


def _ciphers(given: HistoryKeys, where: str) -> Callable[[], RecordCipher | None]:
    """How a store finds its cipher at each use: none (``None``: plain), the keys given
    (checked now: a bad key is an error naming its id), or ``"runtime"``: the keys this
    process's lattice runtime and workers encrypt payloads with (``Runtime.connect(
    encryption_keys=)``, ``LatticePlugin(encryption_keys=)``, else
    ``LATTICE_ENCRYPTION_KEYS[_FILE]``), looked up when the store is used."""
    if given is None:
        return lambda: None
    if isinstance(given, str) and given == "runtime":

        def runtime() -> RecordCipher | None:
            keys = process_keys()
            if keys is None:
                raise ConfigurationError(
                    f'{where}: encryption_keys="runtime", and this process has no encryption '
                    "keys (Runtime.connect(encryption_keys=...), LATTICE_ENCRYPTION_KEYS or "
                    "LATTICE_ENCRYPTION_KEYS_FILE)"
                )
            return cipher_of(keys)

        return runtime
    cipher = cipher_of(EncryptionKeys.of(given))
    return lambda: cipher


def _stored(value: Any, cipher: RecordCipher | None, place: bytes) -> ModelMessage:
    """A stored message: plain (a message's JSON object) or sealed (``_at_rest``)."""
    was_sealed, value = open_sealed(cipher, value, place, _WHAT)
    return (
        ModelMessage.model_validate_json(value)
        if was_sealed
        else ModelMessage.model_validate(value)
    )


def _dumped(message: ModelMessage, cipher: RecordCipher | None, place: bytes) -> Any:
    """A message as stored: its JSON object, or with a cipher that object sealed."""
    data = message.model_dump(mode="json", exclude_none=True)
    if cipher is None:
        return data
    return sealed(cipher, json.dumps(data, ensure_ascii=False), place)


# -- JSONL ---------------------------------------------------------------------------------


def create_jsonl_history_store(
    *, path: str | Path, fail_on_error: bool = False, encryption_keys: HistoryKeys = None
) -> HistoryStore:
    """One JSON message per line at ``path`` (parent folders created). ``load()`` skips
    malformed lines, so a torn final write loses nothing else; ``replace()`` rewrites the file
    atomically. ``encryption_keys`` (``KEY_ID:BASE64_KEY,...``, an ``EncryptionKeys``, or
    ``"runtime"``: the keys of the lattice runtime using it): each line is then a message
    encrypted (``{"encrypted": ..., "key_id": ...}``); plain lines from before still read."""
    target = Path(path)
    lock = threading.Lock()
    ciphers = _ciphers(encryption_keys, "create_jsonl_history_store()")

    def read() -> list[ModelMessage]:
        cipher = ciphers()
        try:
            data = target.read_bytes()
        except FileNotFoundError:
            return []
        out = []
        # Lines are split and decoded one by one: a write torn inside a multi-byte character
        # must cost that line only, not the file's decoding (and only "\n" ends a record:
        # str.splitlines() would also split at U+2028, which json.dumps leaves unescaped).
        for n, raw in enumerate(data.split(b"\n"), 1):
            if not raw.strip():
                continue
            try:
                out.append(_stored(json.loads(raw.decode("utf-8")), cipher, _PLACE))
            except (UnicodeDecodeError, ValueError, ValidationError):  # JSON's errors: ValueError
                log.warning("%s:%d: skipped a malformed history line", target, n)
        return out

    def write(messages: list[ModelMessage], mode: str) -> None:
        cipher = ciphers()
        data = "".join(_line(m, cipher) for m in messages)
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


def _line(message: ModelMessage, cipher: RecordCipher | None) -> str:
    return json.dumps(_dumped(message, cipher, _PLACE), ensure_ascii=False) + "\n"


# -- Postgres ------------------------------------------------------------------------------

_TABLE_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def create_postgres_history_store(
    *,
    dsn: str,
    conversation_id: str,
    table: str = "lattice_history",
    fail_on_error: bool = False,
    encryption_keys: HistoryKeys = None,
) -> HistoryStore:
    """The conversation ``conversation_id`` in a Postgres table (created on first use), one
    row per message in order. Needs ``psycopg`` (``agent-lattice[postgres]``).
    ``encryption_keys`` (as :func:`create_jsonl_history_store`'s): each row's message is then
    encrypted (a jsonb ``{"encrypted": ..., "key_id": ...}``, bound to its conversation)."""
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
        from psycopg import sql
    except ImportError:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            'the Postgres history store needs psycopg: pip install "agent-lattice[postgres]"'
        ) from None
    ready = False
    lock = asyncio.Lock()
    name = sql.Identifier(table)  # the regex above already made it a plain identifier
    ciphers = _ciphers(encryption_keys, "create_postgres_history_store()")
    place = _PLACE + conversation_id.encode()

    async def connect() -> Any:
        nonlocal ready
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        if not ready:
            async with lock:
                await conn.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {} ("
                        " conversation_id text NOT NULL, seq integer NOT NULL,"
                        " message jsonb NOT NULL, PRIMARY KEY (conversation_id, seq))"
                    ).format(name)
                )
                ready = True
        return conn

    async def load() -> list[ModelMessage]:
        cipher = ciphers()
        async with await connect() as conn:
            cur = await conn.execute(
                sql.SQL("SELECT message FROM {} WHERE conversation_id = %s ORDER BY seq").format(
                    name
                ),
                (conversation_id,),
            )
            return [_stored(row[0], cipher, place) for row in await cur.fetchall()]

    async def append(message: ModelMessage) -> None:
        stored = _jsonb(message, ciphers(), place)
        async with await connect() as conn:
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {t} (conversation_id, seq, message) SELECT %s,"
                    " COALESCE(MAX(seq), 0) + 1, %s FROM {t} WHERE conversation_id = %s"
                ).format(t=name),
                (conversation_id, stored, conversation_id),
            )

    async def replace(messages: list[ModelMessage]) -> None:
        cipher = ciphers()
        async with await connect() as conn, conn.transaction():
            await conn.execute(
                sql.SQL("DELETE FROM {} WHERE conversation_id = %s").format(name),
                (conversation_id,),
            )
            async with conn.cursor() as cur:
                await cur.executemany(
                    sql.SQL(
                        "INSERT INTO {} (conversation_id, seq, message) VALUES (%s, %s, %s)"
                    ).format(name),
                    [
                        (conversation_id, i, _jsonb(m, cipher, place))
                        for i, m in enumerate(messages, 1)
                    ],
                )

    return HistoryStore(load, append, replace, fail_on_error=fail_on_error)


def _jsonb(message: ModelMessage, cipher: RecordCipher | None, place: bytes) -> Any:
    from psycopg.types.json import Jsonb

    return Jsonb(_dumped(message, cipher, place))


def check_history_store(value: Any) -> HistoryStore | None:
    if value is not None and not isinstance(value, HistoryStore):
        raise OptionError(
            "AgentOptions: history_store must be a HistoryStore (create_jsonl_history_store(), "
            f"define_history_store(), ...); got {type(value).__name__}"
        )
    return value
