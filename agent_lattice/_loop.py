"""Pure decisions of the agent loop, shared by the workflow and unit tests (no I/O, no Temporal)."""

from __future__ import annotations

from ._messages import ModelMessage, ToolResultBlock, ToolUseBlock

__all__ = ["TRUNCATED_TOOL_CALL", "truncated_results", "unknown_tool_result"]

TRUNCATED_TOOL_CALL = (
    "Your previous response was cut off at max_tokens, so this tool call was not executed: "
    "its input may be incomplete. Reissue the call with a shorter output."
)


def truncated_results(message: ModelMessage) -> list[ToolResultBlock]:
    """Error results for every tool call of a response truncated at ``max_tokens``."""
    return [
        ToolResultBlock(tool_use_id=use.id, content=TRUNCATED_TOOL_CALL, is_error=True)
        for use in message.tool_uses
    ]


def unknown_tool_result(use: ToolUseBlock, known: list[str]) -> ToolResultBlock:
    available = ", ".join(known) if known else "none"
    return ToolResultBlock(
        tool_use_id=use.id,
        content=f"Unknown tool {use.name!r}. Available tools: {available}.",
        is_error=True,
    )
