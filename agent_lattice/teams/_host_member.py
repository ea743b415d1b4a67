"""A host AgentLike's answer (an object with ``query``/``prompt``/``interrupt`` that is no Agent
or Team): through its ``query()`` when someone follows its messages, else its ``prompt()``.

A host AgentLike team member runs inside an activity, so its messages reach the team query's
stream only when the activity passes them on: each durable message it yields (system,
assistant, user, result) goes to the activity's ``on_message``; token events (``stream_event``)
and anything else stay with the host, because every message passed on is kept in Temporal's
history.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

from .._messages import AssistantMessage, ResultMessage, SystemMessage, UserMessage

__all__ = ["DurableMessage", "ask_host", "host_messages"]

DurableMessage = SystemMessage | AssistantMessage | UserMessage | ResultMessage
OnMessage = Callable[[DurableMessage], Awaitable[None]]

_DURABLE: TypeAdapter[DurableMessage] = TypeAdapter(
    Annotated[DurableMessage, Field(discriminator="type")]
)
_DURABLE_TYPES = frozenset({"system", "assistant", "user", "result"})

# Where the host member of the tool call being run passes its messages (the tool activity of
# a team lead's ask sets it; None: the member answers through prompt() alone).
host_messages: ContextVar[OnMessage | None] = ContextVar("lattice_host_messages", default=None)


async def ask_host(target: Any, prompt: Any, on_message: OnMessage | None) -> ResultMessage:
    """``target``'s final result for ``prompt``. With ``on_message``: through its ``query()``,
    each durable message passed on as it comes (a ``query()`` that raises
    ``NotImplementedError`` before its first message: through ``prompt()``)."""
    if on_message is None:
        return await target.prompt(prompt)
    result: ResultMessage | None = None
    started = False
    try:
        stream = target.query(prompt)
        closing = (
            contextlib.aclosing(stream)
            if hasattr(stream, "aclose")
            else contextlib.nullcontext(stream)
        )
        async with closing as messages:
            async for item in messages:
                started = True
                message = _durable(item)
                if message is None:
                    continue
                await on_message(message)
                if isinstance(message, ResultMessage):
                    result = message
    except NotImplementedError:
        if started:
            raise
        return await target.prompt(prompt)
    if result is None:
        name = getattr(target, "name", None) or type(target).__name__
        raise RuntimeError(f"{name}: query() ended without a result message")
    return result


def _durable(item: Any) -> DurableMessage | None:
    """A durable message of ours (or its dict form), else None."""
    if isinstance(item, SystemMessage | AssistantMessage | UserMessage | ResultMessage):
        return item
    if isinstance(item, Mapping) and item.get("type") in _DURABLE_TYPES:
        try:
            return _DURABLE.validate_python(item)
        except ValidationError:
            return None
    return None
