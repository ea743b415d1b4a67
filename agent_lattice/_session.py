"""One conversation's state, apart from the agent's definition: its history, where it stands
in the transcript store, how many queries it ran, and the query running on it now.

An :class:`~agent_lattice.Agent` is a definition (its config) plus a :class:`Session` plus the
query runner the client registers (:class:`QueryRunner`). The client (a query from a script)
and the activities (a query delegated to a live session) drive a session through the public
methods here only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from ._approvals import ApprovalDecision
from ._errors import ApprovalError, ConcurrentQueryError
from ._messages import ModelMessage, ResultMessage, SDKMessage
from ._steer import check_steer
from .history._stores import HistoryStore, QueryMirror, RunLandings, caught_up

__all__ = ["QueryRunner", "Session"]


class QueryRunner(Protocol):
    """One query in flight, as the client runs it (``agent_lattice.client`` implements it).

    ``messages()`` or ``result()`` is called once; either ends by absorbing the query's
    messages into its session and releasing it."""

    def messages(self) -> AsyncIterator[SDKMessage]: ...

    async def result(self) -> ResultMessage: ...

    def interrupt(self) -> bool: ...

    async def steer(self, text: str) -> bool: ...

    async def decide(self, decision: ApprovalDecision) -> None: ...

    async def detach(self) -> str: ...


class _Taken:
    """A session taken by a query its parent's run controls (a delegated query): only the
    parent can interrupt it."""

    def interrupt(self) -> bool:
        return False

    async def steer(self, text: str) -> bool:
        return False  # steer(workflow_id, text) reaches its run

    async def decide(self, decision: ApprovalDecision) -> None:
        raise ApprovalError(
            "this agent's query is a delegated run: decide on its approval requests through "
            "the agent that runs the top-level query, or resolve_approval(workflow_id, ...)"
        )


class TranscriptAppender(Protocol):
    """What a session needs of the transcript store: append messages after a head."""

    async def append(self, head: str | None, messages: Sequence[ModelMessage]) -> str | None: ...


class Session:
    """One conversation: history, transcript head, query counter and busy marker.

    Every view of one agent (the agent a host created, the lead a team runs with its member
    tools) shares one Session, so they share one history and run one query at a time."""

    def __init__(
        self, session_id: str, store: HistoryStore | None = None, *, fresh: bool = False
    ) -> None:
        self.id = session_id
        self.store = store
        # the id was made here (a new uuid): Temporal holds no earlier query of it to resume
        self.fresh = fresh
        # where its queries run (Agent.bind_runtime): a client Runtime; None: the default
        self.runtime: Any = None
        self._history: list[ModelMessage] = []
        self._loaded = False  # the history store (or Temporal) was read, or history replaced
        self._stored = True  # the history store holds the history (False after a failed write)
        # (len(history), transcript head) once the history is in the transcript store
        self._head: tuple[int, str | None] | None = None
        self._queries = 0
        self._run: QueryRunner | _Taken | None = None
        self._landings: RunLandings | None = None  # delegated runs' writes to the store

    # -- reading ---------------------------------------------------------------------------

    @property
    def history(self) -> list[ModelMessage]:
        """The conversation (a new list; the messages are the session's own)."""
        return list(self._history)

    @property
    def loaded(self) -> bool:
        """Whether the conversation was read (store or Temporal) or replaced."""
        return self._loaded

    @property
    def synced(self) -> bool:
        """Whether the history store holds the history (False after a failed write)."""
        return self._stored

    @property
    def busy(self) -> bool:
        return self._run is not None

    def last_input_tokens(self) -> int:
        """What the conversation's last model response reported reading (compaction trigger)."""
        for message in reversed(self._history):
            if message.role == "assistant" and message.usage is not None:
                u = message.usage
                return u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
        return 0

    # -- a query's life --------------------------------------------------------------------

    def reserve(self, run: QueryRunner | None = None) -> None:
        """Take the session for one query (``run``; none: a delegated query its parent
        controls). Raises :class:`ConcurrentQueryError` when a query holds it."""
        if self._run is not None:
            raise ConcurrentQueryError(
                "this Agent is already running a query; an Agent is one conversation. "
                "Create one Agent per concurrent conversation."
            )
        self._run = run if run is not None else _Taken()

    def release(self) -> None:
        self._run = None

    def interrupt(self) -> bool:
        """End the running query with ``interrupted``; False when none runs (or its parent
        controls it)."""
        return self._run.interrupt() if self._run is not None else False

    async def steer(self, text: str) -> bool:
        """A message for the running query's model; False when none runs (or its parent
        controls it). The text is checked first, whether a query runs or not."""
        check_steer(text)
        return await self._run.steer(text) if self._run is not None else False

    async def decide(self, decision: ApprovalDecision) -> None:
        """Apply a decision on an approval request of the running query (or of a run it
        delegated to)."""
        if self._run is None:
            raise ApprovalError(
                f"no query is running on session {self.id!r}: decide with "
                "resolve_approval(workflow_id, approval_id, ...) instead"
            )
        await self._run.decide(decision)

    async def load(self, resumed: tuple[list[ModelMessage], int] | None = None) -> None:
        """Before the first query: seed the history from the store, or else continue from
        what Temporal holds (``resumed``: its messages and query count; None when Temporal
        has nothing or was not asked)."""
        if self._loaded:
            return
        if resumed is not None:
            self._history, self._queries = resumed
        if self.store is not None:
            # the store seeds the history; what a query of a dead process kept after its last
            # write reaches the store now (see caught_up)
            kept = self._history if resumed is not None else None
            self._history, self._stored = await caught_up(self.store, kept)
        self._head = None
        self._loaded = True

    def next_query(self) -> int:
        """The next query's number in this session (its workflow id's suffix)."""
        self._queries += 1
        return self._queries

    async def transcript_head(self, store: TranscriptAppender) -> str | None:
        """The transcript head of the history (stored on first use, then kept)."""
        if self._head is None or self._head[0] != len(self._history):
            self._head = (len(self._history), await store.append(None, self._history))
        return self._head[1]

    def mirror(self) -> QueryMirror | None:
        """What writes a starting query's messages to the history store as they land."""
        store = self.store
        return QueryMirror(store, self._history, synced=self._stored) if store else None

    def landings(self) -> RunLandings:
        """The delegated runs' writes to the history store as their messages land."""
        assert self.store is not None
        if self._landings is None:
            self._landings = RunLandings(self.store)
        return self._landings

    async def absorb(
        self,
        added: list[ModelMessage],
        *,
        compacted_to: list[ModelMessage] | None = None,
        head: str | None = None,
        mirror: QueryMirror | None = None,
        conversation: list[ModelMessage] | None = None,
    ) -> None:
        """A finished query's messages into the history; the store gets what it does not
        hold yet (``mirror``: what the query wrote as its messages landed), or, when the
        query compacted the conversation, the whole new transcript. ``conversation``: the
        whole conversation after the query, when this process may not hold the one it
        started from (a delegated run another worker prepared)."""
        mirror = mirror or self.mirror()
        if compacted_to is not None:
            self._history = compacted_to
        elif conversation is not None:
            self._history = conversation
        else:
            self._history.extend(added)
        self._head = (len(self._history), head) if head is not None else None
        if mirror is not None:
            self._stored = False  # unknown until settled (settle may raise)
            self._stored = await mirror.settle(
                self._history, added, compacted=compacted_to is not None
            )

    async def replace(self, messages: list[ModelMessage]) -> None:
        """Install ``messages`` as the conversation (idle only); the store is replaced too."""
        if self._run is not None:
            raise ConcurrentQueryError(
                "replace_history() while a query is running; wait for it to finish"
            )
        self._history = messages
        self._head = None
        self._loaded = True
        if self.store is not None:
            self._stored = False
            self._stored = await self.store.replace_checked(messages)
