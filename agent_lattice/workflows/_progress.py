# pyright: strict
"""The progress part of AgentWorkflow: what the run shows while it goes, in its current
details ("turn 3 · running Bash · 12.4k tokens", with any call waiting for approval beneath)
and its search attributes (tokens and cost at a tool turn ``index_every_s`` after their last
upsert, and with the outcome at the end)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from .._pricing import total_cost
    from .._steps import input_tokens
    from ._books import Books
    from ._types import AgentRunInput
    from ._visibility import compact_tokens, progress_updates

__all__ = ["SEARCH_ATTRIBUTES_PATCH", "Progress"]

# runs recorded before the search attributes upserted none (a run whose input has
# ``index_every_s`` is newer: it needs no marker)
SEARCH_ATTRIBUTES_PATCH = "lattice-search-attributes"


class Progress:
    """Owned by an AgentWorkflow: what its run shows while it goes."""

    def __init__(self, input: AgentRunInput, books: Books) -> None:
        self._input = input
        self._books = books
        self._doing = ""
        self._waiting: list[str] = []  # a line for each call waiting for a person
        self._indexed: bool | None = None
        every = input.index_every_s  # None: at every tool turn (an older run)
        self._index_every = timedelta(seconds=every) if every is not None else None
        self._indexed_at = workflow.now()  # the start attributes

    def show(self, doing: str, *, index: bool = False, outcome: str | None = None) -> None:
        """The run is now ``doing`` (``turn 3 · running Bash``): its current details, and
        with ``index``, when the server has them, its tokens, cost and (at the end) outcome
        as search attributes (an upsert is a history event: at the end, and at a turn
        ``index_every_s`` after the last)."""
        usage = self._books.usage
        cost = total_cost(self._books.cost_shares())
        self._doing = f"{doing} · {compact_tokens(input_tokens(usage) + usage.output_tokens)}"
        if cost is not None:
            self._doing += f" · ${cost:.4f}"
        self._show_details()
        if index and self._indexing() and (outcome is not None or self._index_due()):
            workflow.upsert_search_attributes(  # pyright: ignore[reportUnknownMemberType]
                progress_updates(input_tokens(usage), usage.output_tokens, cost, outcome)
            )
            self._indexed_at = workflow.now()

    def _index_due(self) -> bool:
        """Whether a turn's tokens and cost are due: ``index_every_s`` after the last upsert
        (every turn in a run recorded before the interval)."""
        every = self._index_every
        return every is None or workflow.now() - self._indexed_at >= every

    def show_waiting(self, lines: list[str]) -> None:
        """The calls now waiting for a person, a line each beneath the progress."""
        self._waiting = lines
        self._show_details()

    def _show_details(self) -> None:
        workflow.set_current_details("\n".join(x for x in [self._doing, *self._waiting] if x))

    def _indexing(self) -> bool:
        """Whether this run upserts search attributes: its starter found them registered,
        and the run is not one recorded before they existed."""
        if self._indexed is None:
            wanted = self._input.search_attributes
            # a marker upserts TemporalChangeVersion too: a visibility write per run
            self._indexed = wanted and (
                self._index_every is not None or workflow.patched(SEARCH_ATTRIBUTES_PATCH)
            )
        return self._indexed
