"""Strict option checking shared by every factory."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._errors import OptionError

__all__ = ["check_options"]


def check_options(
    kind: str, options: Mapping[str, Any], allowed: Iterable[str], *, prefix: str | None = None
) -> None:
    """Raise :class:`OptionError` for the first unknown key, with the seeds' wording."""
    allowed_set = set(allowed)
    for key in options:
        if key not in allowed_set:
            head = prefix if prefix is not None else f"{kind}:"
            raise OptionError(
                f'{head} unknown option "{key}". Check for a typo, or upgrade the SDK if this '
                "option was added in a newer version."
            )
