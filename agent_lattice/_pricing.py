# pyright: strict
"""What a model request costs, in US dollars, from its token usage.

``ANTHROPIC_PRICES`` is Anthropic's public price list (USD per million tokens), keyed by
model-id prefix: the longest key a model id starts with prices it, so ``claude-sonnet-4-5``
covers ``claude-sonnet-4-5-20250929`` too. The keys stop at a family's version so that a
newer model (``claude-opus-4-7``) is not priced as an older one: a model no key covers has
an unknown cost (``None``), never zero. An agent's own ``pricing=`` replaces the table.

Cache writes are priced at the 5-minute rate (the API's default cache lifetime; 1-hour writes
cost more). Sonnet 4 and 4.5 requests that read more than 200,000 input tokens (the 1M-context
beta) are priced at their long-context rates, for the whole request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import OptionError
from ._messages import Usage

__all__ = [
    "ANTHROPIC_PRICES",
    "ModelPrice",
    "check_priced",
    "model_price",
    "price_option",
    "request_cost",
    "total_cost",
]

_MILLION = 1_000_000
# a request reading more input than this (cache included) is a long-context request
LONG_CONTEXT_TOKENS = 200_000


@dataclass(frozen=True)
class ModelPrice:
    """USD per million tokens: fresh input, output, cache writes and cache reads; and,
    for models with a long-context tier, the prices of a request past 200,000 input tokens."""

    input: float
    output: float
    cache_write: float
    cache_read: float
    long_context: ModelPrice | None = None

    def cost(self, usage: Usage) -> float:
        """What one request with this usage costs."""
        read = (
            usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens
        )
        price = self.long_context if self.long_context and read > LONG_CONTEXT_TOKENS else self
        return (
            usage.input_tokens * price.input
            + usage.output_tokens * price.output
            + usage.cache_creation_input_tokens * price.cache_write
            + usage.cache_read_input_tokens * price.cache_read
        ) / _MILLION


def _price(input: float, output: float, long_context: ModelPrice | None = None) -> ModelPrice:
    """Anthropic's cache prices follow the input price: writes 1.25x, reads 0.1x."""
    return ModelPrice(input, output, round(input * 1.25, 6), round(input * 0.1, 6), long_context)


_OPUS_4_5 = _price(5.0, 25.0)
_OPUS = _price(15.0, 75.0)
_SONNET = _price(3.0, 15.0)
_SONNET_LONG = _price(3.0, 15.0, long_context=_price(6.0, 22.5))
_HAIKU_4_5 = _price(1.0, 5.0)

ANTHROPIC_PRICES: Mapping[str, ModelPrice] = {
    "claude-opus-4-6": _OPUS_4_5,
    "claude-opus-4-5": _OPUS_4_5,
    "claude-opus-4-1": _OPUS,
    "claude-opus-4-0": _OPUS,
    "claude-opus-4-2025": _OPUS,  # claude-opus-4-20250514
    "claude-3-opus": _OPUS,
    "claude-sonnet-4-6": _SONNET,
    "claude-sonnet-4-5": _SONNET_LONG,
    "claude-sonnet-4-0": _SONNET_LONG,
    "claude-sonnet-4-2025": _SONNET_LONG,  # claude-sonnet-4-20250514
    "claude-3-7-sonnet": _SONNET,
    "claude-3-5-sonnet": _SONNET,
    "claude-haiku-4-5": _HAIKU_4_5,
    "claude-3-5-haiku": ModelPrice(0.8, 4.0, 1.0, 0.08),
    "claude-3-haiku": ModelPrice(0.25, 1.25, 0.3, 0.03),
}
"""Anthropic's published prices (USD per million tokens), by model-id prefix."""


def model_price(model: str | None) -> ModelPrice | None:
    """The price list's entry for ``model`` (the longest prefix it starts with), or None."""
    if not model:
        return None
    keys = [k for k in ANTHROPIC_PRICES if model.startswith(k)]
    return ANTHROPIC_PRICES[max(keys, key=len)] if keys else None


def request_cost(
    usage: Usage | None, served: str | None, model: str, pricing: ModelPrice | None
) -> float | None:
    """What one request cost: at the agent's own ``pricing``, else at the list price of the
    model that served it (or the one asked for, when a gateway renames it); None when
    neither is known or the provider reported no usage."""
    if usage is None:
        return None
    price = pricing or model_price(served) or model_price(model)
    return price.cost(usage) if price is not None else None


_FIELDS = ("input", "output", "cache_write", "cache_read")


def price_option(value: Any, kind: str) -> ModelPrice | None:
    """The ``pricing`` option: a ``ModelPrice``, or a mapping with ``input`` and ``output``
    (USD per million tokens) and optionally ``cache_write`` and ``cache_read`` (default: the
    input price)."""
    if value is None or isinstance(value, ModelPrice):
        return value
    if not isinstance(value, Mapping):
        raise OptionError(
            f'{kind}: pricing must be a mapping like {{"input": 3.0, "output": 15.0, '
            f'"cache_write": 3.75, "cache_read": 0.3}} (USD per million tokens); got {value!r}'
        )
    given: Mapping[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
    unknown = sorted(set(given) - set(_FIELDS))
    if unknown:
        raise OptionError(
            f"{kind}: pricing has unknown key(s) {', '.join(map(repr, unknown))}; "
            f"use {', '.join(_FIELDS)}"
        )
    for name in ("input", "output"):
        if name not in given:
            raise OptionError(f"{kind}: pricing needs {name!r} (USD per million tokens)")
    prices: dict[str, float] = {}
    for name in _FIELDS:
        price = given.get(name, given["input"])
        if isinstance(price, bool) or not isinstance(price, int | float) or price < 0:
            raise OptionError(
                f"{kind}: pricing[{name!r}] must be a number >= 0 (USD per million tokens); "
                f"got {price!r}"
            )
        prices[name] = float(price)
    return ModelPrice(
        prices["input"], prices["output"], prices["cache_write"], prices["cache_read"]
    )


def check_priced(model: str, pricing: ModelPrice | None, where: str) -> None:
    """A budget needs a price: a model the price list does not know would never reach it."""
    if pricing is None and model_price(model) is None:
        raise OptionError(
            f"{where}: max_budget_usd needs a price for model {model!r}, which the price list "
            '(ANTHROPIC_PRICES) does not have; give the agent pricing={"input": ..., '
            '"output": ...} (USD per million tokens)'
        )


def total_cost(shares: Mapping[str, float | None]) -> float | None:
    """A query's cost from every agent's share: None when one of them is unknown."""
    values = list(shares.values())
    return None if any(c is None for c in values) else sum(c for c in values if c is not None)
