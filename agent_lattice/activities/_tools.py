"""Host code around a tool call, run by the tool activities: its context, the permission
callback, and the threads that run sync handlers off the worker's event loop."""

from __future__ import annotations

from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING

from temporalio import activity

from .._errors import ConfigurationError
from .._tools import PermissionRequest, ToolContext, ToolResult, run_off_loop
from ..workflows._types import DelegateCallInput, ToolCallInput

if TYPE_CHECKING:
    from .._agent import Agent
    from .._messages import ToolUseBlock

__all__ = ["DEFAULT_TOOL_THREADS", "ToolThreads", "invalid_input", "permission_denial"]

# sync tool handlers (and permission callbacks) a worker runs at once; more wait for a thread
DEFAULT_TOOL_THREADS = 32


class ToolThreads:
    """The threads of one worker's sync tool handlers, started on first use."""

    def __init__(self, size: int = DEFAULT_TOOL_THREADS) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigurationError(f"tool_threads must be a positive integer; got {size!r}")
        self.size = size
        self._pool: ThreadPoolExecutor | None = None

    @property
    def executor(self) -> Executor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.size, thread_name_prefix="lattice-tool")
        return self._pool


def tool_context(agent: Agent, input: ToolCallInput | DelegateCallInput) -> ToolContext:
    use, info = input.tool_use, activity.info()
    return ToolContext(
        session_id=input.session_id,
        tool_use_id=use.id,
        tool_name=use.name,
        agent_name=agent.config.name,
        context=input.context,
        run_id=input.run_id,
        workspace_grants=tuple(input.workspace_grants),
        workflow_id=info.workflow_id,
        attempt=info.attempt,
    )


def invalid_input(use: ToolUseBlock) -> ToolResult | None:
    """The model's input was no JSON object: the call is answered at once, never run."""
    if use.input_error is None:
        return None
    return ToolResult(
        content=f"Invalid input for tool {use.name!r}: {use.input_error}", is_error=True
    )


async def permission_denial(
    agent: Agent, tool_name: str, tool_input: object, ctx: ToolContext, executor: Executor
) -> ToolResult | None:
    """Ask the host's permission callback; a denial becomes an error result for the model.
    A sync callback runs in a tool thread (it may block, asking a human)."""
    permission = agent.config.permission
    if permission is None:
        return None
    decision = await run_off_loop(
        permission,
        PermissionRequest(
            tool_name=tool_name,
            input=tool_input,
            tool_use_id=ctx.tool_use_id,
            session_id=ctx.session_id,
            context=ctx.context,
        ),
        executor=executor,
    )
    behavior = (
        decision.get("behavior")
        if isinstance(decision, dict)
        else getattr(decision, "behavior", None)
    )
    if behavior == "allow":
        return None
    message = (
        decision.get("message")
        if isinstance(decision, dict)
        else getattr(decision, "message", None)
    ) or (f"Permission to use {tool_name!r} was denied.")
    return ToolResult(content=message, is_error=True)
