"""Which agents a worker serves: by definition key, and by live session for inline agents."""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from ..teams._team import Team, team_of

if TYPE_CHECKING:
    from .._agent import Agent
    from ..tracing._tracers import ContextTracer


class AgentRegistry:
    """Resolves an agent key (name + config fingerprint) to the Agent holding code and client.

    Agents registered by session (the inline agents of a script) win for their own queries,
    so two sessions of one definition keep their own tool closures and credentials. Session
    entries are weak: a registry never keeps an abandoned Agent alive.
    """

    def __init__(self, agents: Iterable[Agent] = ()) -> None:
        self._by_key: dict[str, Agent] = {}
        # by (session id, key): the views of one session (a team's lead and the host's agent
        # it was made from) have keys of their own
        self._by_session: weakref.WeakValueDictionary[tuple[str, str], Agent] = (
            weakref.WeakValueDictionary()
        )
        # per-query tracers (``query(tracer=)``) by session, and the query that bound each
        self._tracers: dict[str, tuple[ContextTracer, str]] = {}
        for agent in agents:
            self.add(agent)

    def add(self, agent: Agent) -> None:
        self._by_key.setdefault(agent.key, agent)

    def add_session(self, agent: Agent) -> None:
        self._by_session[(agent.session_id, agent.key)] = agent

    def get(self, key: str, session_id: str | None = None) -> Agent | None:
        if session_id is not None:
            agent = self._by_session.get((session_id, key))
            if agent is not None:
                return agent
        return self._by_key.get(key)

    def team_of(self, key: str, session_id: str | None = None) -> Team | None:
        """The team whose lead runs as ``key`` (the session's own, else the definition's)."""
        lead = self.get(key, session_id)
        return team_of(lead) if lead is not None else None

    def bind_tracer(self, session_id: str, tracer: ContextTracer, root: str) -> None:
        """Trace ``session_id``'s runs with ``tracer`` until the query ``root`` releases it."""
        self._tracers[session_id] = (tracer, root)

    def tracer_of(self, session_id: str) -> tuple[ContextTracer, str] | None:
        """The per-query tracer bound to ``session_id``, and the query that bound it."""
        return self._tracers.get(session_id)

    def release_tracers(self, root: str) -> None:
        """The query ``root`` ended: its session and its delegates' are unbound."""
        for session_id in [s for s, (_, r) in self._tracers.items() if r == root]:
            del self._tracers[session_id]

    def keys(self) -> list[str]:
        return sorted(set(self._by_key) | {a.key for a in self._by_session.values()})

    def __iter__(self) -> Iterator[Agent]:
        return iter(list(self._by_key.values()))

    def __len__(self) -> int:
        return len(self._by_key)
