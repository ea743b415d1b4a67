"""The contract between the agent loop and a model provider."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from .._errors import LatticeError
from .._messages import ModelMessage
from ..tools._tool import ToolSpec

__all__ = ["EventSink", "ModelClient", "ModelRequest", "ProviderError"]

EventSink = Callable[[dict[str, Any]], Awaitable[None]]
"""Receives each raw provider stream event (as a JSON dict) while a response streams."""


class ModelRequest(BaseModel):
    """One request to the model: what the agent loop asks, independent of the provider."""

    model: str
    messages: list[ModelMessage]
    system: str | None = None
    tools: list[ToolSpec] = Field(default_factory=list)
    max_tokens: int = 4096
    stream: bool = True
    thinking: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    output_format: dict[str, Any] | None = None
    timeout_ms: int | None = None
    # ``messages`` as a Messages API request body carries them (``ModelMessage.wire_json``),
    # one JSON text each, when the runtime has them encoded already (its transcript cache
    # keeps them so): a client that sends that form may join these instead of encoding the
    # whole conversation again. None: encode ``messages``.
    wire_messages: list[str] | None = Field(default=None, exclude=True, repr=False)


class ProviderError(LatticeError):
    """A provider failure, classified once: retryable or not, and how long to wait.

    Retryable: 408, 409, 429, 5xx, 529/overloaded, connection failures and timeouts.
    Everything else (other 4xx) is final and reaches the caller as an error result.
    ``error_type="connection"`` (the provider could not be reached at all) is retried only
    for ``ActivitySettings.model_unreachable_give_up_s``; say where in ``message``.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        retryable: bool,
        retry_after: float | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.retryable = retryable
        self.retry_after = retry_after
        self.error_type = error_type


RETRYABLE_STATUS = frozenset({408, 409, 429})


def is_retryable_status(status: int | None) -> bool:
    return status is None or status in RETRYABLE_STATUS or status >= 500


@runtime_checkable
class ModelClient(Protocol):
    """Anything that turns a :class:`ModelRequest` into an assistant :class:`ModelMessage`.

    ``on_event`` receives raw stream events when ``request.stream`` is true. The returned
    message should carry ``usage`` and ``stop_reason`` (zeroed usage is accepted) and may carry
    ``provider_response_id`` and ``model``. Raise :class:`ProviderError` to tell the runtime
    whether a failure is worth retrying; any other exception is retried as transient.
    """

    async def create(
        self, request: ModelRequest, *, on_event: EventSink | None = None
    ) -> ModelMessage: ...
