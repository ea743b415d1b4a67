# pyright: strict
"""What a run shows to Temporal's visibility: its custom search attributes, its memo and its
current details.

The search attributes let an operator find and group runs (``temporal workflow list --query
'LatticeOutcome="error_max_budget"'``, ``lattice runs --outcome ...``, a column in the UI's
list): agent, session and model are set when the run starts, tokens and cost at a tool turn
``_progress.INDEX_EVERY`` after their last upsert, with the outcome when it ends. A server where they are not registered would fail the
workflow task that upserts them, over and over, so a run only sets them when its starter
found them registered (``AgentRunInput.search_attributes``; children inherit it), and
never because of them fails. The memo carries the prompt's first line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from temporalio.common import (
    SearchAttributeIndexedValueType,
    SearchAttributeKey,
    SearchAttributePair,
    SearchAttributeUpdate,
    TypedSearchAttributes,
)

__all__ = [
    "AGENT",
    "COST_USD",
    "INPUT_TOKENS",
    "LATTICE_ATTRIBUTES",
    "MODEL",
    "OUTCOME",
    "OUTPUT_TOKENS",
    "PROMPT_MEMO",
    "SEARCH_ATTRIBUTES",
    "SESSION",
    "compact_tokens",
    "progress_updates",
    "prompt_line",
    "start_attributes",
]

AGENT = SearchAttributeKey.for_keyword("LatticeAgent")
SESSION = SearchAttributeKey.for_keyword("LatticeSession")
MODEL = SearchAttributeKey.for_keyword("LatticeModel")
OUTCOME = SearchAttributeKey.for_keyword("LatticeOutcome")  # the result's subtype
# every input token the run's requests read (cache reads and writes included), and output
INPUT_TOKENS = SearchAttributeKey.for_int("LatticeInputTokens")
OUTPUT_TOKENS = SearchAttributeKey.for_int("LatticeOutputTokens")
COST_USD = SearchAttributeKey.for_float("LatticeCostUsd")  # unset while the cost is unknown

LATTICE_ATTRIBUTES: Sequence[SearchAttributeKey[Any]] = (
    AGENT,
    SESSION,
    MODEL,
    OUTCOME,
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    COST_USD,
)

# the names the dev server's --search-attribute flag takes for each type
_TYPE_NAMES: Mapping[SearchAttributeIndexedValueType, str] = {
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.INT: "Int",
    SearchAttributeIndexedValueType.DOUBLE: "Double",
}
SEARCH_ATTRIBUTES: Mapping[str, str] = {
    k.name: _TYPE_NAMES[k.indexed_value_type] for k in LATTICE_ATTRIBUTES
}
"""Name and type of each attribute (``temporal server start-dev --search-attribute N=T``)."""

# the memo key of the prompt's first line
PROMPT_MEMO = "lattice_prompt"
_PROMPT_LINE_CHARS = 200


def prompt_line(prompt: str | Sequence[Any]) -> str:
    """The prompt's first non-empty line of text (cut at 200 characters), for the memo."""
    if isinstance(prompt, str):
        text = prompt
    else:
        texts = [getattr(b, "text", None) or "" for b in prompt]
        text = "\n".join(t for t in texts if t)
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    return line if len(line) <= _PROMPT_LINE_CHARS else line[: _PROMPT_LINE_CHARS - 1] + "…"


def start_attributes(agent: str, session: str, model: str) -> TypedSearchAttributes:
    """What a run is known by from its start."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(AGENT, agent),
            SearchAttributePair(SESSION, session),
            SearchAttributePair(MODEL, model),
        ]
    )


def progress_updates(
    input_tokens: int, output_tokens: int, cost_usd: float | None, outcome: str | None = None
) -> list[SearchAttributeUpdate[Any]]:
    """The attributes that change as the run goes: its tokens and cost, then its outcome."""
    updates: list[SearchAttributeUpdate[Any]] = [
        INPUT_TOKENS.value_set(input_tokens),
        OUTPUT_TOKENS.value_set(output_tokens),
    ]
    # a cost that became unknown (a child on a model without a price) is no longer shown
    updates.append(COST_USD.value_set(cost_usd) if cost_usd is not None else COST_USD.value_unset())
    if outcome is not None:
        updates.append(OUTCOME.value_set(outcome))
    return updates


def compact_tokens(tokens: int) -> str:
    """``850 tokens``, ``12.4k tokens``, ``1.2M tokens``."""
    if tokens < 1000:
        return f"{tokens} tokens"
    if tokens < 1_000_000:
        return f"{tokens / 1000:.1f}k tokens"
    return f"{tokens / 1_000_000:.1f}M tokens"
