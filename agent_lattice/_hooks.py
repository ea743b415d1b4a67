"""Hooks: shape what the model sees without deciding what runs (seeds: Hooks).

Host code, run in the worker (activities), never in workflow code. A hook returns a
replacement or ``None``; it must not mutate what it receives. A hook that raises fails the
query: ``query()`` and ``prompt()`` raise :class:`~agent_lattice.HookError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._errors import OptionError
from ._messages import ModelMessage, ToolResultBlock
from .tools._tool import run_off_loop

__all__ = [
    "AgentHooks",
    "ModelRequestContext",
    "ToolResultContext",
    "create_composite_agent_hooks",
]

_HOOK_NAMES = ("on_tool_result", "on_model_request")


@dataclass(frozen=True)
class ModelRequestContext:
    """What the next model request would send; ``turn`` is 1-based within the query."""

    messages: list[ModelMessage]
    system_prompt: str | None
    turn: int


@dataclass(frozen=True)
class ToolResultContext:
    """A tool result on its way to the model (``error`` set when the call failed)."""

    tool_name: str
    tool_use_id: str
    input: Any
    result: ToolResultBlock
    error: str | None = None


@dataclass(frozen=True)
class AgentHooks:
    """``on_tool_result(ctx) -> ToolResultBlock | dict | None`` and
    ``on_model_request(ctx) -> {"messages": ..., "system_prompt": ...} | None``, sync or async."""

    on_tool_result: Callable[[ToolResultContext], Any] | None = None
    on_model_request: Callable[[ModelRequestContext], Any] | None = None

    @classmethod
    def coerce(cls, value: Any, *, where: str = "AgentOptions: hooks") -> AgentHooks | None:
        if value is None or isinstance(value, AgentHooks):
            return value
        if isinstance(value, Mapping):
            unknown = [k for k in value if k not in _HOOK_NAMES]
            if unknown:
                raise OptionError(
                    f'{where}: unknown hook "{unknown[0]}" (known: {", ".join(_HOOK_NAMES)})'
                )
            found = {k: value.get(k) for k in _HOOK_NAMES}
        else:
            found = {k: getattr(value, k, None) for k in _HOOK_NAMES}
        for name, fn in found.items():
            if fn is not None and not callable(fn):
                raise OptionError(f"{where}: {name} must be callable")
        return cls(**found)

    async def model_request(self, ctx: ModelRequestContext) -> ModelRequestContext:
        if self.on_model_request is None:
            return ctx
        change = await _call(self.on_model_request, ctx)
        if not change:
            return ctx
        messages = (
            change.get("messages", ctx.messages) if isinstance(change, Mapping) else ctx.messages
        )
        system = (
            change.get("system_prompt", ctx.system_prompt)
            if isinstance(change, Mapping)
            else ctx.system_prompt
        )
        return ModelRequestContext(
            messages=[
                m if isinstance(m, ModelMessage) else ModelMessage.model_validate(m)
                for m in messages
            ],
            system_prompt=system,
            turn=ctx.turn,
        )

    async def tool_result(self, ctx: ToolResultContext) -> ToolResultBlock:
        if self.on_tool_result is None:
            return ctx.result
        change = await _call(self.on_tool_result, ctx)
        if change is None:
            return ctx.result
        fields = change.model_dump() if isinstance(change, ToolResultBlock) else dict(change)
        # A hook rewrites the answer to one call; it cannot re-pair it with another call.
        fields["tool_use_id"] = ctx.tool_use_id
        fields["type"] = "tool_result"
        return ToolResultBlock.model_validate(fields)


async def _call(fn: Callable[[Any], Any], ctx: Any) -> Any:
    # a sync hook runs in a thread: one that blocks must not stall the worker's heartbeats
    return await run_off_loop(fn, ctx, executor=None)


def create_composite_agent_hooks(hooks: Sequence[Any | None]) -> AgentHooks:
    """Chain hooks in order, each receiving the previous one's output; ``None`` entries skip."""
    chain = [
        h for h in (AgentHooks.coerce(x, where="create_composite_agent_hooks") for x in hooks) if h
    ]

    async def on_model_request(ctx: ModelRequestContext) -> dict[str, Any]:
        for h in chain:
            ctx = await h.model_request(ctx)
        return {"messages": ctx.messages, "system_prompt": ctx.system_prompt}

    async def on_tool_result(ctx: ToolResultContext) -> ToolResultBlock:
        for h in chain:
            ctx = ToolResultContext(
                tool_name=ctx.tool_name,
                tool_use_id=ctx.tool_use_id,
                input=ctx.input,
                result=await h.tool_result(ctx),
                error=ctx.error,
            )
        return ctx.result

    return AgentHooks(on_tool_result=on_tool_result, on_model_request=on_model_request)
