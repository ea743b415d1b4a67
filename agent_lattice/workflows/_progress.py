# pyright: strict
"""The progress part of AgentWorkflow: what the run shows while it goes, in its current
details ("turn 3 · running Bash · 12.4k tokens", with any call waiting for approval beneath)
and its search attributes (tokens and cost after each turn, the outcome at the end)."""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from .._messages import Usage
    from .._pricing import total_cost
    from .._steps import input_tokens
    from ._types import AgentRunInput
    from ._visibility import compact_tokens, progress_updates

__all__ = ["SEARCH_ATTRIBUTES_PATCH", "Progress"]

# runs recorded before the search attributes upserted none
SEARCH_ATTRIBUTES_PATCH = "lattice-search-attributes"


class Progress:
    """AgentWorkflow's progress; :meth:`_init_progress` sets its state."""

    _input: AgentRunInput
    _usage: Usage
    # from Delegating and Approvals
    _cost_shares: Callable[[], dict[str, float | None]]
    _waiting_lines: Callable[[], list[str]]

    def _init_progress(self) -> None:
        self._doing = ""
        self._indexed: bool | None = None

    def _show(self, doing: str, *, index: bool = False, outcome: str | None = None) -> None:
        """The run is now ``doing`` (``turn 3 · running Bash``): its current details, and
        with ``index``, when the server has them, its tokens, cost and (at the end) outcome
        as search attributes (an upsert is a history event: once per turn, and the end)."""
        usage = self._usage
        cost = total_cost(self._cost_shares())
        self._doing = f"{doing} · {compact_tokens(input_tokens(usage) + usage.output_tokens)}"
        if cost is not None:
            self._doing += f" · ${cost:.4f}"
        self._show_details()
        if index and self._indexing():
            workflow.upsert_search_attributes(  # pyright: ignore[reportUnknownMemberType]
                progress_updates(input_tokens(usage), usage.output_tokens, cost, outcome)
            )

    def _show_details(self) -> None:
        """Progress first, then the calls waiting for a person (the approvals' lines)."""
        workflow.set_current_details(
            "\n".join(x for x in [self._doing, *self._waiting_lines()] if x)
        )

    def _indexing(self) -> bool:
        """Whether this run upserts search attributes: its starter found them registered,
        and the run is not one recorded before they existed."""
        if self._indexed is None:
            self._indexed = self._input.search_attributes and workflow.patched(
                SEARCH_ATTRIBUTES_PATCH
            )
        return self._indexed
