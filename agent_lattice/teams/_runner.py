"""``create_team_runner()`` (seeds: Team Mailbox Collaboration, AgentLike Composition): runs a
team's queries with a concurrency limit of its own.

A ``TeamRunner`` is an AgentLike: ``query()`` and ``prompt()`` run the team (its lead, with
the team runtime driving handoffs and mailbox work, at most ``max_concurrent_work_items``
work items at a time across member mailboxes), and ``interrupt()`` delegates to the lead. A
run-wide abort (``signal=``, ``timeout=``, a cancelled caller) marks the running and the
remaining accepted work ``cancelled`` before the ``error_abort`` result reaches the caller.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from .._errors import OptionError
from .._messages import ResultMessage, SDKMessage
from .._options import check_options
from ._team import MailWatcher, Team, final_result, work_item_limit

__all__ = ["TeamRunner", "create_team_runner"]

_RUNNER_OPTIONS = frozenset({"max_concurrent_work_items"})


class TeamRunner:
    """Runs ``team``'s queries, at most ``max_concurrent_work_items`` work items at a time.
    Build one with :func:`create_team_runner`."""

    def __init__(self, team: Team, max_concurrent_work_items: int) -> None:
        self.team = team
        self.max_concurrent_work_items = max_concurrent_work_items

    @property
    def name(self) -> str:
        return self.team.name

    def watch_mail(self, notify: MailWatcher) -> Callable[[], None]:
        return self.team.watch_mail(notify)

    def query(self, prompt: Any, **options: Any) -> AsyncIterator[SDKMessage]:
        """The lead's messages and the team runtime's events (``TeamRunnerMessage``)."""
        from .._agent import start_query

        return start_query(self.team.lead, prompt, options, team=self).messages()

    async def prompt(self, prompt: Any, **options: Any) -> ResultMessage:
        """Run the team and return the lead's final result (team-wide usage)."""
        return await final_result(self.query(prompt, **{"stream": False, **options}))

    def interrupt(self) -> bool:
        """Interrupt the running query (delegated to the team's lead, as a Team does): True
        when a query was interrupted, False when idle."""
        return self.team.lead.interrupt()


def create_team_runner(
    team: Team, options: Mapping[str, Any] | None = None, /, **kwargs: Any
) -> TeamRunner:
    """A runner for ``team`` (a :func:`create_team` team): ``max_concurrent_work_items``, a
    positive integer (default 1), bounds the work items it runs at once across member
    mailboxes; work for one mailbox stays serial."""
    if not isinstance(team, Team):
        raise OptionError(
            f"create_team_runner(): team must be a Team (create_team()); got {type(team).__name__}"
        )
    merged = {**(options or {}), **kwargs}
    check_options("TeamRunnerOptions", merged, _RUNNER_OPTIONS)
    limit = merged.get("max_concurrent_work_items", 1)
    return TeamRunner(team, work_item_limit(limit, "create_team_runner()"))
