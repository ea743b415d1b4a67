"""Pure decisions of the agent loop, shared by the workflow and unit tests (no I/O, no Temporal)."""

from __future__ import annotations

from typing import Any

from ._messages import ContentBlock, ModelMessage, ToolResultBlock, ToolUseBlock
from .tools._batches import BatchDecision, rejection_content
from .tools._tool import SUBMIT_OUTPUT_TOOL_NAME

__all__ = [
    "TRUNCATED_TOOL_CALL",
    "alternating",
    "batch_rejection",
    "rejected_results",
    "text_of",
    "truncated_results",
    "unknown_tool_result",
]

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


def batch_rejection(
    message: ModelMessage,
    policy_rejection: BatchDecision | dict[str, Any] | None,
    requires_output: bool,
) -> BatchDecision | None:
    """Why a whole batch must not run: ``submit_output`` not alone in its batch, or the
    host's batch policy said no (its decision, or the decision's fields)."""
    uses = message.tool_uses
    submissions = [u.id for u in uses if u.name == SUBMIT_OUTPUT_TOOL_NAME]
    if requires_output and submissions and len(uses) > 1:
        return BatchDecision(
            code="submit_output_exclusive_batch",
            message=f"{SUBMIT_OUTPUT_TOOL_NAME} must be the only tool call in its response.",
            conflicting_tool_call_ids=[u.id for u in uses],
            suggested_next_step=(
                f"Finish the other calls first, then call {SUBMIT_OUTPUT_TOOL_NAME} once, alone."
            ),
        )
    if isinstance(policy_rejection, dict):
        return BatchDecision(**policy_rejection)
    return policy_rejection


def rejected_results(message: ModelMessage, decision: BatchDecision) -> list[ToolResultBlock]:
    content = rejection_content(decision)
    return [
        ToolResultBlock(tool_use_id=use.id, content=content, is_error=True)
        for use in message.tool_uses
    ]


def text_of(content: str | list[dict[str, Any]]) -> str:
    """The text of a tool result's content (a string, or blocks whose text blocks count)."""
    if isinstance(content, str):
        return content
    return "".join(str(b.get("text", "")) for b in content if b.get("type") == "text")


def alternating(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The conversation with consecutive messages of one role merged into one, as providers
    require (an interrupted query leaves its prompt unanswered, then the next prompt follows).
    Tool results stay first in a merged user message, as the Messages API wants them."""
    merged: list[ModelMessage] = []
    for message in messages:
        if not merged or merged[-1].role != message.role:
            merged.append(message)
            continue
        blocks: list[ContentBlock] = [*merged[-1].blocks, *message.blocks]
        results = [b for b in blocks if isinstance(b, ToolResultBlock)]
        others = [b for b in blocks if not isinstance(b, ToolResultBlock)]
        merged[-1] = message.model_copy(update={"content": [*results, *others]})
    return merged
