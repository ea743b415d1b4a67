"""MCP tool call results as the model sees them: content blocks (text, images, resources as
text) in a tool result, and a failure described in one line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ._tool import ToolResult

__all__ = ["describe_error", "field_of", "tool_result"]


def tool_result(result: Any) -> ToolResult:
    """An MCP ``CallToolResult`` as a tool result."""
    return ToolResult(
        content=_content_blocks(result), is_error=bool(field_of(result, "is_error", "isError"))
    )


def field_of(obj: Any, *names: str) -> Any:
    """The first of ``names`` (snake_case, then the wire's camelCase) that ``obj`` has set."""
    for n in names:
        value = getattr(obj, n, None)
        if value is not None:
            return value
    return None


def _content_blocks(result: Any) -> list[dict[str, Any]] | str:
    """MCP content → Anthropic tool_result content (text, images; resources as text)."""
    blocks: list[dict[str, Any]] = []
    for item in getattr(result, "content", None) or []:
        kind = getattr(item, "type", None)
        if kind == "text":
            blocks.append({"type": "text", "text": item.text})
        elif kind == "image":
            media = field_of(item, "mime_type", "mimeType")
            blocks.append(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": media, "data": item.data},
                }
            )
        elif kind == "resource":
            res = item.resource
            text = getattr(res, "text", None)
            blocks.append(
                {
                    "type": "text",
                    "text": text if text is not None else f"[binary resource {res.uri}]",
                }
            )
        elif kind == "resource_link":
            blocks.append({"type": "text", "text": f"[resource {item.name}: {item.uri}]"})
        else:
            blocks.append({"type": "text", "text": f"[unsupported MCP content: {kind}]"})
    structured = field_of(result, "structured_content", "structuredContent")
    if not blocks and structured is not None:
        blocks.append({"type": "text", "text": json.dumps(structured, ensure_ascii=False)})
    if len(blocks) == 1 and blocks[0]["type"] == "text":
        return blocks[0]["text"]
    return blocks or ""


def describe_error(err: BaseException) -> str:
    """An error in one line: its type and message (a group's first leaf)."""
    if isinstance(err, BaseExceptionGroup):
        leaves = [e for e in _leaves(err)]
        if leaves:
            err = leaves[0]
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def _leaves(group: BaseExceptionGroup[Any]) -> Sequence[BaseException]:
    out: list[BaseException] = []
    for e in group.exceptions:
        out.extend(_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out
