"""Strict option checking shared by every factory."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from ._errors import OptionError

__all__ = [
    "check_endpoint",
    "check_options",
    "check_positive",
    "check_request_options",
    "check_timeout",
]


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


REASONING_EFFORTS = ("low", "high", "max")


def check_request_options(kind: str, options: Mapping[str, Any]) -> None:
    """Validate output_format / thinking_config / reasoning_effort where they are given."""
    fmt = options.get("output_format")
    if fmt is not None and fmt != "json":
        schema = fmt.get("schema") if isinstance(fmt, Mapping) else None
        if not (
            isinstance(fmt, Mapping)
            and fmt.get("type") == "json_schema"
            and isinstance(schema, Mapping)
        ):
            raise OptionError(
                f'{kind}: output_format must be "json" or {{"type": "json_schema", "schema": {{...}}}}; got {fmt!r}'
            )
    thinking = options.get("thinking_config")
    if thinking is not None:
        kind_ = thinking.get("type") if isinstance(thinking, Mapping) else None
        budget = thinking.get("budget_tokens") if isinstance(thinking, Mapping) else None
        if kind_ not in ("adaptive", "enabled", "disabled") or (
            kind_ == "enabled"
            and (not isinstance(budget, int) or isinstance(budget, bool) or budget < 1)
        ):
            raise OptionError(
                f'{kind}: thinking_config must be {{"type": "adaptive"}}, {{"type": "disabled"}} or '
                f'{{"type": "enabled", "budget_tokens": <positive int>}}; got {thinking!r}'
            )
    request_timeout = options.get("request_timeout_ms")
    if request_timeout is not None and (
        not isinstance(request_timeout, int)
        or isinstance(request_timeout, bool)
        or request_timeout < 1
    ):
        raise OptionError(
            f"{kind}: request_timeout_ms must be a positive integer (milliseconds); got {request_timeout!r}"
        )
    deadline = options.get("timeout")
    if deadline is not None and (
        isinstance(deadline, bool) or not isinstance(deadline, int | float) or deadline <= 0
    ):
        raise OptionError(f"{kind}: timeout must be a positive number of seconds; got {deadline!r}")
    check_timeout(options.get("approval_timeout_s"), f"{kind}: approval_timeout_s")
    check_positive(options.get("max_budget_usd"), f"{kind}: max_budget_usd", "US dollars")
    effort = options.get("reasoning_effort")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise OptionError(
            f"{kind}: reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}; got {effort!r}"
        )


def check_timeout(value: Any, where: str) -> float | None:
    """A positive, finite number of seconds (or None)."""
    return check_positive(value, where, "seconds")


def check_positive(value: Any, where: str, unit: str) -> float | None:
    """A positive, finite number of ``unit`` (or None)."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise OptionError(f"{where} must be a positive number of {unit}; got {value!r}")
    return float(value)


def check_endpoint(options: Mapping[str, Any]) -> None:
    """``api_key`` and ``base_url`` are checked here, at assembly: a wrong one otherwise
    shows up only as a failing model request, after retries."""
    api_key = options.get("api_key")
    if api_key is not None and (not isinstance(api_key, str) or not api_key.strip()):
        shown = type(api_key).__name__ if isinstance(api_key, str) else repr(api_key)
        raise OptionError(f"AgentOptions: api_key must be a non-empty string; got {shown}")
    base_url = options.get("base_url")
    if base_url is None:
        return
    parts = urlsplit(base_url) if isinstance(base_url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise OptionError(
            "AgentOptions: base_url must be an http:// or https:// URL with a host "
            f"(for example https://api.anthropic.com); got {base_url!r}"
        )
    try:
        parts.port  # noqa: B018 - parsing the port is what raises on a bad one
    except ValueError as err:
        raise OptionError(f"AgentOptions: base_url has a bad port: {base_url!r} ({err})") from None
